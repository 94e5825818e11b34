# family: network
# kind: fused-chain
# nn.MultiheadAttention self-attention over (256, 32, 512) sequence-first tokens, residual, LayerNorm.
import torch
import torch.nn as nn

SEQ = 256
BATCH = 32
EMBED = 512
HEADS = 8


class Model(nn.Module):
    def __init__(self, embed: int, heads: int):
        super().__init__()
        self.attn = nn.MultiheadAttention(embed, heads)
        self.norm = nn.LayerNorm(embed)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y, _ = self.attn(x, x, x)
        return self.norm(x + y)


def get_inputs():
    return [torch.randn(SEQ, BATCH, EMBED)]


def get_init_inputs():
    return [EMBED, HEADS]
