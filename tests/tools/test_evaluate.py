"""The `evaluate` job (compile -> check -> time in one process) and the GPU file lock."""

import fcntl
import os
import threading
import time
from pathlib import Path

from graph.records import TaskSpec
from tools.protocol import Job
from tools.sandbox import run_job, sandbox_env, warm_workers_enabled
from tools.worker.gpulock import LOCK_ENV, gpu_lock

CORPUS = Path(__file__).resolve().parents[1] / "corpus"


def _job(task: str, cand: str) -> Job:
    p = CORPUS / "tasks" / f"{task}.py"
    return Job(
        kind="evaluate",
        task_path=str(p),
        task_source=p.read_text(),
        device="cpu",
        candidate_source=(CORPUS / cand).read_text(),
        size_overrides={},
    )


def test_evaluate_runs_compile_then_check_in_one_process():
    res = run_job(_job("relu", "good/relu_good.py"), timeout_s=240)
    assert res.ok, res.error
    assert res.payload["compile"]["ok"] is True
    assert res.payload["check"]["accepted"] is True
    assert "time" not in res.payload  # nothing is timed on CPU
    # `phases` holds seconds only (so the toolbox can subtract them from the job's wall time);
    # other readings go to `gpu`, and on CPU there are no memory shares.
    phases, gpu = res.payload["phases"], res.payload["gpu"]
    assert {"imports", "compile", "check", "compile.record", "check.trials"} <= set(phases)
    # The judge's own steps inside the trials are timed too (where a check's seconds go).
    judge = {"check.judge.inputs", "check.judge.reference", "check.judge.read_outputs", "check.judge.compare"}
    assert judge <= set(phases), sorted(phases)
    # The warm worker imported torch._dynamo once (the first op under a dispatch mode imports it,
    # 3-5 s): a job's first reference call does not pay it (tools/worker/server.py).
    if warm_workers_enabled():
        assert phases["check.judge.reference.first"] < 1.0, phases
    assert all(isinstance(v, float) and v >= 0 for v in phases.values())
    assert set(gpu) == {"lock_waits"}
    top = sum(v for k, v in phases.items() if "." not in k)
    assert top <= res.seconds


def test_evaluate_stops_at_the_first_failure():
    res = run_job(_job("relu", "cheats/returns_torch.py"), timeout_s=240)
    assert res.ok
    c = res.payload["compile"]
    if c["ok"]:
        assert res.payload["check"]["accepted"] is False
    else:
        assert "check" not in res.payload


def test_sandbox_names_a_per_gpu_lock_only_for_gpu_jobs(tmp_path):
    assert LOCK_ENV not in sandbox_env(str(tmp_path), "cpu")
    env = sandbox_env(str(tmp_path), "cuda")
    assert env[LOCK_ENV].endswith(".lock")


def test_gpu_lock_excludes_shared_holders_while_exclusive(tmp_path, monkeypatch):
    path = tmp_path / "gpu.lock"
    monkeypatch.setenv(LOCK_ENV, str(path))
    events: list[str] = []
    with gpu_lock(exclusive=False):

        def timer():
            with gpu_lock(exclusive=True):
                events.append("timing")

        t = threading.Thread(target=timer)
        t.start()
        time.sleep(0.3)
        events.append("check done")
    t.join(5)
    assert events == ["check done", "timing"]
    fd = os.open(path, os.O_RDWR)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # released afterwards
    os.close(fd)


def test_toolbox_evaluate_on_cpu_compiles_then_checks_and_times_nothing():
    from tools.toolbox import Toolbox

    tb = Toolbox()
    p = CORPUS / "tasks" / "relu.py"
    task = TaskSpec(path=str(p), name="relu", source=p.read_text(), device="cpu")
    ev = tb.evaluate(task, (CORPUS / "good" / "relu_good.py").read_text())
    assert ev.compile.ok and ev.check is not None and ev.check.accepted and ev.verified
    assert ev.timing is None
    broken = tb.evaluate(task, "import torch\nclass ModelNew(torch.nn.Module):\n    def forward(self, x):\n")
    assert not broken.compile.ok and broken.check is None and not broken.verified


