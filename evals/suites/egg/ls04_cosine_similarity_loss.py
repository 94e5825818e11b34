# family: loss
# kind: fused-chain
# Mean of 1 - cosine similarity along dim 1 of two (32768, 2048) tensors.
import torch
import torch.nn as nn
import torch.nn.functional as F

ROWS = 32768
DIM = 2048


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.mean(1 - F.cosine_similarity(a, b, dim=1))


def get_inputs():
    return [torch.randn(ROWS, DIM), torch.randn(ROWS, DIM)]


def get_init_inputs():
    return []
