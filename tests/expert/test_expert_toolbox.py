"""End to end through the real sandbox: Toolbox.describe (shrunk sizes) -> expert seed ->
Toolbox.compile (sm_90) -> Toolbox.check (policy rules + numerics)."""

from __future__ import annotations

import pytest
from expert_helpers import EXAMPLES, stage

from graph.records import TaskSpec
from nodes.expert import ExpertCode
from nodes.models import CodeRequest

toolbox = pytest.importorskip("tools.toolbox")


@pytest.mark.parametrize("example", ["softmax.py", "gelu_chain.py"])
def test_seed_passes_toolbox_check(example):
    tb = toolbox.Toolbox()
    src = (EXAMPLES / example).read_text()
    task = TaskSpec(path=str(EXAMPLES / example), name=example[:-3], source=src)
    desc = tb.describe(task, shrink=True)
    assert desc.op_graph, desc.capture_error
    task = task.model_copy(
        update={"size_overrides": {k: v for k, v in desc.sizes_used.items() if isinstance(v, int)}}
    )
    reply = ExpertCode().write(CodeRequest(mode="seed", stage=stage(), task=task, desc=desc))
    assert reply.source is not None, reply.unsupported
    comp = tb.compile(task, reply.source)
    assert comp.ok, comp.error
    assert comp.kernels and all(k.spills in (0, None) for k in comp.kernels)
    chk = tb.check(task, reply.source, policy="strict")
    assert chk.accepted, chk.reasons
