# family: matmul
# kind: single-op
# Ragged matmul (8205, 2949) @ (2949, 5921): no dim a power of two, K rows not 16-byte aligned.
import torch
import torch.nn as nn

M = 8205
K = 2949
N = 5921


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.matmul(a, b)


def get_inputs():
    return [torch.randn(M, K), torch.randn(K, N)]


def get_init_inputs():
    return []
