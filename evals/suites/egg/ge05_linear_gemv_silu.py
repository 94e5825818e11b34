# family: gemm-epilogue
# kind: fused-chain
# One-token Linear 4096->11008 (with bias) then SiLU: a GEMV over the weight (memory-bound).
import torch
import torch.nn as nn
import torch.nn.functional as F

BATCH = 1
IN_F = 4096
OUT_F = 11008


class Model(nn.Module):
    def __init__(self, in_f: int, out_f: int):
        super().__init__()
        self.fc = nn.Linear(in_f, out_f)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.silu(self.fc(x))


def get_inputs():
    return [torch.randn(BATCH, IN_F)]


def get_init_inputs():
    return [IN_F, OUT_F]
