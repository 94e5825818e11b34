"""evals.metrics on hand-made rows."""

from __future__ import annotations

import math
from typing import Any

import pytest

from evals.metrics import (
    compute_metrics,
    degenerate_flags,
    fast_p,
    geomean,
    latest_rows,
    stage_ablation,
    summarize,
)


def row(
    task: str, verified: bool, se: float | None = None, sc: float | None = None, **kw: Any
) -> dict[str, Any]:
    r = {"task": task, "verified": verified, "speedup_vs_eager": se, "speedup_vs_compile": sc,
         "family": kw.pop("family", "f"), "level": kw.pop("level", "l"), "kind": "single-op"}  # fmt: skip
    r.update(kw)
    return r


def test_geomean() -> None:
    assert geomean([]) is None
    assert geomean([2.0, 8.0]) == pytest.approx(4.0)
    assert geomean([1.5]) == pytest.approx(1.5)
    with pytest.raises(ValueError):
        geomean([1.0, 0.0])


def test_fast_p_counts_all_tasks_in_denominator() -> None:
    rows = [row("a", True, 2.5), row("b", True, 1.1), row("c", True, 0.5), row("d", False, 9.0)]
    # d is fast but not verified: never counted. Denominator is 4 (all tasks), not 3.
    assert fast_p(rows, 0.0) == pytest.approx(3 / 4)
    assert fast_p(rows, 1.0) == pytest.approx(2 / 4)
    assert fast_p(rows, 2.0) == pytest.approx(1 / 4)
    assert fast_p(rows, 2.5) == 0.0  # strictly greater than p


def test_fast_p_edge_cases() -> None:
    assert fast_p([], 1.0) is None
    assert fast_p([row("a", False), row("b", False)], 1.0) == 0.0  # nothing correct: 0, measured or not
    # Verified but never timed (CPU): fast_0 is the correctness rate; above 0 it is unknown,
    # neither 0 nor 100%.
    assert fast_p([row("a", True), row("b", False)], 0.0) == pytest.approx(0.5)
    assert fast_p([row("a", True), row("b", False)], 1.0) is None
    # fast_0 counts verified rows whether or not they were timed.
    assert fast_p([row("a", True, 3.0), row("b", True), row("c", False)], 0.0) == pytest.approx(2 / 3)
    # Mixed: unmeasured verified rows are not counted as fast (lower bound).
    assert fast_p([row("a", True, 3.0), row("b", True)], 1.0) == pytest.approx(0.5)
    assert fast_p([row("a", True, None, 1.3)], 1.2, "vs_compile") == 1.0
    assert fast_p([row("a", True, 1.3, None)], 1.2, "vs_compile") is None


def test_summarize_speedups_only_from_verified_measured_rows() -> None:
    rows = [row("a", True, 2.0, 1.0), row("b", True, 8.0, 4.0), row("c", True), row("d", False, 100.0)]
    s = summarize(rows)
    assert s["tasks"] == 4
    assert s["verified"] == {"count": 3, "pct": 75.0}
    assert s["speedup"]["vs_eager"]["geomean"] == pytest.approx(4.0)
    assert s["speedup"]["vs_eager"]["median"] == pytest.approx(5.0)
    assert s["speedup"]["vs_eager"]["mean"] == pytest.approx(5.0)
    assert s["speedup"]["vs_compile"]["geomean"] == pytest.approx(2.0)
    assert s["measured"]["vs_eager"] == 2
    assert s["unmeasured_verified"]["vs_eager"] == 1
    assert s["fast_p"]["vs_eager"]["1.5"] == pytest.approx(2 / 4)


def test_no_timing_rows_are_verified_but_not_measured() -> None:
    rows = [row("a", True), row("b", True), row("c", False, failure_kind="no_kernel")]
    s = summarize(rows)
    assert s["verified"]["count"] == 2
    assert s["speedup"]["vs_eager"]["geomean"] is None
    assert s["speedup"]["vs_eager"]["n"] == 0
    assert s["fast_p"]["vs_eager"]["0.0"] == pytest.approx(2 / 3)  # the correctness rate
    assert all(v is None for k, v in s["fast_p"]["vs_eager"].items() if k != "0.0")
    assert s["failures_by_kind"] == {"no_kernel": 1}


def test_nan_and_nonpositive_speedups_are_ignored() -> None:
    s = summarize([row("a", True, math.nan), row("b", True, 0.0), row("c", True, 2.0)])
    assert s["speedup"]["vs_eager"]["n"] == 1


