# family: normalization
# kind: fused-chain
# D5: RMSNorm with a learned weight over the last dim, x (16384, 4096).
import torch
import torch.nn as nn

ROWS = 16384
DIM = 4096
EPS = 1e-06


class Model(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim) + 0.1 * torch.randn(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rms = torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + self.eps)
        return x * rms * self.weight


def get_inputs():
    return [torch.randn(ROWS, DIM)]


def get_init_inputs():
    return [DIM, EPS]
