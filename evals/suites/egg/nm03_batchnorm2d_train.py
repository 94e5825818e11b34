# family: normalization
# kind: single-op
# BatchNorm2d in training mode (batch statistics) on (32, 64, 128, 128).
import torch
import torch.nn as nn

B = 32
C = 64
H = 128
W = 128


class Model(nn.Module):
    def __init__(self, channels: int):
        super().__init__()
        self.bn = nn.BatchNorm2d(channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.bn(x)


def get_inputs():
    return [torch.randn(B, C, H, W)]


def get_init_inputs():
    return [C]
