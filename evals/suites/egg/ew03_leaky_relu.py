# family: elementwise
# kind: single-op
# LeakyReLU (negative slope 0.01) on a (16, 4096, 1024) tensor.
import torch
import torch.nn as nn
import torch.nn.functional as F

B = 16
M = 4096
N = 1024
SLOPE = 0.01


class Model(nn.Module):
    def __init__(self, slope: float):
        super().__init__()
        self.slope = slope

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.leaky_relu(x, negative_slope=self.slope)


def get_inputs():
    return [torch.randn(B, M, N)]


def get_init_inputs():
    return [SLOPE]
