# family: reduction
# kind: single-op
# Sum over dim 0 (a column reduction) of (8192, 8192).
import torch
import torch.nn as nn

ROWS = 8192
COLS = 8192


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sum(x, dim=0)


def get_inputs():
    return [torch.randn(ROWS, COLS)]


def get_init_inputs():
    return []