def test_per_family_and_level() -> None:
    rows = [
        row("a", True, 2.0, family="softmax", level="egg"),
        row("b", True, 0.5, family="softmax", level="egg"),
        row("c", False, family="conv", level="level1"),
        row("d", True, 3.0, family=None, level="level1"),
    ]
    m = compute_metrics(rows)
    assert set(m["per_family"]) == {"softmax", "conv", "unknown"}
    assert m["per_family"]["softmax"]["speedup"]["vs_eager"]["geomean"] == pytest.approx(1.0)
    assert m["per_family"]["conv"]["verified"]["count"] == 0
    assert m["per_level"]["level1"]["tasks"] == 2
    assert m["per_level"]["level1"]["fast_p"]["vs_eager"]["1.0"] == pytest.approx(0.5)


def test_outcomes_per_level_name_unsupported_ops_and_failures() -> None:
    rows = [
        row("a", True, level="level1"),
        row("b", False, level="level1", failure="unsupported: no expert family lowers `sort` at node `sort`"),
        row("c", False, level="level2", failure="no seed passed verification: mismatch"),
        row("d", False, level="level2", failure="syntax error in d.py", failure_kind="bad_input"),
        row("e", True, level="level2"),
    ]
    oc = compute_metrics(rows)["outcomes"]
    assert oc["per_level"]["level1"] == {
        "tasks": 2,
        "verified": 1,
        "unsupported": 1,
        "bad_input": 0,
        "failed": 0,
    }
    assert oc["per_level"]["level2"] == {
        "tasks": 3,
        "verified": 1,
        "unsupported": 0,
        "bad_input": 1,
        "failed": 1,
    }
    assert oc["per_level"]["all"]["tasks"] == 5 and oc["per_level"]["all"]["verified"] == 2
    assert [x["task"] for x in oc["unsupported"]] == ["b"] and "`sort`" in oc["unsupported"][0]["reason"]
    assert [x["task"] for x in oc["failed"]] == ["c"] and [x["task"] for x in oc["bad_input"]] == ["d"]


def test_degenerate_flags_and_exclusion() -> None:
    rows = [
        row("tiny", True, 1.5, eager_ms=0.005),
        row("wow", True, 500.0, eager_ms=3.0),
        row("flagged", True, 1.2, degenerate=["output is constant"]),
        row("ok", True, 2.0, eager_ms=1.0),
    ]
    assert degenerate_flags(rows[3]) == []
    assert any("launch-bound" in f for f in degenerate_flags(rows[0]))
    assert any("implausible" in f for f in degenerate_flags(rows[1]))
    m = compute_metrics(rows)
    assert {d["task"] for d in m["degenerate"]} == {"tiny", "wow", "flagged"}
    assert m["overall"]["tasks"] == 4  # flagged, not silently dropped
    assert m["overall_excluding_degenerate"]["tasks"] == 1
    assert m["overall_excluding_degenerate"]["speedup"]["vs_eager"]["geomean"] == pytest.approx(2.0)


def test_final_benchmark_far_from_the_stage_timing_is_flagged() -> None:
    """The same kernel timed 4.83 ms by its stage and 6.36 ms by the final benchmark (a library
    ConvTranspose3d on the H200): the row is flagged, not silently believed; 1% apart is fine."""
    far = row("far", True, 0.75, eager_ms=4.8, candidate_ms=6.36, stage_ms=4.83)
    near = row("near", True, 1.5, eager_ms=3.0, candidate_ms=2.0, stage_ms=2.02)
    flags = degenerate_flags(far)
    assert len(flags) == 1 and "+32%" in flags[0] and "did not reproduce" in flags[0]
    assert degenerate_flags(near) == []
    assert degenerate_flags(row("old", True, 1.5, eager_ms=3.0, candidate_ms=2.0)) == []


def _st(
    name: str, exit_: float | None, outcome: str = "improved", entry: float | None = None
) -> dict[str, Any]:
    return {"stage": name, "outcome": outcome, "speedup_exit": exit_, "speedup_entry": entry}


