"""A library conv group in channels-last (mixed policy): the input turned channels-last by
Triton, cuDNN without the bias, the bias added on the way back to a contiguous tensor for the
groups after it. Chosen first for large outputs, offered second for small ones; each task here
goes through the real sandbox with that seed (random trials, the x3 scaled trial, a second
non-power-of-two shape)."""

from __future__ import annotations

import pytest
from expert_helpers import describe_many, request

from graph.records import TaskSpec
from nodes.expert import ExpertCode
from nodes.expert.families import library as libfam

toolbox = pytest.importorskip("tools.toolbox")

CONV_NORM = """
import torch
import torch.nn as nn

B = 2
C_IN = 3
C_OUT = 5
H = 11
W = 9


class Model(nn.Module):
    def __init__(self, c_in, c_out):
        super().__init__()
        self.conv = nn.Conv2d(c_in, c_out, 3, padding=1)
        self.norm = nn.InstanceNorm2d(c_out)

    def forward(self, x):
        return self.norm(self.conv(x)) / 2.0


def get_inputs():
    return [torch.randn(B, C_IN, H, W)]


def get_init_inputs():
    return [C_IN, C_OUT]
"""

# a functional transposed 3-d conv without a bias, then a group norm
CONVT3D_NORM = """
import torch
import torch.nn as nn
import torch.nn.functional as F

B = 2
C_IN = 4
C_OUT = 6
D = 3
H = 5
W = 4


class Model(nn.Module):
    def __init__(self, c_in, c_out):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(c_in, c_out, 2, 2, 2) * 0.2)
        self.norm = nn.GroupNorm(3, c_out)

    def forward(self, x):
        y = F.conv_transpose3d(x, self.weight, None, stride=2)
        return self.norm(y) * 3.0


def get_inputs():
    return [torch.randn(B, C_IN, D, H, W)]


def get_init_inputs():
    return [C_IN, C_OUT]
"""

# a conv, a softmax over its channels and a tail: one tile pass holds every channel of a pixel
CONV_SOFTMAX = """
import torch
import torch.nn as nn

B = 2
C_IN = 3
C_OUT = 12
H = 9
W = 11


class Model(nn.Module):
    def __init__(self, c_in, c_out):
        super().__init__()
        self.conv = nn.ConvTranspose2d(c_in, c_out, 3, stride=2, padding=1, output_padding=1)
        self.bias = nn.Parameter(torch.randn(c_out, 1, 1))

    def forward(self, x):
        x = torch.softmax(self.conv(x) * 1.5, dim=1)
        return torch.sigmoid((x + self.bias) * 2.0)


def get_inputs():
    return [torch.randn(B, C_IN, H, W)]


def get_init_inputs():
    return [C_IN, C_OUT]
"""

TASKS = {"conv-instancenorm": CONV_NORM, "convt3d-groupnorm": CONVT3D_NORM}


def _cl_seed(desc):
    for i in range(8):
        r = ExpertCode().write(request(desc, seed_index=i, n_seeds=8))
        if r.source is None:
            break
        if any(v == libfam.CL_ALGORITHM for k, v in r.params.items() if k.endswith(".algorithm")):
            return r
    return None


def test_channels_last_first_only_for_large_outputs():
    big = (
        CONV_NORM.replace("H = 11", "H = 300").replace("W = 9", "W = 300").replace("C_OUT = 5", "C_OUT = 32")
    )
    small, large = describe_many([(CONV_NORM, {}), (big, {})])
    first_small = _first_partition_seed(small)
    first_large = _first_partition_seed(large)
    assert first_small.params["g0.algorithm"] == libfam.ALGORITHM
    assert first_large.params["g0.algorithm"] == libfam.CL_ALGORITHM
    src = first_large.source
    # 3 input channels: padded to 4 zero-filled ones (cuDNN's 16-byte channels-last alignment),
    # the weight likewise, so both products are the same
    assert "conv2d(g0_to_channels_last(x, 4), g0_cl_conv_weight(self.conv.weight, 4), None," in src
    assert "g0_to_contiguous(t_cl, self.conv.bias)" in src


def _first_partition_seed(desc):
    """The first seed of the separate conv and norm groups (the fused conv + norm seeds of the
    convnorm family come before them)."""
    for i in range(8):
        r = ExpertCode().write(request(desc, seed_index=i, n_seeds=8))
        if r.family == "partition":
            return r
    raise AssertionError("no partition seed")


@pytest.mark.parametrize("key", list(TASKS))
def test_channels_last_library_group_verifies(key):
    tb = toolbox.Toolbox()
    task = TaskSpec(path=f"{key}.py", name=key, source=TASKS[key])
    desc = tb.describe(task, shrink=False)
    reply = _cl_seed(desc)
    assert reply is not None, "no seed uses the channels-last library conv"
    chk = tb.check(task, reply.source, policy="mixed")
    assert chk.accepted, chk.reasons
    assert len(chk.shapes_checked) >= 2, chk.shapes_checked


def test_channel_softmax_tail_seeds_verify():
    """Both tile-pass seeds (channels-last and the input's own layout) of a conv whose tail has a
    softmax over channels: one kernel after the library conv, checked at a second shape."""
    tb = toolbox.Toolbox()
    task = TaskSpec(path="conv_softmax.py", name="conv_softmax", source=CONV_SOFTMAX)
    desc = tb.describe(task, shrink=False)
    replies = [ExpertCode().write(request(desc, seed_index=i, n_seeds=2)) for i in range(2)]
    assert [r.algorithm for r in replies] == ["library-conv+tile-epilogue", "library-conv+fused-epilogue"]
    for r in replies:
        assert r.family == "libconv" and "tl.max(s_in, 1)" in r.source
        chk = tb.check(task, r.source, policy="mixed")
        assert chk.accepted, (r.algorithm, chk.reasons)
        assert len(chk.shapes_checked) >= 2, chk.shapes_checked


def test_cl_conv_weight_lays_out_once_and_pads_with_zeros():
    """The helper the channels-last calls use: a weight laid out channels-last in place once (same
    values, kept by load_state_dict), and a zero-padded copy where the input's channels are
    padded to 4, whose products equal the unpadded conv's."""
    import torch

    from nodes.expert.kernelfiles import kernel_source

    ns: dict = {}
    exec(kernel_source("layout.py", "cl_conv_weight"), {"torch": torch}, ns)
    cl_conv_weight = ns["cl_conv_weight"]
    conv = torch.nn.Conv2d(8, 5, 3)
    before = conv.weight.detach().clone()
    w = cl_conv_weight(conv.weight)
    assert w is conv.weight and w.is_contiguous(memory_format=torch.channels_last)
    assert torch.equal(w, before)
    fresh = torch.nn.Conv2d(8, 5, 3).state_dict()
    conv.load_state_dict(fresh)
    assert conv.weight.is_contiguous(memory_format=torch.channels_last)
    assert torch.equal(conv.weight, fresh["weight"])
    rgb = torch.nn.Conv2d(3, 6, 5, stride=2)
    x = torch.randn(2, 3, 17, 19)
    padded_w = cl_conv_weight(rgb.weight, 4)
    assert padded_w.shape == (6, 4, 5, 5) and not padded_w[:, 3:].any()
    assert rgb.weight.shape == (6, 3, 5, 5)  # the parameter itself is not padded
    xp = torch.cat([x, torch.zeros(2, 1, 17, 19)], 1).contiguous(memory_format=torch.channels_last)
    y = torch.nn.functional.conv2d(xp, padded_w, rgb.bias, 2)
    torch.testing.assert_close(y, rgb(x), rtol=1e-5, atol=1e-5)
