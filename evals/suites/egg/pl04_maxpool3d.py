# family: pooling
# kind: single-op
# MaxPool3d (kernel 3, stride 2, padding 1) on (4, 16, 64, 128, 128).
import torch
import torch.nn as nn

B = 4
C = 16
D = 64
H = 128
W = 128
KERNEL = 3
STRIDE = 2
PAD = 1


class Model(nn.Module):
    def __init__(self, kernel: int, stride: int, pad: int):
        super().__init__()
        self.pool = nn.MaxPool3d(kernel, stride=stride, padding=pad)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.pool(x)


def get_inputs():
    return [torch.randn(B, C, D, H, W)]


def get_init_inputs():
    return [KERNEL, STRIDE, PAD]
