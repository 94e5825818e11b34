"""The ATen-level capture (tools/worker/atencapture.py): the third path, used when both torch.fx
traces fail. Tasks whose forward fx cannot trace (einops' rearrange, an isinstance check on the
input) are captured with make_fx and mapped back onto the fx path's op dicts: canonical op names,
param nodes named by the state dict, slices as getitem, masks built in forward folded into
tri_mask / scalar constants; an op with no mapping fails the capture naming it.

Capture runs in the expert runner subprocess (this process never imports torch); then tasks go
through the real sandbox (Toolbox.describe -> expert seed -> Toolbox.check: random trials, the
x3 scaled trial and a second shape) on CPU."""

from __future__ import annotations

import pytest
from expert_helpers import describe_many, request

from graph.records import TaskSpec
from nodes.expert import ExpertCode

toolbox = pytest.importorskip("tools.toolbox")

# (a) einops around a linear layer with an elementwise tail: rearrange rejects an fx Proxy.
EINOPS_LINEAR = """
import torch
import torch.nn as nn
from einops import rearrange

BATCH = 3
SEQ = 10
HEADS = 3
HEAD_DIM = 12
OUT_DIM = 9


class Model(nn.Module):
    def __init__(self, heads, head_dim, out_dim):
        super().__init__()
        self.heads = heads
        self.proj = nn.Linear(head_dim, out_dim)

    def forward(self, x):
        h = rearrange(x, "b t (h d) -> b h t d", h=self.heads)
        y = torch.sigmoid(self.proj(h)) * 2.0 - 0.5
        return rearrange(y, "b h t o -> b t (h o)")


def get_inputs():
    return [torch.randn(BATCH, SEQ, HEADS * HEAD_DIM)]


def get_init_inputs():
    return [HEADS, HEAD_DIM, OUT_DIM]
"""

# (b) a helper that refuses anything but a real tensor (an fx Proxy is not one), then a row
# reduction with an elementwise prologue.
CHECKED_REDUCTION = """
import torch
import torch.nn as nn

ROWS = 10
COLS = 24


def as_tensor(t):
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"expected a tensor, got {type(t).__name__}")
    return t


class Model(nn.Module):
    def __init__(self, cols):
        super().__init__()
        self.scale = nn.Parameter(torch.randn(cols))

    def forward(self, x):
        x = as_tensor(x)
        return ((x * self.scale - 1.0) ** 2).mean(dim=-1)


def get_inputs():
    return [torch.randn(ROWS, COLS)]


def get_init_inputs():
    return [COLS]
"""

# (c) pairwise differences of a running sum, masked above the diagonal by a mask the forward
# builds from the input's length, and scaled by a number made a tensor in forward.
TRIL_MASK = """
import torch
import torch.nn as nn
from einops import rearrange

BATCH = 3
LENGTH = 12


class Model(nn.Module):
    def forward(self, s):
        c = torch.cumsum(rearrange(s, "b l -> b l"), dim=-1)
        d = c.unsqueeze(-1) - c.unsqueeze(-2)
        n = s.shape[-1]
        keep = torch.tril(torch.ones(n, n, dtype=torch.bool, device=s.device))
        return torch.exp(d.masked_fill(~keep, float("-inf")) * torch.tensor(0.5))


def get_inputs():
    return [torch.rand(BATCH, LENGTH)]


def get_init_inputs():
    return []
"""

_HELPER = """
import torch
import torch.nn as nn


def as_tensor(t):
    if not isinstance(t, torch.Tensor):
        raise TypeError("expected a tensor")
    return t

"""

# An op the ATen mapping has no canonical name for: the capture must say so, naming it.
UNMAPPED = (
    _HELPER
    + """
class Model(nn.Module):
    def forward(self, x):
        return torch.special.bessel_j0(as_tensor(x)) + 1.0


def get_inputs():
    return [torch.randn(4, 5)]


def get_init_inputs():
    return []
"""
)

# A write into a view: an out-of-place graph would silently drop it, so the capture refuses.
VIEW_WRITE = (
    _HELPER
    + """
class Model(nn.Module):
    def forward(self, x):
        y = as_tensor(x) * 2.0
        y[:, 0] = 0.0
        return y + 1.0


def get_inputs():
    return [torch.randn(4, 5)]


def get_init_inputs():
    return []
"""
)

TASKS = {"einops": EINOPS_LINEAR, "checked": CHECKED_REDUCTION, "tril": TRIL_MASK}


@pytest.fixture(scope="module")
def descs():
    names = [*TASKS, "unmapped", "view_write"]
    sources = [*TASKS.values(), UNMAPPED, VIEW_WRITE]
    return dict(zip(names, describe_many([(s, {}) for s in sources]), strict=True))


def _compute(desc):
    return [n for n in desc.op_graph if n.kind not in ("placeholder", "get_attr", "output")]


