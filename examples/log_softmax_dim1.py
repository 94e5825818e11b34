import torch
import torch.nn as nn

BATCH = 64
CHANNELS = 512
SPATIAL = 1024


class Model(nn.Module):
    """Temperature-scaled log-softmax over the channel dimension (not the last one)."""

    def __init__(self, temperature: float):
        super().__init__()
        self.temperature = temperature

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.log_softmax(x / self.temperature, dim=1)


def get_inputs():
    return [torch.randn(BATCH, CHANNELS, SPATIAL)]


def get_init_inputs():
    return [2.0]
