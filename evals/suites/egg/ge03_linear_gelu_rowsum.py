# family: gemm-epilogue
# kind: fused-chain
# Linear 4096->1024 on (8192, 4096), erf GELU, sum over features (reduction epilogue).
import torch
import torch.nn as nn
import torch.nn.functional as F

BATCH = 8192
IN_F = 4096
OUT_F = 1024


class Model(nn.Module):
    def __init__(self, in_f: int, out_f: int):
        super().__init__()
        self.fc = nn.Linear(in_f, out_f)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.gelu(self.fc(x)).sum(dim=1)


def get_inputs():
    return [torch.randn(BATCH, IN_F)]


def get_init_inputs():
    return [IN_F, OUT_F]
