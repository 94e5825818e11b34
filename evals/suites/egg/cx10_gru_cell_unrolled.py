# family: network
# kind: fused-chain
# GRU cell written out and unrolled over 4 steps: (4, 1024, 1024) inputs, hidden 1024, the last state.
import torch
import torch.nn as nn

STEPS = 4
BATCH = 1024
IN_F = 1024
HIDDEN = 1024


class Model(nn.Module):
    def __init__(self, in_f: int, hidden: int):
        super().__init__()
        self.x2h = nn.Linear(in_f, 3 * hidden)
        self.h2h = nn.Linear(hidden, 3 * hidden)

    def forward(self, x: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
        for t in range(x.shape[0]):
            xr, xz, xn = self.x2h(x[t]).chunk(3, dim=1)
            hr, hz, hn = self.h2h(h).chunk(3, dim=1)
            r = torch.sigmoid(xr + hr)
            z = torch.sigmoid(xz + hz)
            n = torch.tanh(xn + r * hn)
            h = (1 - z) * n + z * h
        return h


def get_inputs():
    return [torch.randn(STEPS, BATCH, IN_F), torch.randn(BATCH, HIDDEN)]


def get_init_inputs():
    return [IN_F, HIDDEN]
