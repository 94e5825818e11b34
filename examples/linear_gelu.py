import torch
import torch.nn as nn

BATCH = 2048
IN_FEATURES = 4096
OUT_FEATURES = 4096


class Model(nn.Module):
    """Linear layer (with bias) followed by GELU and a scalar scale."""

    def __init__(self, in_features: int, out_features: int, scale: float):
        super().__init__()
        self.fc = nn.Linear(in_features, out_features)
        self.act = nn.GELU()
        self.scale = scale

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.act(self.fc(x)) * self.scale


def get_inputs():
    return [torch.randn(BATCH, IN_FEATURES)]


def get_init_inputs():
    return [IN_FEATURES, OUT_FEATURES, 0.5]
