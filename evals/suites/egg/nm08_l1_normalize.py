# family: normalization
# kind: fused-chain
# Divide each row by its mean absolute value over dim 1, x (16384, 4096).
import torch
import torch.nn as nn

ROWS = 16384
DIM = 4096


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x / torch.mean(torch.abs(x), dim=1, keepdim=True)


def get_inputs():
    return [torch.randn(ROWS, DIM)]


def get_init_inputs():
    return []
