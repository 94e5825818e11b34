# family: gemm-epilogue
# kind: fused-chain
# D1 (bias variant): A @ B.T + bias, bias a learned (N,) parameter.
import torch
import torch.nn as nn

M = 4096
K = 4096
N = 2048


class Model(nn.Module):
    def __init__(self, n: int):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(n))

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return a @ b.T + self.bias


def get_inputs():
    return [torch.randn(M, K), torch.randn(N, K)]


def get_init_inputs():
    return [N]
