# family: loss
# kind: single-op
# D8 (file 2 of 2): mean-reduced MSE loss of two (32768, 32768) tensors.
import torch
import torch.nn as nn
import torch.nn.functional as F

ROWS = 32768
COLS = 32768


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, pred: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return F.mse_loss(pred, target, reduction="mean")


def get_inputs():
    return [torch.randn(ROWS, COLS), torch.randn(ROWS, COLS)]


def get_init_inputs():
    return []
