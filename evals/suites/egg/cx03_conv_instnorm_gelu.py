# family: composition
# kind: fused-chain
# Conv2d 32->64 k3 on (32, 32, 128, 128), InstanceNorm2d, GELU: a conv group then a norm group.
import torch
import torch.nn as nn
import torch.nn.functional as F

BATCH = 32
C_IN = 32
C_OUT = 64
SIZE = 128


class Model(nn.Module):
    def __init__(self, c_in: int, c_out: int):
        super().__init__()
        self.conv = nn.Conv2d(c_in, c_out, 3, padding=1)
        self.norm = nn.InstanceNorm2d(c_out)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.gelu(self.norm(self.conv(x)))


def get_inputs():
    return [torch.randn(BATCH, C_IN, SIZE, SIZE)]


def get_init_inputs():
    return [C_IN, C_OUT]
