# family: composition
# kind: fused-chain
# Gated linear unit then projection: chunk(Linear(x), 2) -> a * sigmoid(b) -> Linear, on (8192, 1024).
import torch
import torch.nn as nn

BATCH = 8192
DIM = 1024
HIDDEN = 2048


class Model(nn.Module):
    def __init__(self, dim: int, hidden: int):
        super().__init__()
        self.up = nn.Linear(dim, 2 * hidden)
        self.down = nn.Linear(hidden, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a, b = self.up(x).chunk(2, dim=-1)
        return self.down(a * torch.sigmoid(b))


def get_inputs():
    return [torch.randn(BATCH, DIM)]


def get_init_inputs():
    return [DIM, HIDDEN]
