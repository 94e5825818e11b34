# family: network
# kind: fused-chain
# Conv classifier head on (64, 256, 32, 32): conv1x1-ReLU, global average pool, flatten, linear, log-softmax.
import torch
import torch.nn as nn

BATCH = 64
C_IN = 256
C_MID = 512
SIZE = 32
CLASSES = 1000


class Model(nn.Module):
    def __init__(self, c_in: int, c_mid: int, classes: int):
        super().__init__()
        self.conv = nn.Conv2d(c_in, c_mid, 1)
        self.fc = nn.Linear(c_mid, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.relu(self.conv(x)).mean(dim=(2, 3))
        return torch.log_softmax(self.fc(x), dim=1)


def get_inputs():
    return [torch.randn(BATCH, C_IN, SIZE, SIZE)]


def get_init_inputs():
    return [C_IN, C_MID, CLASSES]
