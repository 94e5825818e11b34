# family: gemm-epilogue
# kind: fused-chain
# Linear 4096->4096 (with bias) then ReLU on (4096, 4096).
import torch
import torch.nn as nn

BATCH = 4096
IN_F = 4096
OUT_F = 4096


class Model(nn.Module):
    def __init__(self, in_f: int, out_f: int):
        super().__init__()
        self.fc = nn.Linear(in_f, out_f)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.fc(x))


def get_inputs():
    return [torch.randn(BATCH, IN_F)]


def get_init_inputs():
    return [IN_F, OUT_F]
