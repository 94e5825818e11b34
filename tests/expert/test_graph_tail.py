"""The graph-replay variant's split forward (nodes/expert/hostgraph.py with_graph_replay): a
forward of plain statements replays its prefix as a CUDA graph (`forward_prefix`, through
graph_call with copy_outputs=False) and launches the statements that make its outputs each
call, so the outputs are fresh memory instead of copies out of the graph's; an output that
still shares memory with the replay's is copied (graph_fresh). A forward with control flow, or
one that cannot be cut, keeps the whole-forward replay.

The split is read from the generated text here; the generated files run in a child process (CPU
torch: graph_call's eager path, then stand-in CUDA graphs for the replay path)."""

from __future__ import annotations

import ast
import json
import textwrap
from pathlib import Path

import pytest
from childproc import script_json

from graph.records import TaskDescription
from nodes.expert.hostgraph import HELPERS, with_graph_replay
from tools.worker.static_rules import static_findings

ROOT = Path(__file__).resolve().parents[2]

TASK = "import torch.nn as nn\n\n\nclass Model(nn.Module):\n    def forward(self, x):\n        return x\n"
DESC = TaskDescription(name="t", source=TASK, inputs=[], outputs=[])

# A squeeze-excite candidate as the generators write it: launch helpers at module level, a view
# between two launches.
HEAD = '''"""candidate"""

import torch
import torch.nn as nn


def g0_launch_reduce(x):
    return x.mean(dim=(2, 3))


def g1_launch_gemm(a, w, b):
    return torch.relu(a @ w + b)


def g2_launch_gemm(a, w, b):
    return torch.sigmoid(a @ w + b)


def g4_launch_ew_fused_kernel(x, s):
    return x * s


def g9_launch_identity(v):
    return v


class ModelNew(nn.Module):
    def __init__(self, c, r):
        super().__init__()
        self.fc1 = nn.Linear(c, r)
        self.fc2 = nn.Linear(r, c)

'''
SE = """    def forward(self, x):
        v_mean = g0_launch_reduce(x)
        v_relu = g1_launch_gemm(v_mean, self.fc1.weight.t(), self.fc1.bias)
        v_sigmoid = g2_launch_gemm(v_relu, self.fc2.weight.t(), self.fc2.bias)
        v_getitem = v_sigmoid[:, :, None, None]
        v_mul = g4_launch_ew_fused_kernel(x, v_getitem)
        return v_mul
"""
# the last statement before the return is a view: the tail starts at the launch before it
VIEW = SE.replace("        return v_mul\n", "        v_out = v_mul.view(-1)\n        return v_out\n")
# a tail that hands back a prefix tensor (as itself) next to a fresh one
ALIAS = """    def forward(self, x):
        v_mean = g0_launch_reduce(x)
        v_relu = g1_launch_gemm(v_mean, self.fc1.weight.t(), self.fc1.bias)
        v_sigmoid = g2_launch_gemm(v_relu, self.fc2.weight.t(), self.fc2.bias)
        v_out = g9_launch_identity(v_sigmoid)
        v_mul = g4_launch_ew_fused_kernel(x, v_sigmoid[:, :, None, None])
        return (v_out, v_mul)
"""


def _methods(source: str) -> dict[str, ast.FunctionDef]:
    cls = next(n for n in ast.parse(source).body if isinstance(n, ast.ClassDef) and n.name == "ModelNew")
    return {f.name: f for f in cls.body if isinstance(f, ast.FunctionDef)}


def _body(f: ast.FunctionDef) -> list[str]:
    return [ast.unparse(s) for s in f.body]


def _lines(*code: str) -> list[str]:
    """Statements as _body writes them (ast.unparse drops a tuple target's parentheses)."""
    return [ast.unparse(ast.parse(c)) for c in code]


def test_a_squeeze_excite_forward_replays_its_prefix_and_launches_its_tail():
    src = with_graph_replay(HEAD + SE, DESC)
    methods = _methods(src)
    assert list(methods) == ["__init__", "forward", "forward_prefix", "forward_eager"]
    assert _body(methods["forward"]) == _lines(
        "(v_getitem,) = graph_call(self, self.forward_prefix, (x,), copy_outputs=False)",
        "v_mul = g4_launch_ew_fused_kernel(x, v_getitem)",
        "return graph_fresh(v_mul, (v_getitem,))",
    )
    original = _body(_methods(HEAD + SE)["forward"])
    assert _body(methods["forward_prefix"]) == [*original[:4], "return (v_getitem,)"]
    assert _body(methods["forward_eager"]) == original  # the whole forward, as written
    assert "        (v_getitem,) = graph_call(" in src  # the file's indentation
    # the checker's rules hold (the stand-in launchers are no Triton kernels)
    assert [f for f in static_findings(src) if not f.startswith("static.no_kernel")] == []


def test_a_view_before_the_return_moves_the_tail_back_to_its_launch():
    src = with_graph_replay(HEAD + VIEW, DESC)
    assert _body(_methods(src)["forward"]) == _lines(
        "(v_getitem,) = graph_call(self, self.forward_prefix, (x,), copy_outputs=False)",
        "v_mul = g4_launch_ew_fused_kernel(x, v_getitem)",
        "v_out = v_mul.view(-1)",
        "return graph_fresh(v_out, (v_getitem,))",
    )


