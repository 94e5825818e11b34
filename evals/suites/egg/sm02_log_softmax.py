# family: softmax
# kind: single-op
# Log-softmax over the last dim of (16384, 4096).
import torch
import torch.nn as nn

ROWS = 16384
COLS = 4096


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.log_softmax(x, dim=-1)


def get_inputs():
    return [torch.randn(ROWS, COLS)]


def get_init_inputs():
    return []
