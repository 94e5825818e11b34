"""The final timing's diagnostics reach the report and the results row: the host's load and
priority while timed, and where the baselines came from (cached by the prefetch, or measured)."""

import json
from pathlib import Path

import pytest

from evals.runner import EvalConfig, build_row, task_dir
from evals.tasks import TaskEntry
from graph.records import BestKernel, Candidate, CheckReport, TimingReport
from graph.report import build_report


def test_host_load_priority_and_baseline_reach_the_report_and_the_row(tmp_path: Path) -> None:
    final = TimingReport(
        measured=True,
        candidate_ms=0.3,
        eager_ms=0.6,
        compile_ms=0.4,
        cudagraph_ms=0.29,
        compile_check={
            "within_bar": False,
            "reason": "mismatch: trial torch.compile output 0: 9/10 elements",
        },
        host_cpu_busy=0.42,
        host_priority="nice -10",
        baseline="eager measured, torch.compile cached 2026-12-03T14:00:00",
    )
    # the choosing stage's own timing of the kernel travels beside the final benchmark's
    best = BestKernel(
        candidate=Candidate(id="k", source="src", stage="algorithm", origin="seed:0"),
        check=CheckReport(accepted=True, reasons=[]),
        timing=TimingReport(measured=True, candidate_ms=0.31, eager_ms=0.6),
    )
    rep = build_report({"status": "no_kernel", "final": final, "best": best}, thread_id="t")
    assert rep["timing"]["stage_ms"] == 0.31
    assert rep["timing"]["host_cpu_busy"] == 0.42 and rep["timing"]["host_priority"] == "nice -10"
    assert rep["timing"]["baseline"].startswith("eager measured, torch.compile cached")

    cfg = EvalConfig(
        out=str(tmp_path),
        device="cuda",
        model="expert",
        policy="mixed",
        stages=None,
        extra_args=[],
        optimize_cmd=[],
        backend="local",
        eval_id="e",
        task_timeout_s=60,
    )
    task = TaskEntry(
        id="t", path=str(tmp_path / "t.py"), name="t", level="suite", family=None, kind=None, description=None
    )
    d = task_dir(cfg, task)
    d.mkdir(parents=True)
    (d / "report.json").write_text(
        json.dumps({"verified": True, "status": "verified", "timing": rep["timing"]})
    )
    row = build_row(cfg, task, 0, exit_code=0, wall=10.0)
    assert row["host_cpu_busy"] == 0.42 and row["cudagraph_ms"] == 0.29 and row["stage_ms"] == 0.31
    # against eager 0.6 and torch.compile 0.4: the faster, compile's
    assert row["compile_within_bar"] is False and row["compile_check_note"].startswith("mismatch")
    # a check that failed or was skipped says so in the row too
    for cc, note in (
        ({"error": "OutOfMemoryError: x"}, "OutOfMemoryError: x"),
        ({"skipped": "too big"}, "too big"),
    ):
        rep["timing"]["compile_check"] = cc
        (d / "report.json").write_text(
            json.dumps({"verified": True, "status": "verified", "timing": rep["timing"]})
        )
        again = build_row(cfg, task, 0, exit_code=0, wall=10.0)
        assert again["compile_within_bar"] is None and again["compile_check_note"] == note
    assert row["speedup_vs_best"] == pytest.approx(0.4 / 0.3)
    assert row["baseline"].startswith("eager measured, torch.compile cached")
    assert row["precision"] is None  # no parameters recorded

    # a partition's precision is each group's, in group order, groups alike joined
    params = {
        "algorithm": "partition",
        "g10.PRECISION": "tf32",
        "g2.PRECISION": "tf32x3-bsplit",
        "g0.PRECISION": "cudnn-default",
        "g1.PRECISION": "cudnn-default",
        "g1.BLOCK": 1024,
    }
    (d / "report.json").write_text(
        json.dumps({"verified": True, "status": "verified", "timing": rep["timing"], "params": params})
    )
    row = build_row(cfg, task, 0, exit_code=0, wall=10.0)
    assert row["precision"] == "g0/g1 cudnn-default, g2 tf32x3-bsplit, g10 tf32"
