# family: conv
# kind: single-op
# Strided 3D transposed convolution with padding; likely beyond the built-in expert model.
import torch
import torch.nn as nn

BATCH = 2
C_IN = 8
C_OUT = 4
DEPTH = 8
HEIGHT = 8
WIDTH = 8
KERNEL = 3
STRIDE = 2
PADDING = 1


class Model(nn.Module):
    def __init__(self, c_in: int, c_out: int, kernel: int, stride: int, padding: int):
        super().__init__()
        self.deconv = nn.ConvTranspose3d(c_in, c_out, kernel, stride=stride, padding=padding)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.deconv(x)


def get_inputs():
    return [torch.randn(BATCH, C_IN, DEPTH, HEIGHT, WIDTH)]


def get_init_inputs():
    return [C_IN, C_OUT, KERNEL, STRIDE, PADDING]
