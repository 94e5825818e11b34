"""Full-graph runs with a scripted toolbox and scripted models: the graph's logic, no subprocesses."""

import sqlite3

import pytest
from fakes import FakeToolbox, ScriptedCode, scripted_models
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.sqlite import SqliteSaver

from graph.context import Context
from graph.main import build_graph
from graph.persistence import serde
from graph.records import TaskSpec
from nodes.deps import Deps

TASK = TaskSpec(path="t.py", name="t", source="class Model: pass\nN = 8\n")

SCRIPT = {
    ("algorithm", "seed"): [
        "# seed0 ms=0.9",
        "# seed1 ms=0.5 compile_error",
        "# seed2 ms=0.6",
        "# seed3 mismatch",
    ],
    ("algorithm", "fix"): ["# fixed ms=0.45"],
    ("algorithm", "refine"): ["# refine ms=0.40"],
    ("mapping", "tune"): ["# m1 G=2 ms=0.41", "# m2 G=4 ms=0.30"],
    ("tiling", "tune"): ["# t1 B=64 ms=0.35"],
    ("memory", "tune"): ["# w W=8 ms=0.299"],
}


def run(script=SCRIPT, device="cuda", checkpointer=None, thread="t", unsupported=None, **settings):
    code = ScriptedCode(script, unsupported=unsupported)
    tb = FakeToolbox(device=device)
    deps = Deps(toolbox=tb, model_factory=lambda s, t: scripted_models(code))
    g = build_graph(deps).compile(checkpointer=checkpointer or InMemorySaver())
    ctx = Context(device=device, **settings)
    cfg = {"configurable": {"thread_id": thread}, "recursion_limit": 300}
    out = g.invoke({"task": TASK}, cfg, context=ctx)
    return out, code, tb, g, cfg


def test_full_run_improves_stage_by_stage():
    out, code, tb, _, _ = run()
    assert out["status"] == "verified"
    by = {d.stage: d for d in out["decisions"]}
    assert [d.stage for d in out["decisions"]] == ["algorithm", "mapping", "tiling", "memory"]
    assert by["algorithm"].outcome == "improved" and by["algorithm"].speedup_exit == pytest.approx(1 / 0.40)
    assert by["mapping"].outcome == "improved" and "G: None -> 4" in by["mapping"].changed
    assert by["tiling"].outcome == "kept"  # 0.35 ms is slower than 0.30 ms
    assert by["memory"].outcome == "kept"  # 0.299 vs 0.30 is within noise
    assert out["best"].candidate.source == "# m2 G=4 ms=0.30"
    assert out["final"].candidate_ms == pytest.approx(0.30) and out["final"].compile_ms is not None
    # every candidate went through compile; the mismatching and broken ones never got timed
    timed = [s for k, s in tb.calls if k == "time"]
    assert not any("mismatch" in s or "compile_error" in s for s in timed)
    assert out["usage"].by_key["algorithm/code"].calls >= 4


def test_parent_state_holds_only_decisions_not_transcripts():
    out, code, *_ = run()
    assert not {"attempts", "current", "seed_results", "advice", "stage_best"} & set(out)
    mapping_reqs = [r for r in code.requests if r.stage.name == "mapping"]
    assert mapping_reqs
    for r in mapping_reqs:
        # a later stage sees the best kernel and earlier decisions, never earlier attempts
        assert all(s.candidate_id.startswith("mapping.") for s in r.recent)
        assert [d.stage for d in r.decisions] == ["algorithm"]
    assert mapping_reqs[0].best is not None and mapping_reqs[0].best.candidate.stage == "algorithm"


def test_seeds_fan_out_in_parallel_and_failed_seed_is_repaired():
    out, code, *_ = run()
    seeds = sorted(r.seed_index for r in code.requests if r.mode == "seed")
    assert seeds == [0, 1, 2, 3]
    fixes = [r for r in code.requests if r.mode == "fix"]
    assert fixes and all(r.failed is not None and r.diagnosis is not None for r in fixes)


def test_cpu_run_verifies_but_never_claims_speed():
    out, *_ = run(device="cpu")
    assert out["status"] == "verified"
    assert out["final"].measured is False
    by = {d.stage: d for d in out["decisions"]}
    assert "timing needs a CUDA GPU" in by["mapping"].why and by["mapping"].outcome == "kept"
    assert by["algorithm"].speedup_exit is None