LOOP = """    def forward(self, x):
        v_mean = g0_launch_reduce(x)
        for _ in range(2):
            v_mean = g1_launch_gemm(v_mean, self.fc1.weight.t(), self.fc1.bias)
        v_out = g2_launch_gemm(v_mean, self.fc2.weight.t(), self.fc2.bias)
        return v_out
"""
BRANCH = """    def forward(self, x):
        v_mean = g0_launch_reduce(x)
        if self.training:
            v_mean = v_mean * 2.0
        v_out = g2_launch_gemm(v_mean, self.fc2.weight.t(), self.fc2.bias)
        return v_out
"""
EXPRESSION = SE.replace("        return v_mul\n", "        return v_mul + 1.0\n")
# no launch before the view: the tail would reach the first statement
NO_LAUNCH = """    def forward(self, x):
        v_mean = x.mean(dim=(2, 3))
        v_out = v_mean.view(-1)
        return v_out
"""


@pytest.mark.parametrize(
    "forward",
    [LOOP, BRANCH, EXPRESSION, NO_LAUNCH],
    ids=["for", "if", "returns an expression", "no prefix"],
)
def test_a_forward_that_does_not_split_is_replayed_whole(forward):
    src = with_graph_replay(HEAD + forward, DESC)
    wrapper = (
        "    def forward(self, x):\n"
        "        # one CUDA graph replay per call once the kernels have run eagerly (graph_call)\n"
        "        return graph_call(self, self.forward_eager, (x,))\n\n"
        "    def forward_eager(self, x):\n"
    )
    head, cls = HEAD.split("class ModelNew")
    whole = (
        head
        + HELPERS.rstrip("\n")
        + "\n\n\nclass ModelNew"
        + cls
        + forward.replace("    def forward(self, x):\n", wrapper)
    )
    assert src == whole


RUN = textwrap.dedent(
    """
    import contextlib, json, sys
    import torch

    sources = json.loads(sys.stdin.read())

    def load(name):
        ns = {}
        exec(compile(sources[name], name + ".py", "exec"), ns)
        torch.manual_seed(0)
        return ns, ns["ModelNew"](8, 2)

    def outputs(out):
        return list(out) if isinstance(out, tuple) else [out]

    def same(a, b):
        return all(torch.equal(p, q) for p, q in zip(outputs(a), outputs(b), strict=True))

    def ptrs(out):
        return {t.untyped_storage().data_ptr() for t in outputs(out)}

    result = {}
    x = torch.randn(2, 8, 5, 5)
    for name in ("split", "alias"):
        ns, m = load(name)
        with torch.no_grad():  # CPU tensors: graph_call's eager path
            result[name + "_cpu"] = all(same(m(x), m.forward_eager(x)) for _ in range(3))

    # Stand-ins for a GPU: any tensor may be replayed, and a replay recomputes the captured
    # prefix into the captured output tensors (the graph's memory), as a real replay does.
    CALL = {}

    class StandInGraph:
        def replay(self):
            m, args = CALL["model"], CALL["args"]
            entry = next(e for e in m.egg_graphs.values() if e["graph"] is self)
            for static, new in zip(entry["out"], m.forward_prefix(*args), strict=True):
                static.copy_(new)

    torch.cuda.CUDAGraph = StandInGraph
    torch.cuda.graph = lambda g: contextlib.nullcontext()
    torch.cuda.synchronize = lambda: None
    torch.cuda.is_current_stream_capturing = lambda: False
    for name in ("split", "alias"):
        ns, m = load(name)
        ns["graph_signature"] = lambda args: tuple((tuple(a.shape), a.dtype) for a in args)
        CALL.update(model=m, args=(x,))
        got, want = [], []
        with torch.no_grad():
            for _ in range(4):  # eager, captured (the address seen again), replayed twice
                x.copy_(torch.randn(2, 8, 5, 5))
                got.append(m(x))
                want.append(m.forward_eager(x))
        statics = {p for e in m.egg_graphs.values() for p in ptrs(e["out"])}
        result[name] = {
            "graphs": len(m.egg_graphs),
            "right": all(same(g, w) for g, w in zip(got, want, strict=True)),
            "in_graph_memory": [bool(ptrs(g) & statics) for g in got],
            "fresh": not ptrs(got[2]) & ptrs(got[3]),
        }
    print(json.dumps(result))
    """
)


def test_the_split_forward_runs_as_the_whole_forward_and_hands_out_no_graph_memory():
    """On CPU tensors (graph_call's eager path) the split forward gives forward_eager's answer;
    with stand-in graphs the prefix is captured and replayed, every call's answer is right, the
    outputs are fresh tensors of each call, and none is memory of the graph, also where the tail
    hands back a prefix tensor itself (a copy then)."""
    sources = {
        "split": with_graph_replay(HEAD + VIEW, DESC),
        "alias": with_graph_replay(HEAD + ALIAS, DESC),
    }
    assert all("def forward_prefix(" in s for s in sources.values())
    assert "return graph_fresh((v_out, v_mul), (v_sigmoid,))" in sources["alias"]
    r = script_json(RUN, stdin=json.dumps(sources))
    assert r["split_cpu"] and r["alias_cpu"]
    for name in ("split", "alias"):
        assert r[name]["graphs"] == 1 and r[name]["right"], r
        assert r[name]["in_graph_memory"] == [False] * 4, r
        assert r[name]["fresh"], r
