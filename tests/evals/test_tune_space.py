"""evals.tune_space: the variants the expert's tuning stages offer for a task, counted on the CPU
(issue 12: what a family's tuning space costs a suite before any GPU time is spent)."""

from __future__ import annotations

from pathlib import Path

from evals.tune_space import main

ROOT = Path(__file__).resolve().parents[2]


def test_counts_each_tuning_stage_of_a_batchnorm_in_eval_mode(capsys) -> None:
    """A BatchNorm module is checked and timed in eval mode (running statistics): only its
    normalise pass is tuned: the flat/tiled choice, two apply blocks, two warp counts."""
    assert main([str(ROOT / "evals" / "suites" / "egg" / "nm04_batchnorm2d_eval.py"), "--budget", "1"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split()[:8] == [
        "nm04_batchnorm2d_eval",
        "channel-tiles",
        "mapping",
        "1",
        "tiling",
        "2",
        "memory",
        "2",
    ], out
    assert "(3 within the budget)" in out[0]
    assert out[-1] == "total: 5 variants offered, 3 within a budget of 1 per stage"
