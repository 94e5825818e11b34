# family: conv-epilogue
# kind: fused-chain
# ConvTranspose2d 4x4 / stride 2 (64 -> 48 channels) on (64, 64, 63, 63), then Mish, an added
# constant, Hardtanh and a scale.
import torch
import torch.nn as nn
import torch.nn.functional as F

B = 64
C_IN = 64
C_OUT = 48
H = 63
W = 63


class Model(nn.Module):
    def __init__(self, c_in: int, c_out: int):
        super().__init__()
        self.conv = nn.ConvTranspose2d(c_in, c_out, 4, stride=2, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.mish(self.conv(x)) + 0.5
        return F.hardtanh(y, -1.0, 1.0) * 2.0


def get_inputs():
    return [torch.randn(B, C_IN, H, W)]


def get_init_inputs():
    return [C_IN, C_OUT]
