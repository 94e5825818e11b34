"""A library conv followed by a group / instance norm (convnorm family, mixed policy): the conv
without its bias, one statistics pass over its output in the layout the library returned
(channels-last or NCHW), a merge per (sample, group), one normalize pass that writes NCHW. Its two
seeds come before the partition's own (conv group, then norm group), which stay as later seeds.
Each seed goes through the real sandboxed check on CPU (random trials, the x3 scaled trial, a
second shape), also with small tiles so the statistics merge several tiles and chunks; every
kernel is compiled for sm_90."""

from __future__ import annotations

import pytest
from expert_helpers import check_jobs, describe_many, request, run_jobs

from graph.records import TaskSpec
from nodes.expert import ExpertCode
from nodes.expert.families import convnorm
from nodes.expert.lowering import lower

toolbox = pytest.importorskip("tools.toolbox")

# an instance norm after a padded 2-d conv, a constant divide after it
CONV_IN = """
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
# a per-channel add and scale and a sigmoid between a 2-d conv and its group norm
CONV_GN = """
import torch
import torch.nn as nn

B = 3
C_IN = 4
C_OUT = 12
H = 10
W = 7


class Model(nn.Module):
    def __init__(self, c_in, c_out):
        super().__init__()
        self.conv = nn.Conv2d(c_in, c_out, 3)
        self.bias = nn.Parameter(torch.randn(c_out, 1, 1))
        self.scale = nn.Parameter(torch.randn(c_out, 1, 1))
        self.gn = nn.GroupNorm(4, c_out)

    def forward(self, x):
        x = torch.sigmoid((self.conv(x) + self.bias) * self.scale)
        return self.gn(x)


def get_inputs():
    return [torch.rand(B, C_IN, H, W)]


def get_init_inputs():
    return [C_IN, C_OUT]
"""
# a 3-d conv, a group norm, a min against a tensor constant and a clamp
CONV3D_GN = """
import torch
import torch.nn as nn

B = 2
C_IN = 3
C_OUT = 6
D = 5
H = 6
W = 7


class Model(nn.Module):
    def __init__(self, c_in, c_out):
        super().__init__()
        self.conv = nn.Conv3d(c_in, c_out, 3)
        self.norm = nn.GroupNorm(3, c_out)

    def forward(self, x):
        x = self.norm(self.conv(x))
        x = torch.min(x, torch.tensor(0.0, device=x.device))
        return torch.clamp(x, min=-0.5, max=1.0)


def get_inputs():
    return [torch.rand(B, C_IN, D, H, W)]


def get_init_inputs():
    return [C_IN, C_OUT]
"""
# a transposed 3-d conv (odd sizes, stride 2) scaled and shifted, a group norm with its own eps,
# then a GELU plus a term that reads the value before the norm again
CONVT3D_GN_ACT = """
import torch
import torch.nn as nn

B = 3
C_IN = 5
C_OUT = 9
D = 3
H = 5
W = 6


class Model(nn.Module):
    def __init__(self, c_in, c_out):
        super().__init__()
        self.conv = nn.ConvTranspose3d(c_in, c_out, 3, stride=2, padding=1, output_padding=1)
        self.norm = nn.GroupNorm(3, c_out, eps=1e-4)

    def forward(self, x):
        y = self.conv(x) * 2.0 + 0.5
        z = self.norm(y)
        return torch.nn.functional.gelu(z) + y * 0.1


def get_inputs():
    return [torch.randn(B, C_IN, D, H, W)]


def get_init_inputs():
    return [C_IN, C_OUT]
"""
# instance norm keeping running statistics: the eval-mode checker normalises by them
CONV_IN_RUNNING = CONV_IN.replace(
    "nn.InstanceNorm2d(c_out)", "nn.InstanceNorm2d(c_out, track_running_stats=True)"
)

# a 1-d conv: no channels-last layout, one fused seed
CONV1D_GN = """
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv1d(4, 6, 3)

    def forward(self, x):
        return torch.relu(F.group_norm(self.conv(x), 2))


def get_inputs():
    return [torch.randn(3, 4, 17)]


def get_init_inputs():
    return []
