# family: elementwise
# kind: single-op
# D3 (file 1 of 2): ELU (alpha=1) on randn (4096, 196608).
import torch
import torch.nn as nn
import torch.nn.functional as F

ROWS = 4096
COLS = 196608
ALPHA = 1.0


class Model(nn.Module):
    def __init__(self, alpha: float):
        super().__init__()
        self.alpha = alpha

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.elu(x, alpha=self.alpha)


def get_inputs():
    return [torch.randn(ROWS, COLS)]


def get_init_inputs():
    return [ALPHA]
