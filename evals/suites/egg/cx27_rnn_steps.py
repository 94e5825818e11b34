# family: network
# kind: fused-chain
# Vanilla RNN written out over 6 steps: h = tanh(Linear(cat(x_t, h))), output Linear of the last
# state; (6, 1024, 1024) inputs, hidden 1024.
import torch
import torch.nn as nn

STEPS = 6
BATCH = 1024
IN_F = 1024
HIDDEN = 1024
OUT = 512


class Model(nn.Module):
    def __init__(self, in_f: int, hidden: int, out: int):
        super().__init__()
        self.i2h = nn.Linear(in_f + hidden, hidden)
        self.h2o = nn.Linear(hidden, out)

    def forward(self, x: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
        for t in range(x.shape[0]):
            h = torch.tanh(self.i2h(torch.cat((x[t], h), dim=1)))
        return self.h2o(h)


def get_inputs():
    return [torch.randn(STEPS, BATCH, IN_F), torch.randn(BATCH, HIDDEN)]


def get_init_inputs():
    return [IN_F, HIDDEN, OUT]
