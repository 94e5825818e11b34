# family: composition
# kind: fused-chain
# MLP block: Linear 1024->4096, GELU, Linear 4096->1024 on (8192, 1024): two GEMM groups.
import torch
import torch.nn as nn
import torch.nn.functional as F

BATCH = 8192
DIM = 1024
HIDDEN = 4096


class Model(nn.Module):
    def __init__(self, dim: int, hidden: int):
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden)
        self.fc2 = nn.Linear(hidden, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(F.gelu(self.fc1(x)))


def get_inputs():
    return [torch.randn(BATCH, DIM)]


def get_init_inputs():
    return [DIM, HIDDEN]
