"""assemble.render: pieces named per group, shared helpers once, unused functions and imports
left out, the reference's __init__ helpers carried without their forward. Pure Python."""

from __future__ import annotations

import ast

from graph.records import TaskDescription
from nodes.expert.assemble import Part, Piece, free_names, render
from nodes.expert.hostops import run_time_dims
from tools.worker.static_rules import static_findings

TASK = """
import os
import math
import torch
import torch.nn as nn
import torch.nn.functional as F

WIDTH = 64
BATCH = 128


class Block(nn.Module):
    expansion = 1

    def __init__(self, c):
        super().__init__()
        self.conv = nn.Conv2d(c, c * self.expansion, 3, padding=1)

    def forward(self, x):
        return F.relu(self.conv(x))


class Unused(nn.Module):
    def forward(self, x):
        return x


class Model(nn.Module):
    def __init__(self, c: int = WIDTH):
        super().__init__()
        self.blocks = self._make(c)

    def _make(self, c):
        return nn.Sequential(Block(c), Block(c))

    def forward(self, x, scale: float = 2.0):
        return self.blocks(x) * scale


def get_inputs():
    return [torch.randn(BATCH, WIDTH, 8, 8)]


def get_init_inputs():
    return [WIDTH]
"""

KERNEL = """
@triton.jit
def _ew_tanh(x):
    return x


@triton.jit
def scale_kernel(x_ptr, n, BLOCK: tl.constexpr):
    pass


@triton.jit
def never_called_kernel(x_ptr):
    pass
"""
LAUNCH = """
def launch_scale(x):
    scale_kernel[(1,)](x, x.numel(), BLOCK=16)
    return x
"""


def _desc() -> TaskDescription:
    return TaskDescription.model_validate(
        {
            "name": "t",
            "source": TASK,
            "inputs": [{"shape": [2, 4], "dtype": "float32", "stride": [4, 1]}],
            "outputs": [],
        }
    )


def _file(parts: list[Part], tail: str = "") -> str:
    return render(_desc(), parts, "doc", tail=tail)


def test_one_piece_keeps_names_drops_unused_functions_and_imports():
    src = _file([Part(Piece(KERNEL, LAUNCH, "return launch_scale(x)"))])
    tree = ast.parse(src)
    defs = {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
    assert {"scale_kernel", "launch_scale", "ModelNew", "Block"} <= defs
    assert "never_called_kernel" not in defs and "_ew_tanh" not in defs and "Unused" not in defs
    assert "import os" not in src and "import math" not in src and "torch.nn.functional" not in src
    assert src.count("import torch\n") == 1
    # helper class carried for __init__, without its forward; Model's helper method kept
    block = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Block")
    assert {f.name for f in block.body if isinstance(f, ast.FunctionDef)} == {"__init__"}
    assert "expansion = 1" in src and "def _make(self, c)" in src and "WIDTH = 64" in src
    assert "def forward(self, x, scale=2.0):" in src
    assert not [f for f in static_findings(src) if "import" in f]


def test_groups_are_named_per_group_and_shared_text_is_kept_once():
    same = Piece(KERNEL, LAUNCH, "return launch_scale(x)")
    other = Piece(KERNEL.replace("pass", "x = 1", 1), LAUNCH, "return launch_scale(v_a)")
    src = _file([Part(same, "g0", "v_a"), Part(same, "g1", "v_b"), Part(other, "g2", "v_c")], "return v_c")
    tree = ast.parse(src)
    defs = [n.name for n in tree.body if isinstance(n, ast.FunctionDef)]
    # g1 is g0 again: one kernel, one launcher; g2 differs: its own, named by its group
    assert defs.count("g0_scale_kernel") == 1 and "g1_scale_kernel" not in defs
    assert "g2_scale_kernel" in defs and "g2_launch_scale" in defs
    fwd = src[src.index("def forward") :]
    assert "v_a = g0_launch_scale(x)" in fwd and "v_b = g0_launch_scale(x)" in fwd
    assert "v_c = g2_launch_scale(v_a)" in fwd and fwd.rstrip().endswith("return v_c")


def test_free_names_ignore_locals_and_parameters():
    code = "import torch\nN = 3\ndef f(a):\n    N, C = a.shape\n    return tl.sum(N) + triton.cdiv(C, K)\n"
    assert free_names(code) == {"tl", "triton", "K"}


def test_baked_reshape_sizes_read_the_run_shapes():
    assert run_time_dims("x", [16, 32, 48], [16, 32, 8, 6]) == ["x.shape[0]", "x.shape[1]", "8", "-1"]
    assert run_time_dims("x", [16, 32, 8, 6], [16, 32, 48]) == ["x.shape[0]", "x.shape[1]", "-1"]
    assert run_time_dims("x", [16, 32, 48], [512, 48]) == ["-1", "x.shape[2]"]
    # size-1 dims added around a parameter (view(1, -1, 1, 1, 1) of a (C,) vector): C is read
    # at run time, so a second shape with another C still broadcasts
    assert run_time_dims("p", [8], [1, 8, 1, 1, 1]) == ["1", "p.shape[0]", "1", "1", "1"]
    assert run_time_dims("x", [4, 3], [1, 4, 1, 3]) == ["1", "x.shape[0]", "1", "x.shape[1]"]
