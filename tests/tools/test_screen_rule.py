"""The worker's screening rule is the graph's acceptance rule: a candidate is screened out exactly
when, verified, it would not have been adopted (graph.reducers.beats)."""

import itertools

from graph.records import TimingReport
from graph.reducers import MIN_NOISE, beats
from tools.worker.evaluate import screened_out


def test_screened_out_is_exactly_not_beats():
    meds = (0.3, 0.396, 0.3999, 0.4, 0.404, 0.41, 0.5)
    noises = (None, 0.0, 0.005, 0.02, 0.08)
    for ms, n_new, n_inc in itertools.product(meds, noises, noises):
        new = TimingReport(measured=True, candidate_ms=ms, noise=n_new)
        inc = TimingReport(measured=True, candidate_ms=0.4, noise=n_inc)
        bar = {"incumbent_ms": 0.4, "noise": max(n_inc or 0.0, MIN_NOISE)}
        why = screened_out(new.model_dump(), bar)
        assert (why is None) == beats(new, inc), (ms, n_new, n_inc, why)
        if why is not None:
            assert why.startswith("not checked") and f"{ms:.4f} ms" in why


def test_a_refused_or_failed_timing_screens_nothing():
    bar = {"incumbent_ms": 0.4, "noise": 0.01}
    assert screened_out({"measured": False, "reason": "timing.speed_of_light: ..."}, bar) is None
    assert screened_out({"measured": True, "candidate_ms": None}, bar) is None
    assert screened_out({"measured": True, "candidate_ms": 0.0}, bar) is None


def _t(ms: float, noise: float) -> dict:
    return {"measured": True, "candidate_ms": ms, "noise": noise}


def test_only_a_noisy_timing_that_could_win_is_taken_again():
    from tools.worker.evaluate import noisy_screen

    bar = {"incumbent_ms": 2.3587, "noise": 0.01}
    # the H200 case: 2.084 ms at a 27.4% spread was screened out by its own spread
    assert screened_out(_t(2.0842, 0.274), bar) is not None
    assert noisy_screen(_t(2.0842, 0.274), bar)
    assert not noisy_screen(_t(2.0842, 0.02), bar)  # a steady timing that wins is a contender
    assert not noisy_screen(_t(2.7286, 0.01), bar)  # steady and slower: screened out as is
    assert not noisy_screen(_t(5.0, 0.30), bar)  # slower even at the low end of its spread
    assert not noisy_screen(_t(2.40, 0.04), bar)  # spread under NOISY_SCREEN
    assert not noisy_screen(_t(2.40, 0.08), {"incumbent_ms": 2.3587, "noise": 0.09})  # as noisy as the bar
    assert not noisy_screen({"measured": False, "reason": "x"}, bar)


def test_a_noisy_screening_timing_is_retaken_and_the_steadier_decides(monkeypatch):
    from tools.worker import evaluate

    bar = {"incumbent_ms": 2.3587, "noise": 0.01}
    calls = []

    def fake_timed(job, runner, lap, sub, out, wall_check=True):
        assert wall_check is False  # a screening timing never takes the wall-clock check
        t = [_t(2.0842, 0.274), _t(2.0901, 0.008)][len(calls)]
        calls.append(t)
        out["time"] = t
        return t

    monkeypatch.setattr(evaluate, "_timed", fake_timed)
    out: dict = {}
    got = evaluate._screening_time(None, None, None, None, out, bar)
    assert len(calls) == 2 and got == _t(2.0901, 0.008) and out["time"] is got
    assert [r["noise"] for r in out["screen_retimed"]] == [0.274, 0.008]
    assert screened_out(got, bar) is None  # now a contender: it will be checked

    # a steady first timing is never taken twice, whatever it says
    calls.clear()
    out = {}
    monkeypatch.setattr(evaluate, "_timed", lambda *a, **k: calls.append(1) or _t(2.7286, 0.01))
    assert evaluate._screening_time(None, None, None, None, out, bar)["candidate_ms"] == 2.7286
    assert len(calls) == 1 and "screen_retimed" not in out


