# family: matmul
# kind: single-op
# Small-K matmul (8192, 16) @ (16, 8192): output-write bound.
import torch
import torch.nn as nn

M = 8192
K = 16
N = 8192


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.matmul(a, b)


def get_inputs():
    return [torch.randn(M, K), torch.randn(K, N)]


def get_init_inputs():
    return []
