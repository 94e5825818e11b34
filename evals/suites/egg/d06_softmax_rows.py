# family: softmax
# kind: single-op
# D6: row softmax of (32768, 4096) with inputs randn * 4 (wide logit range).
import torch
import torch.nn as nn

ROWS = 32768
COLS = 4096


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(x, dim=-1)


def get_inputs():
    return [torch.randn(ROWS, COLS) * 4]


def get_init_inputs():
    return []
