# family: reduction
# kind: single-op
# Mean over dim 0 of a tall (262147, 1000) matrix: few column blocks, very long columns.
import torch
import torch.nn as nn

ROWS = 262147
COLS = 1000


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.mean(x, dim=0)


def get_inputs():
    return [torch.randn(ROWS, COLS)]


def get_init_inputs():
    return []
