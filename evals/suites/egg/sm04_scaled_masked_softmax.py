# family: softmax
# kind: fused-chain
# Scale logits, fill masked positions with -inf, softmax over the last dim; (64, 512, 1024).
import torch
import torch.nn as nn

B = 64
M = 512
N = 1024
SCALE = 0.125


class Model(nn.Module):
    def __init__(self, scale: float):
        super().__init__()
        self.scale = scale

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        # Column 0 is never masked, so no row is all -inf.
        return torch.softmax((x * self.scale).masked_fill(mask, float("-inf")), dim=-1)


def get_inputs():
    x = torch.randn(B, M, N)
    mask = torch.rand(B, M, N) < 0.3
    mask[..., 0] = False
    return [x, mask]


def get_init_inputs():
    return [SCALE]