def test_unsupported_task_ends_without_kernel():
    out, *_ = run(unsupported="torch.fft.fft is not covered")
    assert out["status"] == "no_kernel" and "not covered" in out["failure"]
    assert out.get("best") is None
    assert [d.stage for d in out["decisions"]] == ["algorithm"]


def test_no_seed_verifies_reports_every_failure():
    script = {
        ("algorithm", "seed"): ["# a mismatch", "# b compile_error"],
        ("algorithm", "fix"): ["# still mismatch"],
    }
    out, *_ = run(script=script, seeds=2)
    assert out["status"] == "no_kernel"
    assert "no seed passed verification" in out["failure"]


def test_bad_task_goes_straight_to_finalize():
    code = ScriptedCode(SCRIPT)
    deps = Deps(toolbox=FakeToolbox(), model_factory=lambda s, t: scripted_models(code))
    g = build_graph(deps).compile(checkpointer=InMemorySaver())
    bad = TaskSpec(path="b.py", name="b", source="x = 1\n")
    out = g.invoke({"task": bad}, {"configurable": {"thread_id": "b"}}, context=Context())
    assert out["status"] == "bad_input" and "class Model" in out["failure"]
    assert not code.requests


def test_a_machine_fault_while_describing_is_no_kernel_not_bad_input():
    """The GPU stayed full through the toolbox's retries: the run ends without a kernel and says
    why; the task is not called bad input (exit 1, not 2)."""
    from tools.errors import ToolInfraError

    class FullGpu(FakeToolbox):
        def describe(self, task, *, shrink):
            raise ToolInfraError("describe job failed 3 times for reasons of the machine (oom): full")

    code = ScriptedCode(SCRIPT)
    deps = Deps(toolbox=FullGpu(), model_factory=lambda s, t: scripted_models(code))
    g = build_graph(deps).compile(checkpointer=InMemorySaver())
    out = g.invoke({"task": TASK}, {"configurable": {"thread_id": "f"}}, context=Context(device="cuda"))
    assert out["status"] == "no_kernel" and out["failure"].startswith("infrastructure:")
    assert not code.requests and not out.get("decisions")


def test_replay_from_tiling_reproduces_decisions(tmp_path):
    conn = sqlite3.connect(str(tmp_path / "ck.sqlite"), check_same_thread=False)
    saver = SqliteSaver(conn, serde=serde())
    out, _, _, g, cfg = run(checkpointer=saver, thread="r")
    hist = list(g.get_state_history(cfg))
    start = next(s for s in hist if s.next == ("tiling",))
    again = g.invoke(None, start.config, context=Context(device="cuda"))
    assert [d.model_dump() for d in again["decisions"]] == [d.model_dump() for d in out["decisions"]]
    assert again["best"].candidate.id == out["best"].candidate.id


def test_stages_option_skips_tuning():
    out, code, *_ = run(stages=("algorithm",))
    by = {d.stage: d for d in out["decisions"]}
    assert by["algorithm"].outcome == "improved"
    assert all(by[s].outcome == "skipped" for s in ("mapping", "tiling", "memory"))
    assert not [r for r in code.requests if r.stage.name != "algorithm"]


PARALLEL = {
    **SCRIPT,
    # variants 0..2 of the first mapping round; the fastest beating the entry (0.40) wins, not the first
    ("mapping", "tune"): ["# m1 G=2 ms=0.35", "# m2 G=4 ms=0.30", "# m3 G=8 ms=0.32", "# m4 G=16 ms=0.2"],
}


def test_tuning_round_proposes_variants_in_parallel_from_the_entry_profile():
    out, code, *_ = run(PARALLEL, tune_budget=3, tune_width=3)
    by = {d.stage: d for d in out["decisions"]}
    reqs = [r for r in code.requests if r.stage.name == "mapping" and r.mode == "tune"]
    # one round of three variants (the budget), all revising the entry, none after it
    assert sorted(r.seed_index for r in reqs) == [0, 1, 2] and {r.n_seeds for r in reqs} == {3}
    assert {r.best.candidate.id for r in reqs} == {reqs[0].best.candidate.id}
    assert reqs[0].best.candidate.stage == "algorithm"
    # the round is ordered by the profiler's reading of the entry kernel, measured in the stage before
    assert all(r.advice is not None and r.advice.bottleneck for r in reqs)
    assert by["mapping"].outcome == "improved" and "G: None -> 4" in by["mapping"].changed
    assert by["mapping"].attempts == 3  # the fourth scripted variant was never asked for
    assert out["best"].candidate.source == "# m2 G=4 ms=0.30"