def test_a_failed_retake_never_replaces_a_measured_first_timing(monkeypatch):
    from tools.worker import evaluate

    bar = {"incumbent_ms": 2.3587, "noise": 0.01}
    seq = [_t(2.0842, 0.274), {"measured": False, "reason": "timing.error: x"}]
    monkeypatch.setattr(evaluate, "_timed", lambda *a, **k: seq.pop(0))
    got = evaluate._screening_time(None, None, None, None, {}, bar)
    assert got["candidate_ms"] == 2.0842


class _FakeRunner:
    peak_bytes = 0
    pending = None
    events: list[str] = []  # shared with the fake memory admission: the job's order of steps

    def __init__(self, *a, **k):
        self.requests: list[str] = []

    def request(self, op, **kw):
        self.requests.append(op)
        return {"ok": True}

    def load(self, job):
        self.events.append("load")
        return None

    def start(self, op, **kw):
        self.events.append(f"start {op}")
        self.pending = op

    def finish(self, op, timeout_s=None):
        self.events.append(f"finish {op}")
        self.pending = None
        return {"ok": True, "seconds": 4.9}

    def close(self):
        pass


def _screened_job_flow(monkeypatch, screen_ms: float, accepted: bool = True):
    """run_evaluate of a screened CUDA job with every GPU step faked: which timings it takes."""
    import contextlib

    import torch

    from tools.worker import check as check_mod
    from tools.worker import compile_job, evaluate, judge

    timings: list[bool] = []

    def fake_timed(job, runner, lap, sub, out, wall_check=True):
        timings.append(wall_check)
        out["time"] = _t(screen_ms if not wall_check else 1.9, 0.01)
        return out["time"]

    monkeypatch.setattr(evaluate, "_timed", fake_timed)
    events: list[str] = []
    monkeypatch.setattr(_FakeRunner, "events", events)

    def admit(units):
        events.append(f"admit {units}")
        return contextlib.nullcontext()

    def compiled(job, runner=None):
        if runner.pending == "precompile":
            runner.finish("precompile")
        events.append("record")
        return {"ok": True}

    monkeypatch.setattr(evaluate, "gpu_memory", admit)
    monkeypatch.setattr("tools.worker.gpumem.total_bytes", lambda: 80 * 2**30)
    monkeypatch.setattr(evaluate, "share_cpu_threads", lambda: None)
    monkeypatch.setattr(evaluate, "preload_for_reference", lambda source, overrides: {})
    monkeypatch.setattr(judge, "RunnerProcess", _FakeRunner)
    monkeypatch.setattr(compile_job, "run_compile", compiled)
    monkeypatch.setattr(check_mod, "run_check", lambda job, runner=None: {"accepted": accepted})
    monkeypatch.setattr(check_mod, "static_rejection", lambda job, t: None)
    monkeypatch.setattr(compile_job, "syntax_failure", lambda src: None)
    inits: list[int] = []
    monkeypatch.setattr(torch.cuda, "init", lambda: inits.append(1) or events.append("cuda_init"))
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: None)
    real_empty = torch.empty
    monkeypatch.setattr(torch, "empty", lambda *a, device=None, **k: real_empty(*a, **k))

    class Job:
        device = "cuda"
        candidate_source = "x = 1"
        task_source = ""
        size_overrides: dict = {}
        options = {"screen": {"incumbent_ms": 2.3587, "noise": 0.01}, "memory_units": 2}

    out = evaluate.run_evaluate(Job())
    out["judge_cuda_inits"] = len(inits)
    out["events"] = events
    return out, timings


def test_the_runner_compiles_while_the_judge_waits_for_memory_and_its_context(monkeypatch):
    """The candidate's kernels are compiled (CPU work) before the job holds memory shares: the
    precompile request goes out first and its reply is read only when the compile step needs it."""
    out, _ = _screened_job_flow(monkeypatch, screen_ms=1.2)
    ev = out["events"]
    assert ev[:5] == ["load", "start precompile", "admit 2", "finish precompile", "record"]
    # the contender's check: its shares (the task's 2 here), then the judge's context
    assert ev.index("cuda_init") > ev.index("record")
    assert "load" in out["phases"]


