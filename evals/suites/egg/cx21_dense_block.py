# family: network
# kind: fused-chain
# DenseNet-style block on (16, 64, 64, 64): three BN-ReLU-conv3x3 layers, each concatenating its
# 32 new channels onto the features so far.
import torch
import torch.nn as nn

BATCH = 16
C_IN = 64
GROWTH = 32
SIZE = 64


class Model(nn.Module):
    def __init__(self, c_in: int, growth: int):
        super().__init__()
        self.layers = nn.ModuleList(
            nn.Sequential(
                nn.BatchNorm2d(c_in + i * growth),
                nn.ReLU(),
                nn.Conv2d(c_in + i * growth, growth, 3, padding=1),
            )
            for i in range(3)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = torch.cat([x, layer(x)], dim=1)
        return x


def get_inputs():
    return [torch.randn(BATCH, C_IN, SIZE, SIZE)]


def get_init_inputs():
    return [C_IN, GROWTH]
