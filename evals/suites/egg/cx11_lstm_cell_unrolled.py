# family: network
# kind: fused-chain
# LSTM cell written out and unrolled over 4 steps: one fused gate GEMM per step on cat(x_t, h),
# (4, 1024, 512) inputs, hidden 1024; returns the last hidden state.
import torch
import torch.nn as nn

STEPS = 4
BATCH = 1024
IN_F = 512
HIDDEN = 1024


class Model(nn.Module):
    def __init__(self, in_f: int, hidden: int):
        super().__init__()
        self.gates = nn.Linear(in_f + hidden, 4 * hidden)

    def forward(self, x: torch.Tensor, h: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
        for t in range(x.shape[0]):
            i, f, g, o = self.gates(torch.cat([x[t], h], dim=1)).chunk(4, dim=1)
            c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
            h = torch.sigmoid(o) * torch.tanh(c)
        return h


def get_inputs():
    return [torch.randn(STEPS, BATCH, IN_F), torch.randn(BATCH, HIDDEN), torch.randn(BATCH, HIDDEN)]


def get_init_inputs():
    return [IN_F, HIDDEN]
