# family: loss
# kind: fused-chain
# Mean hinge loss clamp(1 - pred * target, min=0) with targets in {-1, +1}, (32768, 1024).
import torch
import torch.nn as nn

ROWS = 32768
COLS = 1024


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, pred: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return torch.mean(torch.clamp(1 - pred * target, min=0))


def get_inputs():
    return [torch.randn(ROWS, COLS), torch.randint(0, 2, (ROWS, COLS)).float() * 2 - 1]


def get_init_inputs():
    return []
