# family: sort
# kind: single-op
# Sort each row and keep the values: an op family the built-in expert model does not cover, so
# the smoke suite always has one task that must end as an honest "no kernel" row.
import torch
import torch.nn as nn

ROWS = 32
COLS = 100


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sort(x, dim=1).values


def get_inputs():
    return [torch.randn(ROWS, COLS)]


def get_init_inputs():
    return []
