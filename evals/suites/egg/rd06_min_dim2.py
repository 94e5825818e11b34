# family: reduction
# kind: single-op
# Min over the last dim of (256, 512, 512), values only.
import torch
import torch.nn as nn

B = 256
M = 512
N = 512


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.min(x, dim=2).values


def get_inputs():
    return [torch.randn(B, M, N)]


def get_init_inputs():
    return []
