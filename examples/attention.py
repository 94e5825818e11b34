import math

import torch
import torch.nn as nn

BATCH = 16
HEADS = 16
SEQ = 1024
HEAD_DIM = 64


class Model(nn.Module):
    """Scaled dot-product attention written out: softmax(Q K^T / sqrt(d)) V."""

    def __init__(self, head_dim: int):
        super().__init__()
        self.scale = 1.0 / math.sqrt(head_dim)

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        scores = torch.matmul(q, k.transpose(-2, -1)) * self.scale
        return torch.matmul(torch.softmax(scores, dim=-1), v)


def get_inputs():
    return [torch.randn(BATCH, HEADS, SEQ, HEAD_DIM) for _ in range(3)]


def get_init_inputs():
    return [HEAD_DIM]
