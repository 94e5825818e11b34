# family: matmul
# kind: single-op
# D1: A @ B.T with A (4096, 4096) and B (2048, 4096).
import torch
import torch.nn as nn

M = 4096
K = 4096
N = 2048


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return a @ b.T


def get_inputs():
    return [torch.randn(M, K), torch.randn(N, K)]


def get_init_inputs():
    return []
