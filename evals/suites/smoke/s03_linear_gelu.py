# family: gemm-epilogue
# kind: fused-chain
# Linear layer (with bias) followed by tanh-approximate GELU.
import torch
import torch.nn as nn

BATCH = 32
IN_FEATURES = 256
OUT_FEATURES = 128


class Model(nn.Module):
    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.fc = nn.Linear(in_features, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return nn.functional.gelu(self.fc(x), approximate="tanh")


def get_inputs():
    return [torch.randn(BATCH, IN_FEATURES)]


def get_init_inputs():
    return [IN_FEATURES, OUT_FEATURES]