def test_a_screened_out_candidate_is_timed_once_without_the_wall_check(monkeypatch):
    out, timings = _screened_job_flow(monkeypatch, screen_ms=2.7)
    assert timings == [False]
    assert out["screened"].endswith("not wall-checked") and "check" not in out
    assert out["judge_cuda_inits"] == 0  # the judge made no CUDA context of its own
    assert out["gpu"]["measured_screen_units"] >= 1  # what screening needs is still measured
    assert out["gpu"]["screen_contexts"] == 1  # the runner's context alone


def test_a_contender_is_timed_again_in_full_after_its_check_and_only_that_timing_is_kept(monkeypatch):
    out, timings = _screened_job_flow(monkeypatch, screen_ms=1.2)
    assert timings == [False, True]  # the screen, then the full protocol
    assert out["time"]["candidate_ms"] == 1.9 and out["screen_time"]["candidate_ms"] == 1.2
    assert out["check"]["accepted"] is True and "screened" not in out
    assert out["judge_cuda_inits"] == 1 and "cuda_init" in out["phases"]  # made for the check
    # a contender the check rejects is never timed again
    out, timings = _screened_job_flow(monkeypatch, screen_ms=1.2, accepted=False)
    assert timings == [False] and "time" not in out


class _CudaJob:
    options: dict = {}
    size_overrides: dict = {}
    task_source = "the task"
    device = "cuda"


class _TimingRunner(_FakeRunner):
    pid = 0

    def load(self, job):
        self.requests.append("load")
        return None

    def start(self, op, **kw):
        self.requests.append(f"start {op}")

    def finish(self, op, timeout_s=None):
        self.requests.append(f"finish {op}")
        return {"ok": True, "staged": True}

    def request(self, op, **kw):
        self.requests.append((op, kw.get("cudagraph")) if op == "time" else op)
        if op == "time":
            return {"ok": True, "median": 0.5, "p20": 0.49, "p80": 0.52, "launches": 3}
        return {"ok": True, "launches": 3}


def _time_job(monkeypatch, eager_cached: bool, wall_check: bool):
    from tools.worker import timing
    from tools.worker.gpulock import gpu_lock
    from tools.worker.judge import RunnerFailure

    class Cache:
        def __init__(self, *a):
            pass

        def get(self, what):
            if what == "eager" and eager_cached:
                return {"median": 1.0, "p20": 0.9, "p80": 1.1, "measured_at": "then"}
            return None

        def put(self, what, value):
            pass

    class Loaded(Exception):
        pass

    def no_reference(*a, **k):
        raise Loaded("the reference was made")

    monkeypatch.setattr(timing, "BaselineCache", Cache)
    monkeypatch.setattr(timing, "load_task", no_reference)
    monkeypatch.setattr(timing, "environment", lambda: {})

    runner = _TimingRunner()
    try:
        out = timing._time(_CudaJob(), False, runner, False, 0.0, gpu_lock, None, RunnerFailure, wall_check)
    except Loaded:
        return None, runner.requests
    return out, runner.requests


def test_a_screening_timing_runs_no_reference_and_no_graph_probe(monkeypatch):
    out, requests = _time_job(monkeypatch, eager_cached=True, wall_check=False)
    assert out is not None, "the screening timing made the reference"
    # the build's CPU part is asked for before the shared lock (runner.op_stage), then the
    # first call under it and the runner's median under the exclusive one
    assert requests == ["load", "start stage", "finish stage", "load", "build", "call", ("time", False)]
    assert out["measured"] and out["candidate_ms"] == 0.5 and out["wall_checked"] is False
    assert out["eager_ms"] == 1.0 and "sol_ms" not in out and out["candidate_launches"] == 3
    assert {"first_call", "wait_exclusive", "bench_candidate"} <= set(out["phases"])
    # without a cached eager time, or for a kept timing, the full protocol runs (the reference)
    assert _time_job(monkeypatch, eager_cached=False, wall_check=False)[0] is None
    assert _time_job(monkeypatch, eager_cached=True, wall_check=True)[0] is None


