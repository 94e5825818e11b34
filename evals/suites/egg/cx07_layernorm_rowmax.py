# family: composition
# kind: fused-chain
# Reduction after a norm: LayerNorm(4096) on (16384, 4096), then the max over features.
import torch
import torch.nn as nn

ROWS = 16384
DIM = 4096


class Model(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.norm = nn.LayerNorm(dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(x).amax(dim=-1)


def get_inputs():
    return [torch.randn(ROWS, DIM)]


def get_init_inputs():
    return [DIM]
