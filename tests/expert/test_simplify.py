"""The op graph's exact rewrites (nodes/expert/simplify.py): a crop that cuts off exactly the
border a pad added reads the unpadded tensor, at any size; every other crop is left alone."""

from __future__ import annotations

import pytest
from expert_helpers import check_jobs, describe_many, request, run_jobs

HEAD = """import torch
import torch.nn as nn
import torch.nn.functional as F

N = 2
S = 10
C = 8


class Model(nn.Module):
    def __init__(self, channels):
        super().__init__()
        self.norm = nn.LayerNorm(channels)

    def forward(self, x):
        y = self.norm(x)
"""
TAIL = """

def get_inputs():
    return [torch.randn(N, S, S, C)]


def get_init_inputs():
    return [C]
"""


def _task(body: str) -> str:
    return HEAD + "".join(f"        {line}\n" for line in body.splitlines()) + TAIL


TASKS = {
    # the shifted-window form: zero border on H and W, cropped back, plus a residual
    "undone": _task("z = F.pad(y, [0, 0, 3, 3, 3, 3])[:, 3:-3, 3:-3, :].contiguous()\nreturn z + x"),
    # one border side empty, reflect mode: still exactly the input
    "undone_reflect": _task(
        "z = F.pad(y.permute(0, 3, 1, 2), [0, 2, 1, 0], mode='reflect')\nreturn z[:, :, 1:, :-2] * 2.0"
    ),
    # the padded tensor is read again (a shifted crop): the pad stays, the exact crop goes
    "pad_kept": _task("p = F.pad(y, [0, 0, 1, 1])\nreturn p[:, :, 1:-1, :] + x + p[:, :, :-2, :]"),
    # crops that are not the border: other amounts, a size-bound stop, a step
    "other_amount": _task("return F.pad(y, [0, 0, 3, 3, 3, 3])[:, 2:-2, 3:-3, :] * 1.0"),
    "size_bound_stop": _task("return F.pad(y, [0, 0, 1, 1])[:, :, 1:11, :] * 1.0"),
    "stepped": _task("return F.pad(y, [0, 0, 1, 1])[:, :, 1:-1:2, :] * 1.0"),
}
REMOVED = {"undone": 2, "undone_reflect": 2, "pad_kept": 1}  # op nodes the rewrite drops


@pytest.fixture(scope="module")
def descs():
    return dict(zip(TASKS, describe_many([(src, {}) for src in TASKS.values()]), strict=True))


def test_a_crop_of_exactly_the_pads_border_reads_the_unpadded_tensor(descs):
    from nodes.expert.simplify import simplify

    for name, desc in descs.items():
        out = simplify(desc)
        dropped = len(desc.op_graph) - len(out.op_graph)
        assert dropped == REMOVED.get(name, 0), (name, [n.name for n in out.op_graph])
        if name not in REMOVED:
            assert out is desc, name
    undone = simplify(descs["undone"]).op_graph
    add = next(n for n in undone if n.op == "add")
    # contiguous() of the norm's output, then the residual
    contiguous = next(n for n in undone if n.name == "contiguous")
    assert add.args[0] == {"node": "contiguous"} and contiguous.args == [{"node": "norm"}]
    kept = simplify(descs["pad_kept"]).op_graph
    assert [n.op for n in kept].count("pad") == 1


def test_seeds_without_the_pair_match_the_reference_at_other_sizes(descs):
    from nodes.expert import ExpertCode

    code = ExpertCode()
    jobs = []
    for name in REMOVED:
        reply = code.write(request(descs[name], seed_index=0, n_seeds=2))
        assert reply.source is not None, (name, reply.note)
        jobs += check_jobs(TASKS[name], {"N": 3, "S": 7, "C": 5}, [reply], trials=3)
    for name, res in zip(REMOVED, run_jobs(jobs, interpret=True), strict=True):
        assert res.get("ok"), f"{name}: {res.get('error')}"