"""

TASKS = {"conv-in": CONV_IN, "conv-gn": CONV_GN, "conv3d-gn": CONV3D_GN, "convt3d-gn-act": CONVT3D_GN_ACT}


FUSED = {convnorm.CL_ALGORITHM, convnorm.ALGORITHM}


@pytest.fixture(scope="module")
def descs():
    keys = list(TASKS)
    big = CONV_IN.replace("H = 11", "H = 300").replace("W = 9", "W = 300").replace("C_OUT = 5", "C_OUT = 32")
    extra = {"big": big, "running": CONV_IN_RUNNING, "conv1d": CONV1D_GN}
    out = describe_many([(TASKS[k], {}) for k in keys] + [(v, {}) for v in extra.values()])
    return dict(zip([*keys, *extra], out, strict=True))


def _seeds(desc, n=8):
    out = []
    for i in range(n):
        r = ExpertCode().write(request(desc, seed_index=i, n_seeds=n))
        if r.source is None:
            break
        out.append(r)
    return out


@pytest.mark.parametrize("key", list(TASKS))
def test_fused_seeds_lead_and_the_partition_seeds_stay(key, descs):
    seeds = _seeds(descs[key])
    algos = [r.algorithm for r in seeds]
    # small outputs: the conv on the input as it is first, channels-last second
    assert algos[:2] == [convnorm.ALGORITHM, convnorm.CL_ALGORITHM], algos
    assert all(r.family == "convnorm" for r in seeds[:2])
    # the conv group and the norm group of the partition follow, as before
    rest = seeds[2:]
    assert rest and all(r.family == "partition" for r in rest), algos
    assert rest[0].params["g0.algorithm"].startswith("library")
    for r in seeds[:2]:
        src = r.source
        cl = r.algorithm == convnorm.CL_ALGORITHM
        kernels = {"cn_stats_kernel", "cn_merge_kernel", "cn_apply_kernel"} | (
            {"nchw_to_nhwc_kernel"} if cl else set()
        )
        assert src.count("@triton.jit") == len(kernels), src
        assert all(f"def {k}(" in src for k in kernels)
        # the conv without its bias, no separate bias or layout pass back
        assert ", None," in src.split("def forward")[1].splitlines()[1]
        assert "to_contiguous" not in src and "nhwc_to_nchw" not in src
        assert ("to_channels_last(" in src) == cl


def test_channels_last_first_for_large_outputs(descs):
    seeds = _seeds(descs["big"], 3)
    assert [r.algorithm for r in seeds[:2]] == [convnorm.CL_ALGORITHM, convnorm.ALGORITHM]
    assert seeds[2].family == "partition"


def test_no_fused_seed_where_the_norm_does_not_fit(descs):
    # running statistics of an instance norm: the family names the reason
    with pytest.raises(convnorm.Unsupported, match="running statistics"):
        convnorm.match(_whole_view(descs["running"]))
    # the strict policy keeps no library call: no fused seed either
    assert lower(descs["conv-in"], "strict").fused is None
    # a 1-d conv has no channels-last layout: the NCHW seed only, verified
    seeds = _seeds(descs["conv1d"])
    assert seeds[0].algorithm == convnorm.ALGORITHM and seeds[1].family == "partition"
    tb = toolbox.Toolbox()
    chk = tb.check(TaskSpec(path="c1.py", name="c1", source=CONV1D_GN), seeds[0].source, policy="mixed")
    assert chk.accepted, chk.reasons


def _whole_view(desc):
    from nodes.expert.decompose import decompose
    from nodes.expert.graphview import GraphView

    return GraphView.of(decompose(desc))


@pytest.mark.parametrize("key", list(TASKS))
def test_fused_seeds_verify(key, descs):
    tb = toolbox.Toolbox()
    task = TaskSpec(path=f"{key}.py", name=key, source=TASKS[key])
    for r in _seeds(descs[key], 2):
        chk = tb.check(task, r.source, policy="mixed")
        assert chk.accepted, (r.algorithm, chk.reasons)
        assert len(chk.shapes_checked) >= 2, chk.shapes_checked


@pytest.mark.parametrize("key", ["conv-gn", "convt3d-gn-act"])
def test_small_tiles_merge_tiles_and_chunks(key, descs):
    """64-element tiles and many programs per SM: every chunk holds several tiles, a ragged last
    one, and each (sample, group) row several chunks, which the merge kernel combines."""
    tb = toolbox.Toolbox()
    task = TaskSpec(path=f"{key}.py", name=key, source=TASKS[key])
    low = lower(descs[key], "mixed")
    for i in range(2):
        params = dict(low.seed(i, "mixed"), BLOCK=64, PROGS_PER_SM=64)
        assert low.valid(params)
        chk = tb.check(task, low.generate(descs[key], params), policy="mixed")
        assert chk.accepted, (params["algorithm"], chk.reasons)


def test_fused_kernels_compile_for_sm90(descs):
    jobs = []
    for key in ("conv-gn", "convt3d-gn-act"):
        jobs += [dict(j, kind="compile") for j in check_jobs(TASKS[key], {}, _seeds(descs[key], 2))]
    for res in run_jobs(jobs, interpret=False):
        assert res.get("ok"), res.get("error")
        names = {k["kernel"] for k in res["kernels"]}
        assert {"cn_stats_kernel", "cn_merge_kernel", "cn_apply_kernel"} <= names, names


def test_tuning_stays_in_the_fused_lowering(descs):
    from expert_helpers import stage
    from fakes import best_from_reply

    seed = _seeds(descs["conv-gn"], 1)[0]
    best = best_from_reply(seed)
    r = ExpertCode().write(request(descs["conv-gn"], mode="tune", stage=stage("tiling"), best=best))
    assert r.source is not None and r.family == "convnorm"
    assert r.params["algorithm"] == seed.params["algorithm"] and r.params["BLOCK"] != seed.params["BLOCK"]
