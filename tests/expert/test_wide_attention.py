"""Attention wider than the fused kernel holds (head dims above MAX_HEAD_DIM): SDPA is written
out as matmul -> softmax -> matmul groups (nodes/expert/decompose.py) and a hand-written
attention goes to the same groups, instead of a fused kernel that raises at run time. Each task
goes through the real sandbox: describe -> the expert's first seed -> the full check (random
trials, the x3 scaled trial, a second non-power-of-two shape)."""

from __future__ import annotations

import pytest
from expert_helpers import describe_many, request

from graph.records import TaskSpec
from nodes.expert import ExpertCode
from nodes.expert.decompose import decompose
from nodes.expert.families.attention import MAX_HEAD_DIM

toolbox = pytest.importorskip("tools.toolbox")

SDPA = """
import torch
import torch.nn as nn
import torch.nn.functional as F

B = 2
H = 2
S = 24
D = 300


class Model(nn.Module):
    def forward(self, q, k, v):
        return F.scaled_dot_product_attention(q, k, v{extra})


def get_inputs():
    return [torch.randn(B, H, S, D), torch.randn(B, H, S, D), torch.randn(B, H, S, D)]


def get_init_inputs():
    return []
"""

BY_HAND = """
import math
import torch
import torch.nn as nn
import torch.nn.functional as F

B = 2
S = 20
D = 272


class Model(nn.Module):
    def forward(self, q, k, v):
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        return F.softmax(att, dim=-1) @ v


def get_inputs():
    return [torch.randn(B, S, D), torch.randn(B, S, D), torch.randn(B, S, D)]


def get_init_inputs():
    return []
"""

TASKS = {
    "sdpa": SDPA.format(extra=""),
    "sdpa-scale": SDPA.format(extra=", scale=0.125"),
    "by-hand": BY_HAND,
}


def test_only_wide_sdpa_is_written_out():
    narrow, wide, causal = describe_many(
        [
            (SDPA.format(extra=""), {"D": 64}),
            (SDPA.format(extra=""), {}),
            (SDPA.format(extra=", is_causal=True"), {}),
        ]
    )
    assert decompose(narrow) is narrow
    ops = [n.op for n in decompose(wide).op_graph]
    assert "scaled_dot_product_attention" not in ops
    assert ops.count("matmul") == 2 and "softmax" in ops
    # the last op keeps the SDPA node's name: the output still reads it
    assert decompose(wide).op_graph[-1].args[0]["node"] == "scaled_dot_product_attention"
    assert MAX_HEAD_DIM < 272
    # a causal one stays whole (no group computes the mask) and is named, not guessed
    assert decompose(causal) is causal
    reply = ExpertCode().write(request(causal))
    assert reply.source is None
    assert "scaled_dot_product_attention" in reply.unsupported and "head dim 300" in reply.unsupported


@pytest.mark.parametrize("key", list(TASKS))
def test_wide_attention_verifies(key):
    tb = toolbox.Toolbox()
    task = TaskSpec(path=f"{key}.py", name=key, source=TASKS[key])
    desc = tb.describe(task, shrink=False)
    reply = ExpertCode().write(request(desc))
    assert reply.source is not None, reply.unsupported
    assert reply.algorithm == "partition"
    if "math.sqrt" in reply.source:  # the default scale, read from the run's head dim
        assert "\nimport math\n" in reply.source
    chk = tb.check(task, reply.source, policy="mixed")
    assert chk.accepted, chk.reasons
    assert len(chk.shapes_checked) >= 2, chk.shapes_checked
