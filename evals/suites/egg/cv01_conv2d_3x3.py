# family: conv
# kind: single-op
# Conv2d 64->128, 3x3, padding 1, with bias on (16, 64, 128, 128).
import torch
import torch.nn as nn

B = 16
C_IN = 64
C_OUT = 128
H = 128
W = 128
KERNEL = 3


class Model(nn.Module):
    def __init__(self, c_in: int, c_out: int, kernel: int):
        super().__init__()
        self.conv = nn.Conv2d(c_in, c_out, kernel, padding=kernel // 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(x)


def get_inputs():
    return [torch.randn(B, C_IN, H, W)]


def get_init_inputs():
    return [C_IN, C_OUT, KERNEL]
