# family: matmul
# kind: single-op
# A.T @ B with A stored (4096, 8192) and B (4096, 2048).
import torch
import torch.nn as nn

M = 8192
K = 4096
N = 2048


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return a.T @ b


def get_inputs():
    return [torch.randn(K, M), torch.randn(K, N)]


def get_init_inputs():
    return []
