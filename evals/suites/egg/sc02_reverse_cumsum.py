# family: scan
# kind: fused-chain
# Reverse (suffix) cumsum along dim 1 of (16384, 4096): flip, cumsum, flip.
import torch
import torch.nn as nn

ROWS = 16384
COLS = 4096


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cumsum(x.flip(1), dim=1).flip(1)


def get_inputs():
    return [torch.randn(ROWS, COLS)]


def get_init_inputs():
    return []
