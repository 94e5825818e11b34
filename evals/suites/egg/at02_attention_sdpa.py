# family: attention
# kind: single-op
# Non-causal scaled dot-product attention (F.scaled_dot_product_attention), (8, 16, 1024, 128).
import torch
import torch.nn as nn
import torch.nn.functional as F

B = 8
HEADS = 16
SEQ = 1024
HEAD_DIM = 128


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return F.scaled_dot_product_attention(q, k, v)


def get_inputs():
    return [
        torch.randn(B, HEADS, SEQ, HEAD_DIM),
        torch.randn(B, HEADS, SEQ, HEAD_DIM),
        torch.randn(B, HEADS, SEQ, HEAD_DIM),
    ]


def get_init_inputs():
    return []
