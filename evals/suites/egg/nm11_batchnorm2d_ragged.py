# family: normalization
# kind: single-op
# BatchNorm2d in training mode on (24, 100, 125, 127): no dim a power of two.
import torch
import torch.nn as nn

B = 24
C = 100
H = 125
W = 127


class Model(nn.Module):
    def __init__(self, channels: int):
        super().__init__()
        self.bn = nn.BatchNorm2d(channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.bn(x)


def get_inputs():
    return [torch.randn(B, C, H, W) * 3.0 + 1.0]


def get_init_inputs():
    return [C]
