# family: network
# kind: fused-chain
# UNet-style residual unit on (16, 128, 64, 64): GroupNorm(32)-SiLU-conv3x3, twice, plus the input.
import torch
import torch.nn as nn
import torch.nn.functional as F

BATCH = 16
CHANNELS = 128
SIZE = 64
GROUPS = 32


class Model(nn.Module):
    def __init__(self, channels: int, groups: int):
        super().__init__()
        self.n1 = nn.GroupNorm(groups, channels)
        self.c1 = nn.Conv2d(channels, channels, 3, padding=1)
        self.n2 = nn.GroupNorm(groups, channels)
        self.c2 = nn.Conv2d(channels, channels, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.c1(F.silu(self.n1(x)))
        h = self.c2(F.silu(self.n2(h)))
        return x + h


def get_inputs():
    return [torch.randn(BATCH, CHANNELS, SIZE, SIZE)]


def get_init_inputs():
    return [CHANNELS, GROUPS]
