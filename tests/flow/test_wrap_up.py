"""What a run stopped by SIGTERM reports (graph.cli.wrap_up_values): its best kernel only when the
full check accepted it and, on a GPU, its stage measured it; the report says the final benchmark
did not run. The signal path itself runs in tests/flow/test_cli.py and tests/evals/test_runner.py."""

from graph.cli import WRAP_UP_HALT, wrap_up_values
from graph.records import BestKernel, Candidate, CheckReport, TaskSpec, TimingReport
from graph.report import build_report


def _values(device: str, accepted: bool = True, measured: bool | None = True) -> dict:
    timing = None
    if measured is not None:
        timing = TimingReport(
            measured=measured,
            candidate_ms=1.0 if measured else None,
            eager_ms=2.0 if measured else None,
            compile_ms=1.5 if measured else None,
            reason=None if measured else "not timed on cpu",
        )
    best = BestKernel(
        candidate=Candidate(id="k", source="src", stage="algorithm", origin="seed:0"),
        check=CheckReport(accepted=accepted, reasons=[] if accepted else ["mismatch: x"]),
        timing=timing,
    )
    task = TaskSpec(path="t.py", name="t", source="", device=device)
    return {"task": task, "best": best, "status": "running", "settings": {"device": device}}


def test_gpu_run_with_a_measured_best_is_verified_with_its_stage_timing():
    rep = build_report(wrap_up_values(_values("cuda")), thread_id="t")
    assert rep["verified"] and rep["halt"] == WRAP_UP_HALT
    assert rep["timing"]["candidate_ms"] == 1.0 and rep["speedup_vs_eager"] == 2.0
    assert rep["timing"]["timed_by"].startswith("stage") and WRAP_UP_HALT in rep["timing"]["timed_by"]


def test_gpu_run_without_a_measured_best_has_no_kernel():
    for values in (_values("cuda", measured=False), _values("cuda", measured=None)):
        rep = build_report(wrap_up_values(values), thread_id="t")
        assert not rep["verified"] and rep["status"] == "no_kernel" and rep["timing"] is None


def test_unaccepted_or_missing_best_has_no_kernel():
    rep = build_report(wrap_up_values(_values("cpu", accepted=False)), thread_id="t")
    assert not rep["verified"]
    values = _values("cpu")
    values["best"] = None
    rep = build_report(wrap_up_values(values), thread_id="t")
    assert not rep["verified"] and rep["failure"] == WRAP_UP_HALT


def test_cpu_run_is_verified_untimed_as_finalize_would_be():
    rep = build_report(wrap_up_values(_values("cpu", measured=False)), thread_id="t")
    assert rep["verified"] and rep["timing"] is None and rep["timing_note"] == "not timed on cpu"
