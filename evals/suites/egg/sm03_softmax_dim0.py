# family: softmax
# kind: single-op
# Softmax over dim 0 (columns) of (4096, 8192).
import torch
import torch.nn as nn

ROWS = 4096
COLS = 8192


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(x, dim=0)


def get_inputs():
    return [torch.randn(ROWS, COLS)]


def get_init_inputs():
    return []
