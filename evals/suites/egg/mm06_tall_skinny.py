# family: matmul
# kind: single-op
# Tall-skinny matmul (131072, 512) @ (512, 64).
import torch
import torch.nn as nn

M = 131072
K = 512
N = 64


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.matmul(a, b)


def get_inputs():
    return [torch.randn(M, K), torch.randn(K, N)]


def get_init_inputs():
    return []
