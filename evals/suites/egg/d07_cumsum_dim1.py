# family: scan
# kind: single-op
# D7: inclusive cumsum along dim 1 of (32768, 32768).
import torch
import torch.nn as nn

ROWS = 32768
COLS = 32768


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cumsum(x, dim=1)


def get_inputs():
    return [torch.randn(ROWS, COLS)]


def get_init_inputs():
    return []
