import torch
import torch.nn as nn

BATCH = 32
M = 1024
K = 512
N = 1024


class Model(nn.Module):
    """Batched matmul with a transposed right operand, plus a residual and ReLU."""

    def __init__(self):
        super().__init__()

    def forward(self, a: torch.Tensor, b: torch.Tensor, r: torch.Tensor) -> torch.Tensor:
        return torch.relu(torch.bmm(a, b.transpose(1, 2)) + r)


def get_inputs():
    return [torch.randn(BATCH, M, K), torch.randn(BATCH, N, K), torch.randn(BATCH, M, N)]


def get_init_inputs():
    return []
