# family: network
# kind: fused-chain
# Shifted-window block on (16, 56, 56, 96) channels-last: LayerNorm, zero pad of the spatial dims
# (F.pad), window crop back by slicing, residual, then a reflection pad (module) before a
# depthwise 3x3 conv and GELU. Pads are gathers between the norm and the conv.
import torch
import torch.nn as nn
import torch.nn.functional as F

BATCH = 16
SIZE = 56
CHANNELS = 96
SHIFT = 3


class Model(nn.Module):
    def __init__(self, channels: int, shift: int):
        super().__init__()
        self.shift = shift
        self.norm = nn.LayerNorm(channels)
        self.pad = nn.ReflectionPad2d(1)
        self.dw = nn.Conv2d(channels, channels, 3, groups=channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        s = self.shift
        y = F.pad(self.norm(x), [0, 0, s, s, s, s], "constant", 0.0)
        y = y[:, s:-s, s:-s, :].contiguous() + x
        y = self.pad(y.permute(0, 3, 1, 2))
        return F.gelu(self.dw(y))


def get_inputs():
    return [torch.randn(BATCH, SIZE, SIZE, CHANNELS)]


def get_init_inputs():
    return [CHANNELS, SHIFT]
