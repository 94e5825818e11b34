# family: network
# kind: fused-chain
# Two-layer nn.LSTM over (128, 256, 256) batch-first sequences with given initial states, then a
# Linear classifier of the last time step.
import torch
import torch.nn as nn

BATCH = 128
SEQ = 256
IN_F = 256
HIDDEN = 512
LAYERS = 2
CLASSES = 10


class Model(nn.Module):
    def __init__(self, in_f: int, hidden: int, layers: int, classes: int):
        super().__init__()
        self.lstm = nn.LSTM(in_f, hidden, layers, batch_first=True)
        self.fc = nn.Linear(hidden, classes)

    def forward(self, x: torch.Tensor, h0: torch.Tensor, c0: torch.Tensor) -> torch.Tensor:
        out, _ = self.lstm(x, (h0, c0))
        return self.fc(out[:, -1, :])


def get_inputs():
    return [
        torch.randn(BATCH, SEQ, IN_F),
        torch.randn(LAYERS, BATCH, HIDDEN),
        torch.randn(LAYERS, BATCH, HIDDEN),
    ]


def get_init_inputs():
    return [IN_F, HIDDEN, LAYERS, CLASSES]
