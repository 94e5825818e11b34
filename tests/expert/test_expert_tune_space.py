"""Walk every tuning stage to exhaustion for one task per family and check that every tuned
candidate is still correct under the interpreter (the spaces must only hold valid points)."""

from __future__ import annotations

import pytest
from expert_helpers import check_jobs, request, run_jobs, stage
from expert_tasks import CASES
from fakes import best_from_reply

from nodes.expert import ExpertCode
from nodes.models import AttemptSummary

WALK = [
    "gelu_chain",
    "softmax",
    "softmax_long",
    "linear_gelu",
    "rn_layernorm_module",
    "red_sum_all_long",
    "red_argmax_last",
    "conv_bias_relu",
]


@pytest.fixture(scope="module")
def walked(descs):
    code = ExpertCode()
    out: dict[str, list] = {}
    for name in WALK:
        seed = code.write(request(descs[name], seed_index=0))
        best = best_from_reply(seed)
        replies = []
        for st in ("mapping", "tiling", "memory"):
            recent: list[AttemptSummary] = []
            for i in range(40):
                r = code.write(request(descs[name], mode="tune", stage=stage(st), best=best, recent=recent))
                if r.source is None:
                    break
                replies.append(r)
                recent.append(
                    AttemptSummary(candidate_id=f"t{i}", origin=r.origin, params=r.params, outcome="verified")
                )
            else:
                raise AssertionError(f"{name}/{st}: tune never exhausted")
        out[name] = replies
    jobs, keys = [], []
    for name, replies in out.items():
        src, ov = CASES[name]
        for r in replies:
            jobs += check_jobs(src, ov, [r])
            keys.append((name, r.origin))
    results = dict(zip(keys, run_jobs(jobs, interpret=True), strict=True))
    return out, results


@pytest.mark.parametrize("case", WALK)
def test_every_tuned_point_is_correct(case, walked):
    replies, results = walked
    assert replies[case], f"{case}: empty tuning space"
    origins = [r.origin for r in replies[case]]
    assert len(origins) == len(set(origins)), "a tune step repeated itself"
    for r in replies[case]:
        res = results[(case, r.origin)]
        assert res.get("ok"), f"{case} {r.origin}: {res.get('error')}"
