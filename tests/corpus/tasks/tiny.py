# ruff: noqa
import torch
import torch.nn as nn

BATCH = 16
DIM = 128
SCALE = 1e-6


class Model(nn.Module):
    """Outputs ~1e-6: an absolute tolerance of 1e-4 alone would accept zeros."""

    def __init__(self):
        super().__init__()

    def forward(self, x):
        return x * SCALE


def get_inputs():
    return [torch.randn(BATCH, DIM)]


def get_init_inputs():
    return []
