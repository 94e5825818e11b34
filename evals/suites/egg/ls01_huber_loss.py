# family: loss
# kind: single-op
# Mean Huber loss (delta=1.0) between two (8192, 4096) tensors.
import torch
import torch.nn as nn
import torch.nn.functional as F

ROWS = 8192
COLS = 4096
DELTA = 1.0


class Model(nn.Module):
    def __init__(self, delta: float):
        super().__init__()
        self.delta = delta

    def forward(self, pred: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return F.huber_loss(pred, target, delta=self.delta)


def get_inputs():
    return [torch.randn(ROWS, COLS), torch.randn(ROWS, COLS)]


def get_init_inputs():
    return [DELTA]
