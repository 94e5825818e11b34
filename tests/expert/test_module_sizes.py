"""Sizes a forward reads from the module (`self.n_head`, `self.keep`) stay reads of the module in
ModelNew's host views, so the checker's second shape (other head counts, other slice bounds)
passes; a number the forward writes itself stays that number.

Pure tests of the host-view writer, then one task through the real sandbox (describe -> expert
seed -> check with its second, non-power-of-two shape)."""

from __future__ import annotations

import pytest
from expert_helpers import describe_many, request

from graph.records import TaskSpec
from nodes.expert import ExpertCode
from nodes.expert.graphview import GraphView
from nodes.expert.hostops import named_sizes, run_time_dims

toolbox = pytest.importorskip("tools.toolbox")

# Heads split and merged through self.n_head, a slice bound through self.keep: the capture sees
# both only as numbers (8 and 16); the second shape changes them (5 and 11).
HEADS = """
import torch
import torch.nn as nn
import torch.nn.functional as F

B = 2
T = 24
N_EMBD = 48
N_HEAD = 8
KEEP = 16


class Model(nn.Module):
    def __init__(self, n_embd, n_head, keep):
        super().__init__()
        self.proj = nn.Linear(n_embd, n_embd)
        self.n_head = n_head
        self.keep = keep

    def forward(self, x):
        b, t, c = x.size()
        q = self.proj(x).view(b, t, self.n_head, c // self.n_head).transpose(1, 2)
        q = F.softmax(q, dim=-1)
        y = q.transpose(1, 2).contiguous().view(b, t, c)
        return torch.tanh(y[:, :, : self.keep]) * 2


def get_inputs():
    return [torch.randn(B, T, N_EMBD)]


def get_init_inputs():
    return [N_EMBD, N_HEAD, KEEP]
"""

# The same sizes, but the forward writes 8 itself: it must stay 8 (a literal is meant as such).
LITERAL = HEADS.replace("y[:, :, : self.keep]", "y[:, :, :8]")


def test_reshape_reads_named_sizes():
    known = {8: "self.n_head"}
    assert run_time_dims("x", [2, 24, 48], [2, 24, 8, 6], known) == [
        "x.shape[0]",
        "x.shape[1]",
        "self.n_head",
        "-1",
    ]
    # a -1 in the request is resolved first; the named size still applies
    assert run_time_dims("x", [2, 24, 48], [2, 24, -1, 6], known) == [
        "x.shape[0]",
        "x.shape[1]",
        "self.n_head",
        "-1",
    ]
    # without a name the number stays
    assert run_time_dims("x", [2, 24, 48], [2, 24, 8, 6]) == ["x.shape[0]", "x.shape[1]", "8", "-1"]


@pytest.fixture(scope="module")
def descs():
    return describe_many([(HEADS, {}), (LITERAL, {})])


def test_named_sizes_are_attributes_forward_reads_and_not_literals(descs):
    heads, literal = descs
    assert heads.module_ints == {"n_head": 8, "keep": 16}
    assert named_sizes(GraphView(heads), inputs=False) == {8: "self.n_head", 16: "self.keep"}
    # forward writes 8 itself (and no longer reads self.keep): no number stands for a name
    assert named_sizes(GraphView(literal), inputs=False) == {}


def test_seed_source_reads_the_module(descs):
    heads, literal = descs
    src = ExpertCode().write(request(heads)).source
    assert "self.n_head" in src and ":self.keep]" in src.replace(" ", "")
    lit = ExpertCode().write(request(literal)).source
    assert ":8]" in lit.replace(" ", "")


def test_second_shape_with_other_head_count_verifies():
    tb = toolbox.Toolbox()
    task = TaskSpec(path="heads.py", name="heads", source=HEADS)
    desc = tb.describe(task, shrink=False)
    reply = ExpertCode().write(request(desc))
    chk = tb.check(task, reply.source, policy="mixed")
    assert chk.accepted, chk.reasons
    assert len(chk.shapes_checked) >= 2, chk.shapes_checked
