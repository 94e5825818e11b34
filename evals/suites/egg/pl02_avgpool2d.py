# family: pooling
# kind: single-op
# AvgPool2d (kernel 3, stride 2, padding 1) on (16, 64, 256, 256).
import torch
import torch.nn as nn

B = 16
C = 64
H = 256
W = 256
KERNEL = 3
STRIDE = 2
PAD = 1


class Model(nn.Module):
    def __init__(self, kernel: int, stride: int, pad: int):
        super().__init__()
        self.pool = nn.AvgPool2d(kernel, stride=stride, padding=pad)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.pool(x)


def get_inputs():
    return [torch.randn(B, C, H, W)]


def get_init_inputs():
    return [KERNEL, STRIDE, PAD]