def test_the_graph_evaluates_in_one_node_on_a_gpu_and_steps_on_cpu():
    from graph.factory import build_stage_graph
    from graph.stages import ALGORITHM
    from nodes.deps import Deps

    stage = build_stage_graph(ALGORITHM, Deps(toolbox=object(), model_factory=lambda s, t: None))
    assert {"compile", "check", "time", "evaluate", "profile"} <= set(stage.compile().get_graph().nodes)

    from graph.records import Attempt, Candidate, CheckReport, CompileReport
    from graph.routing import route_after_code, route_after_evaluate

    cand = Attempt(candidate=Candidate(id="c", source="x", stage="algorithm", mode="seed", origin="seed:0"))
    for device, first in (("cuda", "evaluate"), ("cpu", "compile")):
        task = TaskSpec(path="t.py", name="t", source="", device=device)
        assert route_after_code({"task": task, "current": cand}) == first
    ok = cand.model_copy(update={"compile": CompileReport(ok=True), "check": CheckReport(accepted=True)})
    assert route_after_evaluate({"current": ok}) == "profile"
    bad = ok.model_copy(update={"check": CheckReport(accepted=False, reasons=["mismatch: x"])})
    assert route_after_evaluate({"current": bad}) == "debug"


def test_gpu_lock_lets_a_waiting_timer_go_before_later_checks(tmp_path, monkeypatch):
    """A steady stream of compile/check jobs must not starve timing: once a timer waits, later
    shared requests queue behind it."""
    monkeypatch.setenv(LOCK_ENV, str(tmp_path / "gpu.lock"))
    events: list[str] = []

    def timer():
        with gpu_lock(exclusive=True):
            events.append("timing")
            time.sleep(0.2)
            events.append("timing done")

    def late_check():
        with gpu_lock(exclusive=False):
            events.append("late check")

    with gpu_lock(exclusive=False):
        t = threading.Thread(target=timer)
        t.start()
        time.sleep(0.3)  # the timer now waits for this shared holder
        r = threading.Thread(target=late_check)
        r.start()
        time.sleep(0.3)
        events.append("first check done")
    t.join(5)
    r.join(5)
    assert events == ["first check done", "timing", "timing done", "late check"]


def test_gpu_lock_runs_queued_timers_back_to_back_before_any_waiting_check(tmp_path, monkeypatch):
    """Timers that queue while one waits for a check's step all time before the next check
    starts: one drain of the GPU's shared steps per batch of timings (tools/worker/gpulock.py;
    evals/h200/locksim.py replays a suite run's trace against it)."""
    monkeypatch.setenv(LOCK_ENV, str(tmp_path / "gpu.lock"))
    events: list[str] = []

    def timer(name: str) -> None:
        with gpu_lock(exclusive=True):
            events.append(name)
            time.sleep(0.1)

    def check(name: str) -> None:
        with gpu_lock(exclusive=False):
            events.append(name)

    threads = []
    with gpu_lock(exclusive=False):
        for target, name in ((timer, "timer 1"), (check, "check 2"), (timer, "timer 2"), (check, "check 3")):
            threads.append(threading.Thread(target=target, args=(name,)))
            threads[-1].start()
            time.sleep(0.2)
        events.append("check 1 done")
    for t in threads:
        t.join(5)
    assert events[0] == "check 1 done"
    assert set(events[1:3]) == {"timer 1", "timer 2"}, events
    assert set(events[3:]) == {"check 2", "check 3"}, events


def test_gpu_lock_is_reentrant_per_thread_so_steps_nest_inside_jobs(tmp_path, monkeypatch):
    """A step taking the shared lock inside a job that already holds it must not queue behind a
    waiting timer (that would deadlock: the timer waits for the job's outer hold)."""
    monkeypatch.setenv(LOCK_ENV, str(tmp_path / "gpu.lock"))
    events: list[str] = []

    def timer():
        with gpu_lock(exclusive=True):
            events.append("timing")

    with gpu_lock(exclusive=False):
        t = threading.Thread(target=timer)
        t.start()
        time.sleep(0.3)  # the timer waits among the writers now
        with gpu_lock(exclusive=False):  # nested: a no-op, returns at once
            events.append("inner step")
        events.append("job done")
    t.join(5)
    assert events == ["inner step", "job done", "timing"]
    with gpu_lock(exclusive=True), gpu_lock(exclusive=True):  # nested exclusive: fine
        pass
    with gpu_lock(exclusive=False):
        try:
            with gpu_lock(exclusive=True):
                raise AssertionError("upgraded a shared hold to exclusive")
        except RuntimeError as e:
            assert "holds it shared" in str(e)


