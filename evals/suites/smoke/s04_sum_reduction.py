# family: reduction
# kind: single-op
# Sum over the middle dimension of a 3D tensor (keepdim=False).
import torch
import torch.nn as nn

B = 16
M = 256
N = 64


class Model(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sum(x, dim=self.dim)


def get_inputs():
    return [torch.randn(B, M, N)]


def get_init_inputs():
    return [1]