def test_stage_ablation_carries_forward_and_uses_complete_tasks() -> None:
    rows = [
        row(
            "a", True, 4.0, stages=[_st("algorithm", 1.0), _st("mapping", 2.0), _st("tiling", None, "failed")]
        ),
        row("b", True, 1.0, stages=[_st("algorithm", 4.0), _st("mapping", None, "kept"), _st("tiling", 1.0)]),
        row("c", True, stages=[_st("algorithm", None), _st("mapping", None), _st("tiling", None)]),  # CPU
        row("d", False, stages=[_st("algorithm", None, "failed")]),
    ]
    ab = stage_ablation(rows)
    assert [s["stage"] for s in ab["stages"]] == ["algorithm", "mapping", "tiling"]
    assert ab["tasks_with_all_stages_measured"] == 2
    alg, mapping, tiling = ab["stages"]
    assert alg["geomean_after"] == pytest.approx(2.0)  # sqrt(1 * 4)
    assert mapping["geomean_after"] == pytest.approx(math.sqrt(2.0 * 4.0))  # b carries 4.0
    assert tiling["geomean_after"] == pytest.approx(math.sqrt(2.0 * 1.0))  # a carries 2.0
    assert alg["outcomes"] == {"improved": 3, "failed": 1}
    assert mapping["outcomes"] == {"improved": 2, "kept": 1}


def test_stage_ablation_without_timing() -> None:
    ab = stage_ablation([row("c", True, stages=[_st("algorithm", None)])])
    assert ab["stages"][0]["geomean_after"] is None and ab["stages"][0]["n"] == 0


def test_phase_totals_and_medians_over_the_tasks_that_report_a_phase() -> None:
    from evals.metrics import phase_totals

    rows = [
        row("a", True, phases={"check": 3.0, "wait": 10.0}),
        row("b", True, phases={"check": 5.0, "wait": 2.0, "describe": 1.0}),
        row("c", False, phases={"check": 7.0, "wait": "bad"}),
        row("d", False),
    ]
    ph = phase_totals(rows)
    assert list(ph) == ["check", "wait", "describe"]  # largest total first
    assert ph["check"] == {"total": 15.0, "median": 5.0, "tasks": 3}
    assert ph["wait"] == {"total": 12.0, "median": 6.0, "tasks": 2}
    assert ph["describe"] == {"total": 1.0, "median": 1.0, "tasks": 1}
    assert compute_metrics(rows)["phases"] == ph


def test_latest_rows_last_wins() -> None:
    rows = latest_rows([row("a", False), row("b", True), row("a", True)])
    assert [(r["task"], r["verified"]) for r in rows] == [("a", True), ("b", True)]


def test_kernels_slower_than_0_9x_of_eager_are_listed_with_a_reason() -> None:
    from evals.metrics import slow_vs_eager
    from evals.report import render_markdown

    rows = [
        row("gemm_k", True, 0.42, roofline_fraction=0.13, bottleneck="compute",
            algorithm="split-k", precision="tf32x3", profile_note="compute bound far from peak"),
        row("net", True, 0.38),  # nothing recorded: says so
        row("ok", True, 0.95),
        row("unverified", False, 0.1),
        row("cpu", True, None, timing_measured=False),
    ]  # fmt: skip
    slow = slow_vs_eager(rows)
    assert [x["task"] for x in slow] == ["net", "gemm_k"]  # slowest first
    assert slow[1]["reason"] == (
        "compute-bound at 13% of its roofline; algorithm split-k (tf32x3); profiler: compute bound far from peak"
    )
    assert slow[0]["reason"].startswith("no reason recorded")
    md = render_markdown(rows, compute_metrics(rows), {})
    sec = md.split("## Slower than 0.9x of eager", 1)[1].split("##", 1)[0]
    assert "- gemm_k: 0.42x: compute-bound at 13%" in sec and "- net: 0.38x" in sec and "ok" not in sec


def test_rows_timed_by_their_stage_are_named_in_the_report() -> None:
    """A run wrapped up at the end of a time box is timed by its stage (timing.timed_by); the
    report names those tasks, and a slow one's reason says so."""
    from evals.report import render_markdown

    wrapped = "stage (events); stopped before the final benchmark (SIGTERM: an eval's time box ended)"
    rows = [
        row("boxed", True, 0.5, timed_by=wrapped),
        row("full", True, 1.5),
        row("lost", False, timed_by=wrapped),
    ]
    m = compute_metrics(rows)
    assert m["stage_timed"] == ["boxed"]
    md = render_markdown(rows, m, {})
    assert (
        "Timed by their stage, not by the final benchmark (the time box ended first): 1 task(s): boxed." in md
    )
    assert "timed by its stage" in m["slow_vs_eager"][0]["reason"]
    assert "Timed by their stage" not in render_markdown(rows[1:2], compute_metrics(rows[1:2]), {})


