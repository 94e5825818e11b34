# family: matmul
# kind: single-op
# Large-K matmul (200, 300007) @ (300007, 300): few output tiles, an odd K (split-K territory).
import torch
import torch.nn as nn

M = 200
K = 300007
N = 300


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.matmul(a, b)


def get_inputs():
    return [torch.randn(M, K), torch.randn(K, N)]


def get_init_inputs():
    return []
