# family: loss
# kind: single-op
# Triplet margin loss (margin 1.0, p=2) on anchor/positive/negative (16384, 2048).
import torch
import torch.nn as nn

ROWS = 16384
DIM = 2048
MARGIN = 1.0


class Model(nn.Module):
    def __init__(self, margin: float):
        super().__init__()
        self.loss = nn.TripletMarginLoss(margin=margin)

    def forward(self, anchor: torch.Tensor, positive: torch.Tensor, negative: torch.Tensor) -> torch.Tensor:
        return self.loss(anchor, positive, negative)


def get_inputs():
    return [torch.randn(ROWS, DIM), torch.randn(ROWS, DIM), torch.randn(ROWS, DIM)]


def get_init_inputs():
    return [MARGIN]
