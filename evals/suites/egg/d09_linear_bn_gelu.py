# family: gemm-epilogue
# kind: fused-chain
# D9: Linear 4096->4096 on (2048, 4096), BatchNorm1d in training mode, erf GELU.
import torch
import torch.nn as nn
import torch.nn.functional as F

BATCH = 2048
IN_F = 4096
OUT_F = 4096


class Model(nn.Module):
    def __init__(self, in_f: int, out_f: int):
        super().__init__()
        self.fc = nn.Linear(in_f, out_f)
        self.bn = nn.BatchNorm1d(out_f)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # The module is in training mode: BatchNorm uses batch statistics.
        return F.gelu(self.bn(self.fc(x)))


def get_inputs():
    return [torch.randn(BATCH, IN_F)]


def get_init_inputs():
    return [IN_F, OUT_F]
