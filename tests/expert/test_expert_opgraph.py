"""tools/worker/opgraph.capture: canonical op names, module attributes, shapes, failures."""

from __future__ import annotations

from expert_helpers import describe_many

SPELLINGS = """
import torch
import torch.nn as nn
import torch.nn.functional as F

class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 6, bias=False)
        self.act = nn.LeakyReLU(0.3)
        self.sm = nn.LogSoftmax(dim=1)
        self.conv = nn.Conv2d(3, 4, kernel_size=3, stride=2, padding=1, groups=1)
        self.bn = nn.BatchNorm2d(4, eps=1e-3)

    def forward(self, x, img):
        a = torch.relu(x) + F.relu(x) + x.relu()
        b = torch.matmul(a, a.t()) @ a
        c = self.sm(self.act(self.fc(b))) * 2.0 - 1.0
        d = self.bn(self.conv(img)).sum(dim=(2, 3))
        return c.mean() + d.mean() + torch.softmax(c, -1).sum()

def get_inputs():
    return [torch.randn(5, 8), torch.randn(2, 3, 9, 9)]

def get_init_inputs():
    return []
"""

DATA_DEPENDENT = """
import torch
import torch.nn as nn

class Model(nn.Module):
    def forward(self, x):
        if x.sum() > 0:
            return x * 2
        return x

def get_inputs():
    return [torch.randn(4)]

def get_init_inputs():
    return []
"""


def test_capture_canonical_names_and_attrs():
    ok, bad = describe_many([(SPELLINGS, {}), (DATA_DEPENDENT, {})])
    nodes = ok.op_graph
    ops = [n.op for n in nodes]
    assert ops.count("relu") == 3  # torch.relu, F.relu, Tensor.relu
    assert ops.count("matmul") == 2  # torch.matmul and @
    assert "t" in ops and "log_softmax" in ops and "leaky_relu" in ops and "softmax" in ops
    by = {n.name: n for n in nodes}
    fc = by["fc"]
    assert fc.kind == "call_module" and fc.op == "linear" and fc.module_type == "Linear"
    assert fc.module_attrs == {"in_features": 8, "out_features": 6, "bias": False}
    assert by["act"].module_attrs["negative_slope"] == 0.3
    assert by["sm"].module_attrs["dim"] == 1
    conv = by["conv"]
    assert conv.op == "conv2d"
    assert conv.module_attrs["kernel_size"] == [3, 3] and conv.module_attrs["stride"] == [2, 2]
    assert conv.module_attrs["padding"] == [1, 1] and conv.module_attrs["groups"] == 1
    assert conv.shape == [2, 4, 5, 5] and conv.dtype == "float32"
    bn = by["bn"]
    assert bn.op == "batch_norm" and bn.module_attrs["eps"] == 1e-3 and bn.module_attrs["affine"] is True
    assert by["x"].kind == "placeholder" and by["x"].shape == [5, 8]
    # node references and constants
    mul = next(n for n in nodes if n.op == "mul")
    assert mul.args[0] == {"node": "sm"} and mul.args[1] == 2.0
    sums = [n for n in nodes if n.op == "sum" and n.kind == "call_method"]
    assert sums[0].kwargs.get("dim") == [2, 3]
    assert nodes[-1].kind == "output" and nodes[-1].shape == []
    assert bad.op_graph == [] and "symbolic_trace failed" in (bad.capture_error or "")
