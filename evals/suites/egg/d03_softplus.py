# family: elementwise
# kind: single-op
# D3 (file 2 of 2): softplus(beta=1, threshold=20) on randn (4096, 196608).
import torch
import torch.nn as nn
import torch.nn.functional as F

ROWS = 4096
COLS = 196608
BETA = 1.0
THRESHOLD = 20.0


class Model(nn.Module):
    def __init__(self, beta: float, threshold: float):
        super().__init__()
        self.beta = beta
        self.threshold = threshold

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.softplus(x, beta=self.beta, threshold=self.threshold)


def get_inputs():
    return [torch.randn(ROWS, COLS)]


def get_init_inputs():
    return [BETA, THRESHOLD]
