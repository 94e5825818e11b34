# family: composition
# kind: fused-chain
# Batched einsum "bij,bjk->bik" then a per-batch residual and ReLU, on (64, 512, 512) x (64, 512, 256).
import torch
import torch.nn as nn

BATCH = 64
M = 512
K = 512
N = 256


class Model(nn.Module):
    def forward(self, a: torch.Tensor, b: torch.Tensor, r: torch.Tensor) -> torch.Tensor:
        return torch.relu(torch.einsum("bij,bjk->bik", a, b) + r)


def get_inputs():
    return [torch.randn(BATCH, M, K), torch.randn(BATCH, K, N), torch.randn(BATCH, M, N)]


def get_init_inputs():
    return []
