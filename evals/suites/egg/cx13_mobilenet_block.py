# family: network
# kind: fused-chain
# MobileNet block on (32, 64, 112, 112): depthwise conv3x3-BN-ReLU, pointwise conv1x1-BN-ReLU.
import torch
import torch.nn as nn

BATCH = 32
C_IN = 64
C_OUT = 128
SIZE = 112


class Model(nn.Module):
    def __init__(self, c_in: int, c_out: int):
        super().__init__()
        self.dw = nn.Conv2d(c_in, c_in, 3, padding=1, groups=c_in, bias=False)
        self.bn1 = nn.BatchNorm2d(c_in)
        self.pw = nn.Conv2d(c_in, c_out, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(c_out)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.relu(self.bn1(self.dw(x)))
        return torch.relu(self.bn2(self.pw(x)))


def get_inputs():
    return [torch.randn(BATCH, C_IN, SIZE, SIZE)]


def get_init_inputs():
    return [C_IN, C_OUT]
