# family: network
# kind: fused-chain
# Squeeze-and-excitation on (32, 256, 56, 56): global average pool, FC-ReLU-FC-sigmoid, channel
# scaling of the input.
import torch
import torch.nn as nn

BATCH = 32
CHANNELS = 256
SIZE = 56
REDUCED = 64


class Model(nn.Module):
    def __init__(self, channels: int, reduced: int):
        super().__init__()
        self.fc1 = nn.Linear(channels, reduced)
        self.fc2 = nn.Linear(reduced, channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        s = x.mean(dim=(2, 3))
        s = torch.sigmoid(self.fc2(torch.relu(self.fc1(s))))
        return x * s[:, :, None, None]


def get_inputs():
    return [torch.randn(BATCH, CHANNELS, SIZE, SIZE)]


def get_init_inputs():
    return [CHANNELS, REDUCED]