def test_tuning_width_one_is_one_profiled_step_at_a_time():
    out, code, *_ = run(PARALLEL, tune_budget=3, tune_width=1)
    reqs = [r for r in code.requests if r.stage.name == "mapping" and r.mode == "tune"]
    assert [(r.seed_index, r.n_seeds) for r in reqs] == [(0, 1)] * 3
    # each step after the first revises the best so far: m1 (0.35) beats 0.40, m2 (0.30) beats m1
    assert [r.best.candidate.source.split(" ms=")[0] for r in reqs[1:]] == ["# m1 G=2", "# m2 G=4"]
    assert out["best"].candidate.source == "# m2 G=4 ms=0.30"


def test_budget_beyond_the_width_continues_sequentially_from_the_round_winner():
    out, code, *_ = run(PARALLEL, tune_budget=4, tune_width=2)
    reqs = [r for r in code.requests if r.stage.name == "mapping" and r.mode == "tune"]
    assert len(reqs) == 4  # two in parallel, then two one at a time: the budget, no more
    round1, rest = reqs[:2], reqs[2:]
    assert sorted(r.seed_index for r in round1) == [0, 1] and all(r.n_seeds == 2 for r in round1)
    assert all(r.best.candidate.source == "# m2 G=4 ms=0.30" for r in rest)
    # the sequential steps see every parameter set the round tried, beyond the recent window
    assert {t["G"] for t in rest[0].tried} == {"2", "4"}
    assert out["best"].candidate.source == "# m4 G=16 ms=0.2"
    ids = [a for a in (d.best_candidate_id for d in out["decisions"]) if a and a.startswith("mapping")]
    assert ids and ".tune" in ids[0]


def test_settings_come_from_the_runs_context_and_are_recorded():
    _, code, _, g, cfg = run(seeds=2, stages=("algorithm",))
    assert sorted(r.seed_index for r in code.requests if r.mode == "seed") == [0, 1]
    recorded = g.get_state(cfg).values["settings"]
    assert Context.from_dict(recorded) == Context(device="cuda", seeds=2, stages=("algorithm",))


def test_candidates_carry_their_mode_and_branch_as_fields():
    saver = InMemorySaver(serde=serde())
    out, *_ = run(checkpointer=saver, thread="fields")
    attempts = {}
    for ck in saver.list(None):  # every namespace: the stages' private channels too
        for a in ck.checkpoint["channel_values"].get("attempts") or []:
            attempts[a.candidate.id] = a.candidate
    by_mode = {}
    for c in attempts.values():
        by_mode.setdefault((c.stage, c.mode), []).append(c)
    seeds = by_mode[("algorithm", "seed")]
    assert sorted(c.branch for c in seeds) == [0, 1, 2, 3]
    # seeds 1 (compile error) and 3 (mismatch) were repaired inside their own branches
    assert sorted(c.branch for c in by_mode[("algorithm", "fix")]) == [1, 3]
    assert all(c.branch is None for c in by_mode[("algorithm", "refine")])
    assert {c.branch for c in by_mode[("mapping", "tune")]} == {0, 1}  # one parallel round of two
    # the origin is the model's label, never an encoding of the mode
    assert all(c.origin == f"seed:{c.branch}" for c in seeds)
    assert out["best"].candidate.mode == "tune" and out["best"].candidate.stage == "mapping"


AUTOTUNED = (
    "import triton\n\n\n"
    '@triton.autotune(configs=[cfg(ms=0.45), cfg(ms=0.20), cfg(ms=0.30)], key=["n"])\n'
    "def k():\n    pass\n"
)


def test_tiling_times_each_autotune_config_alone_and_keeps_the_fastest():
    script = {("algorithm", "seed"): [AUTOTUNED]}
    out, code, tb, _, _ = run(script, seeds=1)
    assert out["status"] == "verified"
    by = {d.stage: d for d in out["decisions"]}
    assert by["tiling"].outcome == "improved", by["tiling"]
    assert "autotune: None -> k#1" in by["tiling"].changed, by["tiling"].changed
    best = out["best"].candidate
    assert "configs=[cfg(ms=0.20)]" in best.source and best.params["autotune"] == "k#1"
    assert best.origin == "autotune-sweep" and best.stage == "tiling"
    timed = {s for kind, s in tb.calls if kind == "time"}
    for ms in ("0.45", "0.20", "0.30"):
        assert any(f"configs=[cfg(ms={ms})]" in s for s in timed), ms
    # The sweep is EGG's, not the model's: the tiling stage asked the model only after it.
    assert not [r for r in code.requests if r.stage.name == "tiling" and r.best is None]


