"""Seeds checked with both models in eval mode (the real checker's mode): BatchNorm modules must
normalise by their running statistics there and by batch statistics in training mode (the other
tests' runner default), deciding at run time, not from the captured graph."""

from __future__ import annotations

import re

import pytest
from expert_helpers import check_jobs, run_jobs
from expert_tasks import CASES

EVAL_CASES = [
    "bn2d_running",
    "bn2d",
    "conv_bn_relu",
    "bn_functional_eval",
    "softmax_masked",
    "linear_bn1d_gelu",
]


@pytest.fixture(scope="module")
def eval_checks(seeds):
    jobs, keys = [], []
    for name in EVAL_CASES:
        src, ov = CASES[name]
        for r in seeds[name]:
            jobs += check_jobs(src, ov, [r], trials=2, eval=True)
            keys.append((name, r.origin))
    return dict(zip(keys, run_jobs(jobs, interpret=True), strict=True))


@pytest.mark.parametrize("case", EVAL_CASES)
def test_seeds_correct_in_eval_mode(case, seeds, eval_checks):
    assert seeds[case], f"{case}: no seed generated"
    for r in seeds[case]:
        res = eval_checks[(case, r.origin)]
        assert res.get("ok"), f"{case} {r.origin}: {res.get('error')}\n{res.get('traceback', '')}"


def test_batchnorm_statistics_chosen_at_run_time(seeds):
    src = seeds["bn2d_running"][0].source
    # eps and the train/eval choice come from the module, not constants of the captured graph.
    assert "self.bn.training" in src and "self.bn.running_var" in src
    assert "float(self.bn.eps)" in src


def test_conv_bias_left_out_of_the_library_call_before_batchnorm(seeds):
    """The conv before a BatchNorm runs without its bias (PyTorch adds it in a pass of its own over
    the output): batch statistics cancel it, and the running statistics' mean takes it (the eval
    mode checks above would fail on either side if it were dropped)."""
    for r in seeds["conv_bn_relu"]:
        src = r.source
        # (the channels-last seed passes the weight laid out like its input: cl_conv_weight(...))
        assert re.search(r"self\.conv\.weight(, \d+\))?\)?, None,", src), r.algorithm
        assert "self.bn.running_var, float(self.bn.eps), self.conv.bias)" in src, r.algorithm
