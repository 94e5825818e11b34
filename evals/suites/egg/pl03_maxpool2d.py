# family: pooling
# kind: single-op
# MaxPool2d (kernel 2, stride 2) on (32, 64, 256, 256) -> half resolution.
import torch
import torch.nn as nn

B = 32
C = 64
H = 256
W = 256
KERNEL = 2


class Model(nn.Module):
    def __init__(self, kernel: int):
        super().__init__()
        self.pool = nn.MaxPool2d(kernel)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.pool(x)


def get_inputs():
    return [torch.randn(B, C, H, W)]


def get_init_inputs():
    return [KERNEL]
