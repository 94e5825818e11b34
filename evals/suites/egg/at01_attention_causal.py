# family: attention
# kind: fused-chain
# Causal attention written out: q @ k^T / sqrt(d), upper triangle masked, softmax, @ v; (4, 16, 2048, 64).
import torch
import torch.nn as nn

B = 4
HEADS = 16
SEQ = 2048
HEAD_DIM = 64


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        scores = (q @ k.transpose(-2, -1)) * (q.shape[-1] ** -0.5)
        n = q.shape[-2]
        causal = torch.ones(n, n, dtype=torch.bool, device=q.device).triu(1)
        return torch.softmax(scores.masked_fill(causal, float("-inf")), dim=-1) @ v


def get_inputs():
    return [
        torch.randn(B, HEADS, SEQ, HEAD_DIM),
        torch.randn(B, HEADS, SEQ, HEAD_DIM),
        torch.randn(B, HEADS, SEQ, HEAD_DIM),
    ]


def get_init_inputs():
    return []
