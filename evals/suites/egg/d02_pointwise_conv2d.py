# family: conv
# kind: single-op
# D2: pointwise (1x1) Conv2d 128 -> 256 channels with bias on (8, 128, 256, 256).
import torch
import torch.nn as nn

BATCH = 8
C_IN = 128
C_OUT = 256
H = 256
W = 256


class Model(nn.Module):
    def __init__(self, c_in: int, c_out: int):
        super().__init__()
        self.conv = nn.Conv2d(c_in, c_out, kernel_size=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(x)


def get_inputs():
    return [torch.randn(BATCH, C_IN, H, W)]


def get_init_inputs():
    return [C_IN, C_OUT]
