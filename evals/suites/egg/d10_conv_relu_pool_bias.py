# family: conv
# kind: fused-chain
# D10: Conv2d 32->64 k3 on (64, 32, 256, 256), ReLU, MaxPool2d(2), + a (64, 1, 1) parameter.
import torch
import torch.nn as nn

BATCH = 64
C_IN = 32
C_OUT = 64
H = 256
W = 256
KERNEL = 3
POOL = 2


class Model(nn.Module):
    def __init__(self, c_in: int, c_out: int, kernel: int, pool: int):
        super().__init__()
        self.conv = nn.Conv2d(c_in, c_out, kernel)
        self.pool = nn.MaxPool2d(pool)
        self.bias = nn.Parameter(torch.randn(c_out, 1, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.pool(torch.relu(self.conv(x))) + self.bias


def get_inputs():
    return [torch.randn(BATCH, C_IN, H, W)]


def get_init_inputs():
    return [C_IN, C_OUT, KERNEL, POOL]
