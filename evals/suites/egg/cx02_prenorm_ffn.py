# family: composition
# kind: fused-chain
# Pre-norm FFN block: x + W2(ReLU(W1(LayerNorm(x)))) on (32, 512, 768): norm, two GEMMs, a residual.
import torch
import torch.nn as nn

BATCH = 32
SEQ = 512
DIM = 768
HIDDEN = 3072


class Model(nn.Module):
    def __init__(self, dim: int, hidden: int):
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.up = nn.Linear(dim, hidden)
        self.down = nn.Linear(hidden, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.down(torch.relu(self.up(self.norm(x))))


def get_inputs():
    return [torch.randn(BATCH, SEQ, DIM)]


def get_init_inputs():
    return [DIM, HIDDEN]
