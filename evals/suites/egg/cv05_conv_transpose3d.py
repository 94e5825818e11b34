# family: conv
# kind: single-op
# ConvTranspose3d 32->16, kernel 3, stride 2, padding 1, output_padding 1 on (4, 32, 16, 64, 64).
import torch
import torch.nn as nn

B = 4
C_IN = 32
C_OUT = 16
D = 16
H = 64
W = 64
KERNEL = 3
STRIDE = 2
PAD = 1


class Model(nn.Module):
    def __init__(self, c_in: int, c_out: int, kernel: int, stride: int, pad: int):
        super().__init__()
        self.deconv = nn.ConvTranspose3d(
            c_in, c_out, kernel, stride=stride, padding=pad, output_padding=stride - 1
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.deconv(x)


def get_inputs():
    return [torch.randn(B, C_IN, D, H, W)]


def get_init_inputs():
    return [C_IN, C_OUT, KERNEL, STRIDE, PAD]
