# family: composition
# kind: fused-chain
# One GEMM read by two reductions: logsumexp(y, 1) - mean(y, 1) for y = Linear(x), (8192, 2048) -> 4096.
import torch
import torch.nn as nn

BATCH = 8192
IN_F = 2048
OUT_F = 4096


class Model(nn.Module):
    def __init__(self, in_f: int, out_f: int):
        super().__init__()
        self.fc = nn.Linear(in_f, out_f)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.fc(x)
        return torch.logsumexp(y, dim=1) - y.mean(dim=1)


def get_inputs():
    return [torch.randn(BATCH, IN_F)]


def get_init_inputs():
    return [IN_F, OUT_F]
