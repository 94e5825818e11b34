# family: reduction
# kind: single-op
# D4 (file 2 of 2): mean over the last dim of (128, 4096, 4095) (odd length).
import torch
import torch.nn as nn

B = 128
M = 4096
N = 4095


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.mean(x, dim=-1)


def get_inputs():
    return [torch.randn(B, M, N)]


def get_init_inputs():
    return []
