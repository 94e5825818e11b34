import torch
import torch.nn as nn

BATCH = 4096
HIDDEN = 4096


class Model(nn.Module):
    """LayerNorm over the hidden dimension followed by a ReLU."""

    def __init__(self, hidden: int):
        super().__init__()
        self.ln = nn.LayerNorm(hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.ln(x))


def get_inputs():
    return [torch.randn(BATCH, HIDDEN)]


def get_init_inputs():
    return [HIDDEN]
