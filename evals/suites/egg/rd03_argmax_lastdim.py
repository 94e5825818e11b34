# family: reduction
# kind: single-op
# Argmax over the last dim of (16384, 2048); int64 output.
import torch
import torch.nn as nn

ROWS = 16384
COLS = 2048


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.argmax(x, dim=-1)


def get_inputs():
    return [torch.randn(ROWS, COLS)]


def get_init_inputs():
    return []
