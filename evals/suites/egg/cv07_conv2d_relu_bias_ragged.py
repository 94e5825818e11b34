# family: conv-epilogue
# kind: fused-chain
# Conv2d 3x3 (48 -> 100 channels) on (64, 48, 127, 129), then ReLU and a per-channel bias add.
import torch
import torch.nn as nn

B = 64
C_IN = 48
C_OUT = 100
H = 127
W = 129


class Model(nn.Module):
    def __init__(self, c_in: int, c_out: int):
        super().__init__()
        self.conv = nn.Conv2d(c_in, c_out, 3)
        self.bias = nn.Parameter(torch.randn(c_out, 1, 1) * 0.1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.conv(x)) + self.bias


def get_inputs():
    return [torch.randn(B, C_IN, H, W)]


def get_init_inputs():
    return [C_IN, C_OUT]
