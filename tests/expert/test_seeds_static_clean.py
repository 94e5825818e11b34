"""Every seed the expert writes passes the static rules, in particular `static.undefined_name`:
a launcher must not name a kernel its file does not define, even on a branch the CPU sizes
never take (a reduction that cannot split had a dead call to the split's second kernel)."""

from __future__ import annotations

import pytest
from expert_helpers import describe_many, request

from nodes.expert import ExpertCode
from tools.worker.static_rules import static_findings

TASK = """
import torch
import torch.nn as nn

B = 2
C = 5
H = 6
W = 7


class Model(nn.Module):
    def forward(self, x):
        return torch.relu({expr})


def get_inputs():
    return [torch.randn(B, C, H, W)]


def get_init_inputs():
    return []
"""

EXPRS = {
    "logsumexp-channels": "torch.logsumexp(x, dim=1, keepdim=True)",
    "logsumexp-rows": "torch.logsumexp(x, dim=-1)",
    "sum-channels": "x.sum(dim=1)",
    "amax-rows": "torch.amax(x, dim=-1)",
}


@pytest.fixture(scope="module")
def descs():
    return dict(zip(EXPRS, describe_many([(TASK.format(expr=e), {}) for e in EXPRS.values()]), strict=True))


@pytest.mark.parametrize("key", list(EXPRS))
def test_every_seed_passes_the_static_rules(descs, key):
    seen = 0
    for i in range(8):
        r = ExpertCode().write(request(descs[key], seed_index=i, n_seeds=8))
        if r.source is None:
            break
        seen += 1
        assert static_findings(r.source) == [], (r.algorithm, static_findings(r.source))
    assert seen >= 1
