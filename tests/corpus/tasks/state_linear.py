# ruff: noqa
import torch
import torch.nn as nn

BATCH = 32
IN_FEATURES = 64
OUT_FEATURES = 48


class Model(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.fc = nn.Linear(in_features, out_features)
        self.w = nn.Parameter(torch.randn(out_features, out_features) * 0.1)

    def forward(self, x):
        # a state built in forward in the default dtype: the checker's float64 twin must build it
        # in float64 too, or its first matmul mixes float and double
        h = torch.ones(x.shape[0], self.w.shape[0], device=x.device)
        return torch.relu(self.fc(x) + h @ self.w)


def get_inputs():
    return [torch.randn(BATCH, IN_FEATURES)]


def get_init_inputs():
    return [IN_FEATURES, OUT_FEATURES]
