# family: loss
# kind: single-op
# D8 (file 1 of 2): mean-reduced smooth-L1 loss (beta=1) of two (32768, 32768) tensors.
import torch
import torch.nn as nn
import torch.nn.functional as F

ROWS = 32768
COLS = 32768


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, pred: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return F.smooth_l1_loss(pred, target, reduction="mean", beta=1.0)


def get_inputs():
    return [torch.randn(ROWS, COLS), torch.randn(ROWS, COLS)]


def get_init_inputs():
    return []
