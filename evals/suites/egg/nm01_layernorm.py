# family: normalization
# kind: single-op
# LayerNorm with affine weight/bias over the last dim, x (16384, 4096).
import torch
import torch.nn as nn

ROWS = 16384
DIM = 4096


class Model(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.ln = nn.LayerNorm(dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.ln(x)


def get_inputs():
    return [torch.randn(ROWS, DIM)]


def get_init_inputs():
    return [DIM]
