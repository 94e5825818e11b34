# family: softmax
# kind: single-op
# Softmax over the middle dim of (64, 1024, 1024) (non-contiguous reduction axis).
import torch
import torch.nn as nn

B = 64
M = 1024
N = 1024


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(x, dim=1)


def get_inputs():
    return [torch.randn(B, M, N)]


def get_init_inputs():
    return []
