# family: reduction
# kind: single-op
# Argmin over dim 1 of (128, 1024, 512); int64 output.
import torch
import torch.nn as nn

B = 128
M = 1024
N = 512


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.argmin(x, dim=1)


def get_inputs():
    return [torch.randn(B, M, N)]


def get_init_inputs():
    return []