def test_tiling_without_autotune_asks_the_model_as_before():
    out, code, *_ = run()
    assert not [d for d in out["decisions"] if "autotune" in " ".join(d.changed)]
    assert [r for r in code.requests if r.stage.name == "tiling"]


def test_run_budget_stops_before_a_candidate_that_would_end_after_it(monkeypatch):
    """--run-seconds: a candidate whose jobs (judged by the slowest so far) would end after the
    budget is not started; the run ends with the kernel it has, and the report says why."""
    import time as _time

    slow = FakeToolbox.evaluate

    def evaluate(self, *a, **kw):
        _time.sleep(0.4)
        return slow(self, *a, **kw)

    monkeypatch.setattr(FakeToolbox, "evaluate", evaluate)
    script = {("algorithm", "seed"): ["# seed0 ms=0.9"], ("algorithm", "refine"): ["# refine ms=0.40"]}
    out, code, tb, _, _ = run(script, seeds=1, run_seconds=0.7, stages=("algorithm",))
    assert out["status"] == "verified" and out["best"].candidate.source == "# seed0 ms=0.9"
    # the seed took 0.4 s; a refinement started after it would end past 0.7 s: never written
    assert not any("refine" in s for _, s in tb.calls)
    assert "run wall-time budget of 0.7 s exhausted" in out["halt"]
    assert "a candidate takes up to 0 s" in out["halt"]  # the seed's 0.4 s, rounded
    # without a budget the refinement runs
    out, code, tb, _, _ = run(script, seeds=1, stages=("algorithm",))
    assert any("refine" in s for _, s in tb.calls) and not out.get("halt")


class _SizedToolbox(FakeToolbox):
    """Describes the task at the sizes the worker would: the task's overrides, then ragged."""

    def __init__(self, **kw):
        super().__init__(**kw)
        self.described: list[TaskSpec] = []

    def describe(self, task, *, shrink):
        from tools.errors import BadTaskError
        from tools.sizes import second_shape_options

        self.described.append(task)
        if task.size_overrides.get("N") == 13:
            raise BadTaskError("Model.forward failed on get_inputs(): RuntimeError: 13 does not divide")
        desc = super().describe(task, shrink=shrink)
        sizes = {"N": 8, **task.size_overrides}
        shapes = "as-written"
        if task.shapes == "ragged":
            sizes, shapes = second_shape_options(sizes)[0], "ragged"
        return desc.model_copy(update={"sizes_used": sizes, "shapes": shapes})


def _prepare_only(task: TaskSpec):
    tb = _SizedToolbox()
    code = ScriptedCode(SCRIPT)
    deps = Deps(toolbox=tb, model_factory=lambda s, t: scripted_models(code))
    g = build_graph(deps).compile(checkpointer=InMemorySaver())
    cfg = {"configurable": {"thread_id": "s"}}
    g.invoke({"task": task}, cfg, context=Context(stages=("algorithm",)))
    return g.get_state(cfg).values, tb


def test_user_sizes_and_ragged_shapes_become_the_runs_overrides():
    out, tb = _prepare_only(TASK.model_copy(update={"size_overrides": {"N": 12}}))
    assert tb.described[0].size_overrides == {"N": 12}  # the worker starts from the user's sizes
    assert out["task"].size_overrides == {"N": 12} and out["desc"].sizes_used == {"N": 12}
    assert out["status"] == "verified"
    out, tb = _prepare_only(TASK.model_copy(update={"size_overrides": {"N": 12}, "shapes": "ragged"}))
    assert tb.described[0].shapes == "ragged"
    # N=12 -> 12 - 3 - 1 = 8, a power of two -> 7: the sizes every later job runs at
    assert out["task"].size_overrides == {"N": 7} and out["desc"].shapes == "ragged"
    from graph.report import build_report

    rep = build_report(out, thread_id="s")
    assert rep["shapes"] == rep["shapes_requested"] == "ragged" and rep["sizes_used"] == {"N": 7}


def test_sizes_the_task_fails_at_are_bad_input_naming_them():
    out, _ = _prepare_only(TASK.model_copy(update={"size_overrides": {"N": 13}}))
    assert out["status"] == "bad_input"
    assert "13 does not divide" in out["failure"] and "(with sizes N=13)" in out["failure"]
