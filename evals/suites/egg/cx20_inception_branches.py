# family: network
# kind: fused-chain
# Inception-style block on (32, 64, 64, 64): 1x1, 3x3 and pooled 1x1 branches with ReLU, concatenated.
import torch
import torch.nn as nn
import torch.nn.functional as F

BATCH = 32
C_IN = 64
C_BRANCH = 32
SIZE = 64


class Model(nn.Module):
    def __init__(self, c_in: int, c_branch: int):
        super().__init__()
        self.b1 = nn.Conv2d(c_in, c_branch, 1)
        self.b3 = nn.Conv2d(c_in, c_branch, 3, padding=1)
        self.bp = nn.Conv2d(c_in, c_branch, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a = torch.relu(self.b1(x))
        b = torch.relu(self.b3(x))
        c = torch.relu(self.bp(F.max_pool2d(x, 3, stride=1, padding=1)))
        return torch.cat([a, b, c], dim=1)


def get_inputs():
    return [torch.randn(BATCH, C_IN, SIZE, SIZE)]


def get_init_inputs():
    return [C_IN, C_BRANCH]
