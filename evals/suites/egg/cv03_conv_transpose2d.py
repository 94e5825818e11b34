# family: conv
# kind: single-op
# ConvTranspose2d 64->32, kernel 4, stride 2, padding 1 (2x upsampling) on (16, 64, 128, 128).
import torch
import torch.nn as nn

B = 16
C_IN = 64
C_OUT = 32
H = 128
W = 128
KERNEL = 4
STRIDE = 2
PAD = 1


class Model(nn.Module):
    def __init__(self, c_in: int, c_out: int, kernel: int, stride: int, pad: int):
        super().__init__()
        self.deconv = nn.ConvTranspose2d(c_in, c_out, kernel, stride=stride, padding=pad)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.deconv(x)


def get_inputs():
    return [torch.randn(B, C_IN, H, W)]


def get_init_inputs():
    return [C_IN, C_OUT, KERNEL, STRIDE, PAD]
