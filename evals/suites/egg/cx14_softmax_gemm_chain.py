# family: composition
# kind: fused-chain
# Softmax between two GEMMs: softmax(x @ W1 / 8) @ V on (4096, 1024) with 1024x2048 and 2048x1024.
import torch
import torch.nn as nn

ROWS = 4096
DIM = 1024
KEYS = 2048


class Model(nn.Module):
    def __init__(self, dim: int, keys: int):
        super().__init__()
        self.w = nn.Parameter(torch.randn(dim, keys) / dim**0.5)
        self.v = nn.Parameter(torch.randn(keys, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(x @ self.w / 8.0, dim=-1) @ self.v


def get_inputs():
    return [torch.randn(ROWS, DIM)]


def get_init_inputs():
    return [DIM, KEYS]
