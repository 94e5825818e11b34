# family: scan
# kind: fused-chain
# Cumsum along dim 1 of x where a boolean mask is true (zeros elsewhere), (16384, 4096).
import torch
import torch.nn as nn

ROWS = 16384
COLS = 4096


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return torch.cumsum(x * mask, dim=1)


def get_inputs():
    return [torch.randn(ROWS, COLS), torch.rand(ROWS, COLS) < 0.5]


def get_init_inputs():
    return []
