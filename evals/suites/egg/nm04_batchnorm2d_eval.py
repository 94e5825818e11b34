# family: normalization
# kind: single-op
# BatchNorm2d inference (running statistics, affine) on (32, 64, 128, 128).
import torch
import torch.nn as nn
import torch.nn.functional as F

B = 32
C = 64
H = 128
W = 128
EPS = 1e-05


class Model(nn.Module):
    def __init__(self, channels: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.linspace(0.5, 1.5, channels))
        self.bias = nn.Parameter(torch.linspace(-0.2, 0.2, channels))
        # Non-trivial running statistics so the normalization is not an identity.
        self.register_buffer("running_mean", torch.linspace(-0.5, 0.5, channels))
        self.register_buffer("running_var", torch.linspace(0.5, 2.0, channels))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.batch_norm(
            x, self.running_mean, self.running_var, self.weight, self.bias, training=False, eps=self.eps
        )


def get_inputs():
    return [torch.randn(B, C, H, W)]


def get_init_inputs():
    return [C, EPS]
