# family: pooling
# kind: single-op
# MaxPool2d (kernel 4, stride 1, padding 1): overlapping windows on (8, 64, 509, 511).
import torch
import torch.nn as nn

B = 8
C = 64
H = 509
W = 511
KERNEL = 4
STRIDE = 1
PAD = 1


class Model(nn.Module):
    def __init__(self, kernel: int, stride: int, pad: int):
        super().__init__()
        self.pool = nn.MaxPool2d(kernel, stride=stride, padding=pad)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.pool(x)


def get_inputs():
    return [torch.randn(B, C, H, W)]


def get_init_inputs():
    return [KERNEL, STRIDE, PAD]
