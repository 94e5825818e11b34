"""Screening on the GPU path: a step with a measured incumbent is timed first and checked only when
it could be adopted (tools/worker/evaluate.py); a screened-out step is neither a failure nor a
result."""

from test_graph_fakes import SCRIPT, run

from graph.records import Attempt, Candidate, CompileReport, TimingReport
from graph.routing import route_after_evaluate
from graph.state import StageState


def _checked(tb) -> list[str]:
    return [s for k, s in tb.calls if k == "check"]


def test_losing_variants_are_timed_but_never_checked():
    out, code, tb, _, _ = run()
    checked = _checked(tb)
    # slower than the incumbent (0.41 vs 0.40, 0.35 vs 0.30) or within its noise (0.299 vs 0.30)
    for loser in ("# m1 G=2 ms=0.41", "# t1 B=64 ms=0.35", "# w W=8 ms=0.299"):
        assert loser not in checked
        assert ("time", loser) in tb.calls
    # the contenders were checked: the refinement (0.40 < 0.45) and the mapping winner (0.30)
    assert "# refine ms=0.40" in checked and "# m2 G=4 ms=0.30" in checked
    # algorithm seeds have no incumbent: all checked, none screened
    assert all(s in checked for s in ("# seed0 ms=0.9", "# seed2 ms=0.6", "# seed3 mismatch"))
    by = {d.stage: d for d in out["decisions"]}
    # the decisions are the ones the unscreened loop took
    assert by["mapping"].outcome == "improved" and by["tiling"].outcome == "kept"
    assert by["memory"].outcome == "kept" and out["best"].candidate.source == "# m2 G=4 ms=0.30"
    assert by["tiling"].screened_attempts == 1 and by["tiling"].verified_attempts == 0
    assert "screened out unchecked" in by["tiling"].why and "fastest variant 0.3500 ms" in by["tiling"].why
    assert by["mapping"].screened_attempts == 1 and "1/2 verified" in by["mapping"].why
    # each screen was against the incumbent of its step: the seed winner, then the stage's best
    assert 0.45 in tb.screens and 0.30 in tb.screens


def test_a_fast_wrong_variant_is_checked_and_repaired_a_slow_wrong_one_is_only_screened():
    script = {
        **SCRIPT,
        ("mapping", "tune"): ["# m1 mismatch ms=0.2", "# m2 mismatch ms=0.9"],
        ("mapping", "fix"): ["# m1 fixed ms=0.25"],
    }
    out, code, tb, _, _ = run(script)
    checked = _checked(tb)
    assert "# m1 mismatch ms=0.2" in checked and "# m2 mismatch ms=0.9" not in checked
    fixes = [r for r in code.requests if r.stage.name == "mapping" and r.mode == "fix"]
    # only the contender that failed its check reaches the debugger
    assert fixes and all("m1" in r.failed.candidate.source for r in fixes)
    by = {d.stage: d for d in out["decisions"]}
    assert by["mapping"].outcome == "improved" and out["best"].candidate.source.startswith("# m1 fixed")


def test_cpu_runs_never_screen():
    out, code, tb, _, _ = run(device="cpu")
    assert not tb.screens
    assert "# t1 B=64 ms=0.35" in _checked(tb)


def test_a_screened_attempt_is_profiled_not_debugged_and_says_so():
    att = Attempt(
        candidate=Candidate(id="x", stage="tiling", source="# s", origin="t", mode="tune"),
        compile=CompileReport(ok=True),
        timing=TimingReport(measured=True, candidate_ms=0.5),
        screened="not checked: median 0.5000 ms does not beat the incumbent's 0.4000 ms",
    )
    state: StageState = {"current": att}  # type: ignore[typeddict-item]
    assert route_after_evaluate(state) == "profile"
    assert att.outcome == "screened:0.5000ms" and not att.verified
    state = {"current": att.model_copy(update={"screened": None})}  # type: ignore[typeddict-item]
    assert route_after_evaluate(state) == "debug"  # compiled but unchecked and not screened


def test_a_gpu_run_prefetches_its_baselines_once_with_the_runs_sizes():
    out, code, tb, _, _ = run()
    assert [t.name for t in tb.prefetched] == ["t"]
    assert tb.prefetched[0].device == "cuda"
    out, code, tb, _, _ = run(device="cpu")
    assert [t.device for t in tb.prefetched] == ["cpu"]  # the toolbox itself does nothing on CPU
