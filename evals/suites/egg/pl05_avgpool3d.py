# family: pooling
# kind: single-op
# AvgPool3d (kernel 2, stride 2) on (4, 16, 64, 128, 128).
import torch
import torch.nn as nn

B = 4
C = 16
D = 64
H = 128
W = 128
KERNEL = 2


class Model(nn.Module):
    def __init__(self, kernel: int):
        super().__init__()
        self.pool = nn.AvgPool3d(kernel)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.pool(x)


def get_inputs():
    return [torch.randn(B, C, D, H, W)]


def get_init_inputs():
    return [KERNEL]
