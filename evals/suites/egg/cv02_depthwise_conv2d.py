# family: conv
# kind: single-op
# Depthwise Conv2d (groups = channels = 128), 3x3, padding 1 on (16, 128, 128, 128).
import torch
import torch.nn as nn

B = 16
C = 128
H = 128
W = 128
KERNEL = 3


class Model(nn.Module):
    def __init__(self, channels: int, kernel: int):
        super().__init__()
        self.conv = nn.Conv2d(channels, channels, kernel, padding=kernel // 2, groups=channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(x)


def get_inputs():
    return [torch.randn(B, C, H, W)]


def get_init_inputs():
    return [C, KERNEL]