def test_a_screen_after_a_kept_recording_goes_straight_to_the_exclusive_hold(monkeypatch):
    """The compile step's recording call left a built, called candidate in the runner: the
    screening timing neither stages nor builds nor calls it again, and takes no shared hold."""
    import contextlib

    from tools.worker import timing
    from tools.worker.judge import RunnerFailure

    monkeypatch.setattr(timing, "BaselineCache", lambda *a: _EagerCached())
    monkeypatch.setattr(timing, "environment", lambda: {})
    holds: list[tuple[bool, str]] = []

    def lock(exclusive, step):
        holds.append((exclusive, step))
        return contextlib.nullcontext()

    runner = _TimingRunner()
    runner.requests = []
    runner.ready_to_time = True
    out = timing._time(_CudaJob(), False, runner, True, 0.0, lock, None, RunnerFailure, False)
    assert runner.requests == [("time", False)]
    assert holds == [(True, "time.screen")]
    assert out["measured"] and out["first_call"] == "recording" and "first_call" not in out["phases"]
    # without a kept recording: staged, built and called under a shared hold first
    runner.requests, runner.ready_to_time, holds[:] = [], False, []
    timing._time(_CudaJob(), False, runner, True, 0.0, lock, None, RunnerFailure, False)
    assert holds == [(False, "time.screen_first_call"), (True, "time.screen")]
    assert "build" in runner.requests and "call" in runner.requests


class _EagerCached:
    def get(self, what):
        if what == "eager":
            return {"median": 1.0, "p20": 0.9, "p80": 1.1, "measured_at": "then"}
        return None

    def put(self, what, value):
        pass


def test_the_gpu_size_comes_from_the_driver_without_a_context(monkeypatch):
    import subprocess

    from tools.worker import gpumem

    seen = []

    def smi(cmd, **kw):
        seen.append(cmd)
        return subprocess.CompletedProcess(cmd, 0, stdout="81559\n", stderr="")

    monkeypatch.setattr(gpumem.subprocess, "run", smi)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3")
    assert gpumem.total_bytes() == 81559 * 2**20  # no CUDA context here (CPU test)
    assert seen[0][:3] == ["nvidia-smi", "-i", "3"]


def test_a_screen_without_the_judges_context_asks_for_one_context_less(monkeypatch):
    from tools.worker import gpumem

    monkeypatch.setattr(gpumem, "total_bytes", lambda: 80 * 2**30)  # 1 GiB shares
    peak = 0.6 * 2**30  # a small task's runner while screening
    assert gpumem.units_with_margin(peak) == 3  # two contexts: 0.75 + 2 GiB
    assert gpumem.units_with_margin(peak, contexts=1) == 2  # 0.75 + 1 GiB


def test_the_timing_environment_names_the_gpu_without_a_context(monkeypatch):
    """timing.environment() runs in every timing job, the screening ones too: the GPU's name and
    clocks come from nvidia-smi, since torch's name for it would make the judge's CUDA context."""
    import subprocess

    import torch

    from tools.worker import gpumem, timing

    def smi(cmd, **kw):
        return subprocess.CompletedProcess(cmd, 0, stdout="NVIDIA H100 80GB HBM3, 580.159.04, 1980, 2619\n")

    def no_context(*a, **k):
        raise AssertionError("torch made a CUDA context to name the GPU")

    monkeypatch.setattr(gpumem.subprocess, "run", smi)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", no_context)
    env = timing.environment()
    assert env["gpu"] == "NVIDIA H100 80GB HBM3" and env["driver"] == "580.159.04"
    assert env["sm_clock_mhz"] == 1980 and env["mem_clock_mhz"] == 2619
    # without nvidia-smi, torch names it (and the clocks are missing)
    monkeypatch.setattr(gpumem.subprocess, "run", lambda cmd, **kw: subprocess.CompletedProcess(cmd, 9, ""))
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda: "a GPU")
    env = timing.environment()
    assert env["gpu"] == "a GPU" and "sm_clock_mhz" not in env