def test_check_holds_the_gpu_lock_only_around_gpu_steps(tmp_path, monkeypatch):
    """Compile and check take the shared lock per GPU step, never for the whole job: between
    steps a waiting timer gets the GPU (the check job runs here in-process, on CPU)."""
    from tools.worker import gpulock
    from tools.worker.check import run_check
    from tools.worker.compile_job import run_compile

    monkeypatch.setenv(LOCK_ENV, str(tmp_path / "gpu.lock"))
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    holds: list[float] = []
    steps: list[str | None] = []
    real = gpulock.gpu_lock.__wrapped__

    def recording(exclusive, step=None):
        t0 = time.monotonic()
        steps.append(step)
        gen = real(exclusive, step)
        try:
            yield next(gen)
        finally:
            holds.append(time.monotonic() - t0)
            next(gen, None)

    import contextlib

    monkeypatch.setattr(gpulock, "gpu_lock", contextlib.contextmanager(recording))
    monkeypatch.setattr("tools.worker.check.gpu_lock", gpulock.gpu_lock)
    monkeypatch.setattr("tools.worker.compile_job.gpu_lock", gpulock.gpu_lock, raising=False)
    job = _job("relu", "good/relu_good.py")
    assert run_compile(job)["ok"] and run_check(job)["accepted"]  # warm: imports, first compiles
    holds.clear()
    steps.clear()
    t0 = time.monotonic()
    assert run_compile(job)["ok"]
    assert run_check(job)["accepted"]
    total = time.monotonic() - t0
    # the recording call, each of the three repeated-call trials (the first with the build), the
    # scaled trial, the second shape: each its own short hold, none spanning the job
    assert len(holds) == 6, holds
    assert max(holds) < total / 2, (holds, total)
    # each names its step for the lock's trace (evals/h200/locktrace.py's per-step table)
    assert steps == ["compile.record", *["check.trial"] * 3, "check.scaled", "check.second_shape"]


def _lock_worker(lock: str, log: str, seed: int, holds: int) -> None:
    import random

    os.environ[LOCK_ENV] = lock
    rng = random.Random(seed)
    for _ in range(holds):
        exclusive = rng.random() < 0.3
        with gpu_lock(exclusive=exclusive):
            t0 = time.monotonic()
            time.sleep(rng.uniform(0.002, 0.02))
            t1 = time.monotonic()
        with open(log, "a") as f:
            f.write(f"{'x' if exclusive else 's'} {t0:.6f} {t1:.6f}\n")
        time.sleep(rng.uniform(0.0, 0.01))


def test_gpu_lock_under_many_processes_keeps_timings_alone_and_everyone_finishes(tmp_path):
    """Eight worker processes mixing shared steps and exclusive timings: every hold is granted
    (no process starves or deadlocks within the time limit) and no exclusive hold overlaps any
    other hold."""
    import multiprocessing as mp

    lock, log = str(tmp_path / "gpu.lock"), str(tmp_path / "holds.log")
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=_lock_worker, args=(lock, log, i, 25)) for i in range(8)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    assert all(p.exitcode == 0 for p in procs), [p.exitcode for p in procs]
    holds = [(m, float(a), float(b)) for m, a, b in (ln.split() for ln in Path(log).read_text().splitlines())]
    assert len(holds) == 8 * 25
    timings = [h for h in holds if h[0] == "x"]
    assert timings
    for m, a, b in timings:
        overlapping = [h for h in holds if h != (m, a, b) and h[1] < b and a < h[2]]
        assert not overlapping, ((m, a, b), overlapping[:3])
