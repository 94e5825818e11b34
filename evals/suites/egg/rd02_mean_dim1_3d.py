# family: reduction
# kind: single-op
# Mean over the middle dim of (64, 2048, 512) (strided reduction).
import torch
import torch.nn as nn

B = 64
M = 2048
N = 512


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.mean(x, dim=1)


def get_inputs():
    return [torch.randn(B, M, N)]


def get_init_inputs():
    return []
