# family: network
# kind: fused-chain
# Tiny CNN on (128, 3, 128, 128): two conv-BN-ReLU-maxpool stages, global average pool, flatten, linear.
import torch
import torch.nn as nn

BATCH = 128
SIZE = 128
WIDTH = 32
CLASSES = 100


class Model(nn.Module):
    def __init__(self, width: int, classes: int):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, width, 3, padding=1),
            nn.BatchNorm2d(width),
            nn.ReLU(inplace=True),
            nn.MaxPool2d(2),
            nn.Conv2d(width, 2 * width, 3, padding=1),
            nn.BatchNorm2d(2 * width),
            nn.ReLU(inplace=True),
            nn.MaxPool2d(2),
        )
        self.pool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(2 * width, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.pool(self.features(x))
        return self.fc(torch.flatten(x, 1))


def get_inputs():
    return [torch.randn(BATCH, 3, SIZE, SIZE)]


def get_init_inputs():
    return [WIDTH, CLASSES]
