# family: loss
# kind: single-op
# Mean cross-entropy of (32768, 1000) logits against int64 class targets.
import torch
import torch.nn as nn
import torch.nn.functional as F

ROWS = 32768
CLASSES = 1000


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(logits, target)


def get_inputs():
    return [torch.randn(ROWS, CLASSES), torch.randint(0, CLASSES, (ROWS,))]


def get_init_inputs():
    return []
