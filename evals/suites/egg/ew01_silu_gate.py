# family: elementwise
# kind: fused-chain
# SwiGLU-style gate: silu(x) * sigmoid(y) * scale on two (8192, 8192) tensors.
import torch
import torch.nn as nn
import torch.nn.functional as F

ROWS = 8192
COLS = 8192
SCALE = 0.5


class Model(nn.Module):
    def __init__(self, scale: float):
        super().__init__()
        self.scale = scale

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return F.silu(x) * torch.sigmoid(y) * self.scale


def get_inputs():
    return [torch.randn(ROWS, COLS), torch.randn(ROWS, COLS)]


def get_init_inputs():
    return [SCALE]
