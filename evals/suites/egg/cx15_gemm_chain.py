# family: composition
# kind: fused-chain
# GEMM -> GEMM chain of an MLP head: Linear-Tanh-Linear-Tanh-Linear on (8192, 1024).
import torch
import torch.nn as nn

BATCH = 8192
DIM = 1024
HIDDEN = 2048
OUT = 256


class Model(nn.Module):
    def __init__(self, dim: int, hidden: int, out: int):
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(dim, hidden), nn.Tanh(), nn.Linear(hidden, hidden), nn.Tanh(), nn.Linear(hidden, out)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


def get_inputs():
    return [torch.randn(BATCH, DIM)]


def get_init_inputs():
    return [DIM, HIDDEN, OUT]
