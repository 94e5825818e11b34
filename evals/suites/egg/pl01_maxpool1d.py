# family: pooling
# kind: single-op
# MaxPool1d (kernel 4, stride 2, padding 1) on (64, 128, 8192).
import torch
import torch.nn as nn

B = 64
C = 128
L = 8192
KERNEL = 4
STRIDE = 2
PAD = 1


class Model(nn.Module):
    def __init__(self, kernel: int, stride: int, pad: int):
        super().__init__()
        self.pool = nn.MaxPool1d(kernel, stride=stride, padding=pad)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.pool(x)


def get_inputs():
    return [torch.randn(B, C, L)]


def get_init_inputs():
    return [KERNEL, STRIDE, PAD]
