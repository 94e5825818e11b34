# family: normalization
# kind: single-op
# GroupNorm with 8 groups over 128 channels, x (16, 128, 128, 128).
import torch
import torch.nn as nn

B = 16
C = 128
H = 128
W = 128
GROUPS = 8


class Model(nn.Module):
    def __init__(self, groups: int, channels: int):
        super().__init__()
        self.gn = nn.GroupNorm(groups, channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.gn(x)


def get_inputs():
    return [torch.randn(B, C, H, W)]


def get_init_inputs():
    return [GROUPS, C]
