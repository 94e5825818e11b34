# family: normalization
# kind: single-op
# LayerNorm over each sample's (C, H, W) = 4M elements, batch 16: few, very long rows.
import torch
import torch.nn as nn

B = 16
C = 64
H = 250
W = 254


class Model(nn.Module):
    def __init__(self, c: int, h: int, w: int):
        super().__init__()
        self.ln = nn.LayerNorm((c, h, w))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.ln(x)


def get_inputs():
    return [torch.randn(B, C, H, W) * 2.0 + 3.0]


def get_init_inputs():
    return [C, H, W]