def test_roofline_fraction_per_bottleneck_names_memory_bound_kernels_below_the_bar() -> None:
    """Issue 13 asks memory-bound kernels for a median of 80% of the bandwidth roof: the summary
    gives the median per bottleneck and names the kernels under 0.8, worst first."""
    from evals.report import render_markdown

    rows = [
        row("ew", True, 1.0, roofline_fraction=0.95, bottleneck="memory"),
        row("norm", True, 1.0, roofline_fraction=0.6, bottleneck="memory"),
        row("pool", True, 1.0, roofline_fraction=0.4, bottleneck="memory"),
        row("gemm", True, 1.0, roofline_fraction=0.5, bottleneck="compute"),
        row("bad", False, None, roofline_fraction=0.1, bottleneck="memory"),  # not verified
        row("none", True, 1.0),  # no profile
    ]
    s = summarize(rows)
    mem = s["roofline_by_bottleneck"]["memory"]
    assert mem["n"] == 3 and mem["median"] == pytest.approx(0.6) and mem["below_0.8"] == ["pool", "norm"]
    assert s["roofline_by_bottleneck"]["compute"]["below_0.8"] == ["gemm"]
    md = render_markdown(rows, compute_metrics(rows), {})
    assert "- memory-bound: median 0.60 (n=3); below 0.8: pool, norm" in md


def test_host_bound_forwards_are_listed_with_their_graph_replay() -> None:
    """H200 suite run (2026-12-06): a conv + pool head launched at 0.591 ms whose kernels replay
    as a CUDA graph in 0.234 ms; the report names it and the replay figure, and a slow task's
    reason says it is host-bound. 1.1x apart, or no replay measured, is not listed."""
    from evals.report import render_markdown

    rows = [
        row("head", True, 0.55, candidate_ms=0.591, cudagraph_ms=0.234, stage_ms=0.298),
        row("close", True, 1.2, candidate_ms=0.33, cudagraph_ms=0.30),
        row("noreplay", True, 1.2, candidate_ms=0.33),
        row("unverified", False, None, candidate_ms=0.9, cudagraph_ms=0.1),
    ]
    m = compute_metrics(rows)
    assert [d["task"] for d in m["host_bound"]] == ["head"]
    assert m["host_bound"][0]["ratio"] == pytest.approx(0.591 / 0.234, abs=1e-3)
    assert "host-bound: launched 0.591 ms" in m["slow_vs_eager"][0]["reason"]
    md = render_markdown(rows, m, {})
    sec = md.split("## Host-bound forwards", 1)[1].split("\n## ", 1)[0]
    assert "| head | 0.591 | 0.234 | 0.298 | 2.53x |" in sec and "close" not in sec
    quiet = render_markdown(rows[1:3], compute_metrics(rows[1:3]), {})
    assert quiet.split("## Host-bound forwards", 1)[1].split("\n## ", 1)[0].strip().endswith("None.")


def test_a_final_benchmark_slowed_by_the_host_says_so() -> None:
    """cv05 on the H200: stage 0.376 ms, final 0.565 ms, its replay 0.370 ms in the final job."""
    flags = degenerate_flags(row("cv05", True, 0.85, candidate_ms=0.565, stage_ms=0.376, cudagraph_ms=0.370))
    assert len(flags) == 1 and "host-bound there" in flags[0] and "0.370 ms" in flags[0]
    lib = degenerate_flags(row("lib", True, 0.75, candidate_ms=6.36, stage_ms=4.83, cudagraph_ms=6.3))
    assert "a library's algorithm choice?" in lib[0]


def test_speedup_against_the_faster_baseline() -> None:
    from graph.records import TimingReport

    # torch.compile measured slower than eager (a host-bound call on a busy host): the faster
    # baseline is eager's, so the ratio against it is never above either one
    t = TimingReport(measured=True, candidate_ms=0.012, eager_ms=0.021, compile_ms=0.106)
    assert t.speedup_vs_compile == pytest.approx(0.106 / 0.012)
    assert t.speedup_vs_best == pytest.approx(0.021 / 0.012)
    assert TimingReport(measured=True, candidate_ms=1.0, eager_ms=2.0, compile_ms=1.5).speedup_vs_best == 1.5
    # both baselines are needed, and a measured timing
    assert TimingReport(measured=True, candidate_ms=1.0, eager_ms=2.0).speedup_vs_best is None
    assert (
        TimingReport(measured=False, candidate_ms=1.0, eager_ms=2.0, compile_ms=1.5).speedup_vs_best is None
    )
    rows = [row("a", True, 2.0, 4.0, speedup_vs_best=2.0), row("b", True, 8.0, 1.0, speedup_vs_best=1.0)]
    s = summarize(rows)
    assert s["speedup"]["vs_best"]["geomean"] == pytest.approx(2**0.5)
    assert s["fast_p"]["vs_best"]["1.5"] == pytest.approx(0.5)
