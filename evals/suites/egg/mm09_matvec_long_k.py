# family: matmul
# kind: single-op
# Matrix-vector product (1536, 160001) @ (160001, 1): few rows, a long odd K (memory-bound).
import torch
import torch.nn as nn

M = 1536
K = 160001


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return torch.matmul(a, v)


def get_inputs():
    return [torch.randn(M, K), torch.randn(K, 1)]


def get_init_inputs():
    return []
