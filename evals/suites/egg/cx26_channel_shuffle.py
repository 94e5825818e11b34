# family: network
# kind: fused-chain
# ShuffleNet-style unit on (32, 128, 56, 56): grouped 1x1 conv-BN-ReLU, channel shuffle (views),
# depthwise 3x3 conv-BN.
import torch
import torch.nn as nn

BATCH = 32
CHANNELS = 128
SIZE = 56
GROUPS = 4


class Model(nn.Module):
    def __init__(self, channels: int, groups: int):
        super().__init__()
        self.groups = groups
        self.g1 = nn.Conv2d(channels, channels, 1, groups=groups, bias=False)
        self.bn1 = nn.BatchNorm2d(channels)
        self.dw = nn.Conv2d(channels, channels, 3, padding=1, groups=channels, bias=False)
        self.bn2 = nn.BatchNorm2d(channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.relu(self.bn1(self.g1(x)))
        b, c, h, w = x.size()
        x = x.view(b, self.groups, c // self.groups, h, w).transpose(1, 2).contiguous().view(b, c, h, w)
        return self.bn2(self.dw(x))


def get_inputs():
    return [torch.randn(BATCH, CHANNELS, SIZE, SIZE)]


def get_init_inputs():
    return [CHANNELS, GROUPS]
