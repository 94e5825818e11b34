# family: gemm-epilogue
# kind: fused-chain
# x @ W.T + b, sigmoid gate times the pre-activation (SiLU written out), (4096, 2048) -> 4096.
import torch
import torch.nn as nn

BATCH = 4096
IN_F = 2048
OUT_F = 4096


class Model(nn.Module):
    def __init__(self, in_f: int, out_f: int):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(out_f, in_f) * in_f**-0.5)
        self.bias = nn.Parameter(torch.zeros(out_f) + 0.1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = x @ self.weight.T + self.bias
        return y * torch.sigmoid(y)


def get_inputs():
    return [torch.randn(BATCH, IN_F)]


def get_init_inputs():
    return [IN_F, OUT_F]