def test_einops_forward_captured_at_aten_level(descs):
    d = descs["einops"]
    assert d.capture_error is None and d.capture_path == "aten"
    by = {n.name: n for n in d.op_graph}
    params = {n.target: n for n in d.op_graph if n.kind == "get_attr"}
    assert {t: (n.op, n.shape) for t, n in params.items()} == {
        "proj.weight": ("param", [9, 12]),
        "proj.bias": ("param", [9]),
    }
    (x,) = [n for n in d.op_graph if n.kind == "placeholder"]
    assert (x.op, x.target, x.shape) == ("input", "x", [3, 10, 36])
    ops = [(n.kind, n.op) for n in _compute(d)]
    assert ops == [
        ("call_method", "reshape"),
        ("call_method", "permute"),
        ("call_function", "linear"),
        ("call_function", "sigmoid"),
        ("call_function", "mul"),
        ("call_function", "sub"),
        ("call_method", "permute"),
        ("call_method", "reshape"),
    ]
    first, perm, lin, sig, mul, sub, perm2, last = _compute(d)
    assert first.args == [{"node": x.name}, [3, 10, 3, 12]] and first.shape == [3, 10, 3, 12]
    assert perm.args == [{"node": first.name}, [0, 2, 1, 3]] and perm.shape == [3, 3, 10, 12]
    assert lin.target == "torch.nn.functional.linear" and lin.shape == [3, 3, 10, 9]
    assert lin.args == [
        {"node": perm.name},
        {"node": params["proj.weight"].name},
        {"node": params["proj.bias"].name},
    ]
    assert sig.target == "torch.sigmoid" and mul.target == "operator.mul" and sub.target == "operator.sub"
    assert mul.args == [{"node": sig.name}, 2.0] and sub.args == [{"node": mul.name}, 0.5]
    assert last.args == [{"node": perm2.name}, [3, 10, 27]] and last.shape == [3, 10, 27]
    out = d.op_graph[-1]
    assert out.kind == "output" and out.args == [{"node": last.name}] and out.shape == [3, 10, 27]
    assert by[lin.name].dtype == "float32"


def test_untraceable_helper_feeds_a_reduction(descs):
    d = descs["checked"]
    assert d.capture_error is None and d.capture_path == "aten"
    (p,) = [n for n in d.op_graph if n.kind == "get_attr"]
    assert (p.op, p.target, p.shape) == ("param", "scale", [24])
    ops = [(n.op, n.target) for n in _compute(d)]
    assert ops == [
        ("mul", "operator.mul"),
        ("sub", "operator.sub"),
        ("pow", "operator.pow"),
        ("mean", "mean"),
    ]
    mean = _compute(d)[-1]
    assert mean.kind == "call_method" and mean.args[1] == -1 and mean.shape == [10]
    assert _compute(d)[2].args[1] == 2


def test_tril_mask_built_in_forward_is_folded(descs):
    d = descs["tril"]
    assert d.capture_error is None and d.capture_path == "aten"
    ops = [n.op for n in _compute(d)]
    assert ops == ["cumsum", "unsqueeze", "unsqueeze", "sub", "tri_mask", "masked_fill", "mul", "exp"]
    # ones -> tril -> ~ folded into one canonical mask: True where j - i >= 1 (above the diagonal)
    (mask,) = [n for n in d.op_graph if n.op == "tri_mask"]
    assert mask.kind == "call_function" and mask.args == [] and mask.shape == [12, 12]
    assert mask.kwargs == {"rows": 12, "cols": 12, "diagonal": 1, "upper": True, "fill": True}
    assert not any(n.op in ("ones", "tril", "invert", "bitwise_not") for n in d.op_graph)
    fill = next(n for n in d.op_graph if n.op == "masked_fill")
    assert fill.kind == "call_method" and fill.args[1:] == [{"node": mask.name}, {"float": "-inf"}]
    # torch.tensor(0.5) made in forward: a number written into the op that reads it
    mul = next(n for n in d.op_graph if n.op == "mul")
    assert mul.args == [{"node": fill.name}, 0.5]
    assert not any(n.op in ("scalar_constant", "tensor_constant") for n in d.op_graph)
    cumsum = _compute(d)[0]
    assert cumsum.target == "torch.cumsum" and cumsum.args[1] == -1


def test_unmapped_op_and_view_write_fail_naming_them(descs):
    bad = descs["unmapped"]
    assert bad.op_graph == []
    assert "symbolic_trace failed" in bad.capture_error
    assert "aten capture: no canonical op for aten.special_bessel_j0.default at node" in bad.capture_error
    vw = descs["view_write"]
    assert vw.op_graph == []
    assert (
        "aten capture: in-place aten.fill_" in vw.capture_error and "writes into a view" in vw.capture_error
    )


def test_seed_writes_plain_torch_host_code(descs):
    for key in TASKS:
        src = ExpertCode().write(request(descs[key])).source
        assert src is not None, key
        fwd = src[src.index("class ModelNew") :]
        assert "einops" not in fwd and "rearrange" not in fwd and "aten" not in fwd, key
    src = ExpertCode().write(request(descs["einops"])).source
    # the head split reads the model's own head count, not the captured number
    assert ".reshape(x.shape[0], x.shape[1], self.heads, -1)" in src


@pytest.mark.parametrize("key", list(TASKS))
def test_aten_captured_tasks_verify_end_to_end(key):
    """Describe in the sandbox, the expert's first seed, and the real checker (random trials, the
    x3 scaled trial, a second shape with other sizes, the strict policy)."""
    tb = toolbox.Toolbox()
    task = TaskSpec(path=f"{key}.py", name=key, source=TASKS[key])
    desc = tb.describe(task, shrink=False)
    assert desc.op_graph, desc.capture_error
    assert desc.capture_path == "aten"
    reply = ExpertCode().write(request(desc))
    assert reply.source is not None, reply.unsupported
    chk = tb.check(task, reply.source, policy="strict")
    assert chk.accepted, chk.reasons
    assert len(chk.shapes_checked) >= 2, chk.shapes_checked
