# family: gemm-epilogue
# kind: fused-chain
# Linear 2048->2048 on (8192, 2048), scale, add a residual input, tanh.
import torch
import torch.nn as nn

BATCH = 8192
DIM = 2048
SCALE = 0.5


class Model(nn.Module):
    def __init__(self, dim: int, scale: float):
        super().__init__()
        self.fc = nn.Linear(dim, dim)
        self.scale = scale

    def forward(self, x: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.fc(x) * self.scale + residual)


def get_inputs():
    return [torch.randn(BATCH, DIM), torch.randn(BATCH, DIM)]


def get_init_inputs():
    return [DIM, SCALE]
