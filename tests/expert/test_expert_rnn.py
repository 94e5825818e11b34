"""The rnn family's step kernel is tunable: the seed lets the launcher choose the block of hidden
units (BLOCK_H 0), the tiling and memory rounds move BLOCK_H, BLOCK_B, BLOCK_K, warps and stages,
and the variant's launch parameters reach the generated forward, which passes the sandboxed check
(kernels/rnn.py itself is checked on every path by kernel_file_checks.check_rnn)."""

from __future__ import annotations

import pytest
from expert_helpers import describe_many, request, stage
from fakes import best_from_reply

from graph.records import TaskSpec
from nodes.expert import ExpertCode

toolbox = pytest.importorskip("tools.toolbox")

LSTM = """
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, n_in, hidden):
        super().__init__()
        self.rnn = nn.LSTM(n_in, hidden, 2, batch_first=True)

    def forward(self, x):
        out, _ = self.rnn(x)
        return out


def get_inputs():
    return [torch.randn(3, 5, 7)]


def get_init_inputs():
    return [7, 70]
"""


@pytest.fixture(scope="module")
def desc():
    (d,) = describe_many([(LSTM, {})])
    return d


def test_the_seed_leaves_the_block_to_the_launcher_and_the_rounds_tune_it(desc):
    seed = ExpertCode().write(request(desc, seed_index=0, n_seeds=2))
    assert seed.source is not None, seed.note
    assert seed.params["g0.BLOCK_H"] == 0 and seed.params["g0.num_stages"] == 2
    assert "'BLOCK_H': 0" in seed.source
    best = best_from_reply(seed)
    code = ExpertCode()
    tiling = [
        code.write(request(desc, mode="tune", stage=stage("tiling"), best=best, seed_index=i, n_seeds=6))
        for i in range(6)
    ]
    moved = {r.origin for r in tiling if r.source is not None}
    assert {"tune:g0.BLOCK_H=16", "tune:g0.BLOCK_H=32", "tune:g0.BLOCK_B=32"} <= moved, moved
    memory = [
        code.write(request(desc, mode="tune", stage=stage("memory"), best=best, seed_index=i, n_seeds=4))
        for i in range(4)
    ]
    assert {"tune:g0.num_stages=1", "tune:g0.num_warps=8"} <= {
        r.origin for r in memory if r.source is not None
    }
    # the moved parameter reaches the launch
    narrow = next(r for r in tiling if r.origin == "tune:g0.BLOCK_H=16")
    assert "'BLOCK_H': 16" in narrow.source
    chk = toolbox.Toolbox().check(
        TaskSpec(path="lstm.py", name="lstm", source=LSTM), narrow.source, policy="mixed"
    )
    assert chk.accepted, chk.reasons
