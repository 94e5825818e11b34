# family: matmul
# kind: single-op
# Batched matmul (32, 1024, 512) @ (32, 512, 1024).
import torch
import torch.nn as nn

BATCH = 32
M = 1024
K = 512
N = 1024


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.bmm(a, b)


def get_inputs():
    return [torch.randn(BATCH, M, K), torch.randn(BATCH, K, N)]


def get_init_inputs():
    return []
