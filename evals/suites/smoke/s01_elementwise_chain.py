# family: elementwise
# kind: fused-chain
# Scale-and-shift followed by ReLU then tanh, all pointwise.
import torch
import torch.nn as nn

BATCH = 64
DIM = 1024


class Model(nn.Module):
    def __init__(self, scale: float, shift: float):
        super().__init__()
        self.scale = scale
        self.shift = shift

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(torch.relu(x * self.scale + self.shift))


def get_inputs():
    return [torch.randn(BATCH, DIM)]


def get_init_inputs():
    return [1.5, -0.25]
