# family: matmul
# kind: single-op
# Batched matmul (64, 500, 1000) @ (64, 1000, 2003): many output tiles, a ragged N.
import torch
import torch.nn as nn

BATCH = 64
M = 500
K = 1000
N = 2003


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.bmm(a, b)


def get_inputs():
    return [torch.randn(BATCH, M, K), torch.randn(BATCH, K, N)]


def get_init_inputs():
    return []
