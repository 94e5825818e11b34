"""kl_div's loss term follows torch's formula, xlogy(target, target) - target * input, also where
the inputs leave the probability simplex: the judge's scaled trial (x * 3 - 0.5) makes targets
negative, where torch gives NaN. The H100 suite run of 2026-12-06 failed its KL task on exactly
that (`nan_parity`): the expert's term was 0 wherever the target was not positive."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from expert_helpers import describe_many, request
from expert_tasks import CASES

from graph.records import TaskSpec
from nodes.expert import ExpertCode
from nodes.expert.families import reduction

toolbox = pytest.importorskip("tools.toolbox")


def _term(a: float, b: float) -> float:
    """The expert's per-element expression, evaluated with Python floats for the Triton ops."""
    expr = None
    src = reduction.__file__
    for line in open(src):
        if "plan.loss_expr" in line and "tl.log({b})" in line:
            expr = line.split("=", 1)[1].strip().strip('"')
    assert expr, "the kl_div expression was not found"
    tl = type("tl", (), {"where": staticmethod(lambda c, x, y: x if c else y), "log": staticmethod(_log)})
    return eval(expr.format(a="A", b="B"), {"tl": tl, "A": a, "B": b})  # noqa: S307 - the module's own text


def _log(x: float) -> float:
    if math.isnan(x) or x < 0:
        return math.nan
    return -math.inf if x == 0 else math.log(x)


@pytest.mark.parametrize(
    "a,b",
    [
        (-1.0, 0.5),
        (-1.0, -0.5),
        (-math.inf, 0.0),
        (-1.0, 0.0),
        (-math.inf, 0.2),
        (math.nan, 0.3),
        (-2.0, math.nan),
    ],
)
def test_the_term_matches_torch_element_by_element(a, b):
    want = F.kl_div(torch.tensor([a]), torch.tensor([b]), reduction="none").item()
    got = _term(a, b)
    assert (math.isnan(got) and math.isnan(want)) or got == pytest.approx(want), (a, b, got, want)


def test_the_kl_seed_passes_the_judges_check_with_its_scaled_trial():
    src, ov = CASES["loss_kldiv"]
    (d,) = describe_many([(src, ov)])
    seed = ExpertCode().write(request(d, seed_index=0, n_seeds=1))
    assert seed.family == "reduction" and seed.source
    chk = toolbox.Toolbox().check(
        TaskSpec(path="kl.py", name="kl", source=src, size_overrides=ov), seed.source
    )
    assert chk.accepted, chk.reasons
