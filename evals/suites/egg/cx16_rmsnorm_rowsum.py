# family: composition
# kind: fused-chain
# Reduction after a norm: RMSNorm over 4096 features of (16384, 4096), scaled by a weight, then
# the row sum of squares (a per-row energy).
import torch
import torch.nn as nn

ROWS = 16384
DIM = 4096


class Model(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.weight = nn.Parameter(torch.rand(dim) + 0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * self.weight
        return (y * y).sum(dim=-1)


def get_inputs():
    return [torch.randn(ROWS, DIM)]


def get_init_inputs():
    return [DIM]
