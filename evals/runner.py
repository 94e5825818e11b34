"""`egg eval`: run `egg optimize` over many tasks, record one row per task, write the report.

Each task runs as a subprocess of the optimize command (its own process, its own thread id),
so a crashing or hanging task cannot take the eval down and the agent process never imports
torch. Rows are appended to DIR/results.jsonl (flush + fsync) the moment a task ends, which is
what makes --resume safe: a task has either a complete final row or none.

Backends: "local" runs one thread per slot, each managing one subprocess at a time. On CUDA
there are --workers slots per GPU (CUDA_VISIBLE_DEVICES set to that GPU only); tasks sharing a
GPU overlap their compiling and checking, while every timed section holds the per-GPU lock
exclusively (tools/worker/gpulock.py), so timing still has the GPU to itself. On CPU there are
--workers slots in all. "ray" submits each task to Ray (1/--workers of a GPU per task on CUDA)
and gathers rows the same way. Exit codes: 0 eval completed (whatever the tasks' outcomes),
2 bad input, 3 the time box ended with tasks left, 130 interrupted (rows of finished tasks are
kept either way; rerun with --resume).

Time box (`--time-box SECONDS`, for GPU time that comes in slots): a task starts only while enough
of the box is left, and gets the rest of the box, less a margin for its last job and its final
timing, as its run budget (`optimize --run-seconds`), so it ends with its best verified kernel
instead of being killed. A task that reaches that budget without a verified kernel gets no row
(`--resume` runs it again with a full budget); rows record the budget they had (`run_seconds`).
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import json
import os
import queue
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from evals.phases import task_phases
from evals.results import ResultsFile
from evals.tasks import TaskDiscoveryError, TaskEntry, discover
from tools.sizes import SHAPES_MODES

ROW_SCHEMA = 1
REPO_ROOT = str(Path(__file__).resolve().parent.parent)
DEFAULT_TASK_TIMEOUT_S = 3600.0
_KILL_GRACE_S = 5.0
# How long a run stopped by the time box has to write its result (graph/cli.py: _wrap_up_on_sigterm).
_WRAP_UP_S = 15.0
_POLL_S = 0.1
# Config keys that must match on --resume: mixing rows of different models or policies in
# one report would make every metric meaningless.
# what a results row keeps of each stage decision
STAGE_FIELDS = (
    "stage",
    "outcome",
    "changed",
    "speedup_entry",
    "speedup_exit",
    "attempts",
    "verified_attempts",
    "screened_attempts",
)
_RESUME_KEYS = ("model", "policy", "stages", "device", "extra_args", "shapes")
# What a manifest without the key (written before it existed) ran with.
_RESUME_DEFAULTS: dict[str, Any] = {"shapes": "as-written"}
# The halt reason of a run that used up its wall-time budget (nodes/code.py).
_RUN_BUDGET_HALT = "run wall-time budget"


class EvalUsageError(Exception):
    """Bad eval invocation (exit 2)."""


@dataclass
class EvalConfig:
    out: str
    device: str  # resolved: "cpu" | "cuda"
    model: str
    policy: str
    stages: list[str] | None
    extra_args: list[str]
    optimize_cmd: list[str]
    backend: str
    eval_id: str
    task_timeout_s: float
    gpus: list[int] = field(default_factory=list)
    # time.time() at which the time box ends (None: no box)
    deadline: float | None = None
    # "as-written" or "ragged" (optimize --shapes): the sizes every task runs with
    shapes: str = "as-written"


# A fifth of the box, within these bounds.
_BOX_MARGIN_MIN_S = 30.0
_BOX_MARGIN_MAX_S = 120.0


def time_box_margin(box_s: float) -> float:
    """Seconds of a time box kept back from each task's run budget (its last candidate job and
    its final timing run after the budget ends); also the least run budget a task starts with."""
    return max(_BOX_MARGIN_MIN_S, min(_BOX_MARGIN_MAX_S, 0.2 * box_s))


def run_budget(cfg: EvalConfig, box_s: float, now: float | None = None) -> float | None:
    """The run budget of a task starting now under the time box; None when too little is left
    to start one (the task is left for --resume)."""
    assert cfg.deadline is not None
    margin = time_box_margin(box_s)
    left = cfg.deadline - (time.time() if now is None else now) - margin
    return round(left, 1) if left >= margin else None


# ---------------------------------------------------------------------------------------------
# One task
# ---------------------------------------------------------------------------------------------


def task_dir(cfg: EvalConfig, task: TaskEntry) -> Path:
    return Path(cfg.out) / "tasks" / task.id


def build_command(
    cfg: EvalConfig, task: TaskEntry, thread_id: str | None = None, run_seconds: float | None = None
) -> list[str]:
    cmd = [
        *cfg.optimize_cmd,
        task.path,
        "--out", str(task_dir(cfg, task)),
        "--thread-id", thread_id or f"{cfg.eval_id}-{task.id}",
        "--device", cfg.device,
        "--model", cfg.model,
        "--policy", cfg.policy,
    ]  # fmt: skip
    if cfg.stages:
        cmd += ["--stages", ",".join(cfg.stages)]
    if run_seconds is not None:
        cmd += ["--run-seconds", f"{run_seconds:g}"]
    if cfg.shapes != "as-written":
        cmd += ["--shapes", cfg.shapes]
    return cmd + list(cfg.extra_args)


def _wrap_up(proc: subprocess.Popen[bytes]) -> bool:
    """SIGTERM to the optimize process alone (its sandbox jobs keep running meanwhile): it writes
    report.json and model_new.py for its best verified kernel and exits. True when it exited
    within _WRAP_UP_S."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=_WRAP_UP_S)
    except subprocess.TimeoutExpired:
        return False
    return True


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    """Kill the task's whole process group (optimize spawns sandbox workers) at once: SIGKILL,
    since egg optimize takes SIGTERM as the request to wrap up (_wrap_up), which an interrupted
    eval or a task past its timeout does not want. Waits for the optimize process."""
    if proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    try:
        proc.wait(timeout=_KILL_GRACE_S)
    except subprocess.TimeoutExpired:
        pass  # unkillable (uninterruptible sleep): the finally below tries the group again


def _log_tail(path: Path, n: int = 3) -> str:
    try:
        lines = [ln.strip() for ln in path.read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return ""
    return " | ".join(lines[-n:])[-400:]


def run_task(
    cfg: EvalConfig,
    task: TaskEntry,
    gpu: int | None,
    should_stop: Callable[[], bool] = lambda: False,
    run_seconds: float | None = None,
) -> dict[str, Any] | None:
    """Run optimize on one task and return its row; None when stopped by the eval itself (an
    interrupt, the end of the time box, or a time-boxed run budget used up with no kernel).

    gpu: the physical GPU this task owns (CUDA_VISIBLE_DEVICES=gpu), or None to leave the
    environment's devices alone (Ray has already set them). On CPU all GPUs are hidden.
    """
    tdir = task_dir(cfg, task)
    tdir.mkdir(parents=True, exist_ok=True)
    # A previous interrupted attempt may have left outputs; reading them would attribute an
    # old result to this run.
    for stale in ("report.json", "model_new.py"):
        with contextlib.suppress(FileNotFoundError):
            (tdir / stale).unlink()
    thread_id = f"{cfg.eval_id}-{task.id}"
    if (tdir / "optimize.log").exists():
        # An earlier attempt was stopped before it wrote a row (interrupt, then --resume). Its
        # checkpoints live under the same thread id, and re-running a LangGraph thread with new
        # input would merge the killed run's accumulated state into this one: start a fresh
        # thread and keep the old log for the record.
        n = len(list(tdir.glob("optimize.attempt*.log"))) + 1
        (tdir / "optimize.log").rename(tdir / f"optimize.attempt{n}.log")
        thread_id = f"{thread_id}-retry{n}"
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (REPO_ROOT, env.get("PYTHONPATH")) if p)
    if cfg.device == "cpu":
        env["CUDA_VISIBLE_DEVICES"] = ""
    elif gpu is not None:
        env["CUDA_VISIBLE_DEVICES"] = str(gpu)
    cmd = build_command(cfg, task, thread_id, run_seconds)
    log_path = tdir / "optimize.log"
    t0 = time.monotonic()
    timed_out = boxed = False
    with open(log_path, "wb") as log:
        try:
            proc = subprocess.Popen(
                cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                start_new_session=True,
            )  # fmt: skip
        except OSError as e:
            return build_row(
                cfg, task, gpu, exit_code=None, wall=0.0, launch_error=str(e), thread_id=thread_id
            )
        try:
            while proc.poll() is None:
                if should_stop():
                    _kill_group(proc)
                    return None
                if cfg.deadline is not None and time.time() > cfg.deadline:
                    # The time box ended: the run writes its best verified kernel so far (with
                    # its stage's timing) and exits; one with none is left for --resume.
                    wrapped = _wrap_up(proc)
                    _kill_group(proc)
                    if not wrapped:
                        return None
                    boxed = True
                    break
                if time.monotonic() - t0 > cfg.task_timeout_s:
                    timed_out = True
                    _kill_group(proc)
                    break
                time.sleep(_POLL_S)
        finally:
            # Also reached on KeyboardInterrupt / Ray cancellation: never leave an orphan.
            _kill_group(proc)
            # Sandbox workers left behind by an optimize that exited would share the GPU with
            # the next task and skew its timing: clear the task's process group.
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
    wall = time.monotonic() - t0
    row = build_row(
        cfg, task, gpu, exit_code=proc.returncode, wall=wall, timed_out=timed_out, thread_id=thread_id,
        run_seconds=run_seconds,
    )  # fmt: skip
    if boxed and not row["verified"]:
        return None
    if run_seconds is not None and not row["verified"] and _RUN_BUDGET_HALT in str(row.get("halt") or ""):
        # The time box, not the task, ended this run: no row, so --resume runs it in full.
        print(
            f"egg eval: {task.id}: time box reached before a verified kernel; left for --resume",
            file=sys.stderr,
        )
        return None
    return row


def _tokens(usage: Any) -> dict[str, int]:
    """Sum a report's usage ({"by_key": {k: RoleUsage}} or a flat RoleUsage) into totals."""
    tot = {"input": 0, "output": 0, "calls": 0}
    if not isinstance(usage, dict):
        return tot
    if isinstance(usage.get("total"), dict):  # graph.report: {"by_stage_role": {...}, "total": {...}}
        entries = [usage["total"]]
    else:
        items = usage.get("by_key") or usage.get("by_stage_role")
        entries = list(items.values()) if isinstance(items, dict) else [usage]
    for u in entries:
        if isinstance(u, dict):
            tot["input"] += int(u.get("input_tokens") or 0)
            tot["output"] += int(u.get("output_tokens") or 0)
            tot["calls"] += int(u.get("calls") or 0)
    return tot


def _installed_versions() -> dict[str, str | None]:
    from importlib import metadata

    out: dict[str, str | None] = {"python": sys.version.split()[0]}
    for pkg in ("torch", "triton"):
        try:
            out[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            out[pkg] = None
    return out


def _degenerate(rep: dict[str, Any]) -> list[str]:
    """Degenerate-task notes from the report (top level or the checker's), deduplicated."""
    notes: list[str] = []
    check = rep.get("check") if isinstance(rep.get("check"), dict) else {}
    for src in (rep.get("degenerate"), check.get("degenerate")):
        for x in src or []:
            if x and str(x) not in notes:
                notes.append(str(x))
    return notes


def _precision(params: Any) -> str | None:
    """The kernel's PRECISION parameter; for a partition, each group's that has one, in group
    order, groups alike joined ("g0/g1 cudnn-default, g2 tf32x3-bsplit")."""
    if not isinstance(params, dict):
        return None
    p = params.get("PRECISION")
    if isinstance(p, str):
        return p

    def order(g: str) -> tuple[int, str]:
        return (int(g[1:]) if g[1:].isdigit() else 1 << 30, g)

    per_group = []
    for key, value in params.items():
        g, sep, name = str(key).partition(".")
        if sep and name == "PRECISION" and isinstance(value, str):
            per_group.append((g, value))
    groups: dict[str, list[str]] = {}  # precision -> its groups, first seen in group order
    for g, value in sorted(per_group, key=lambda gv: order(gv[0])):
        groups.setdefault(value, []).append(g)
    return ", ".join(f"{'/'.join(gs)} {v}" for v, gs in groups.items()) or None


def _f(x: Any) -> float | None:
    return float(x) if isinstance(x, (int, float)) and not isinstance(x, bool) else None


def build_row(
    cfg: EvalConfig,
    task: TaskEntry,
    gpu: int | None,
    *,
    exit_code: int | None,
    wall: float,
    timed_out: bool = False,
    launch_error: str | None = None,
    thread_id: str | None = None,
    run_seconds: float | None = None,
) -> dict[str, Any]:
    """The results.jsonl row for a finished task, from its exit code and report.json."""
    tdir = task_dir(cfg, task)
    report: dict[str, Any] | None = None
    failure: str | None = None
    failure_kind: str | None = None
    report_path = tdir / "report.json"
    if launch_error is not None:
        failure, failure_kind = f"could not start optimize: {launch_error}", "crash"
    elif timed_out:
        failure, failure_kind = f"timeout after {cfg.task_timeout_s:g}s", "timeout"
    elif report_path.exists():
        try:
            loaded = json.loads(report_path.read_text())
            if not isinstance(loaded, dict):
                raise ValueError("not a JSON object")
            report = loaded
        except (OSError, ValueError) as e:
            failure, failure_kind = f"report.json unreadable: {e}", "bad_report"
    if report is None and failure is None:
        tail = _log_tail(tdir / "optimize.log")
        if exit_code == 2:  # bad input: optimize's one line says why
            failure, failure_kind = _log_tail(tdir / "optimize.log", 1) or "bad input (exit 2)", "bad_input"
        elif exit_code in (0, 1):
            failure, failure_kind = f"no report.json (exit {exit_code}): {tail}", "no_report"
        else:
            failure, failure_kind = f"optimize crashed (exit {exit_code}): {tail}", "crash"
    rep = report or {}
    reported_verified = rep.get("verified") is True
    verified = False
    if report is not None:
        if exit_code == 0 and reported_verified and (tdir / "model_new.py").exists():
            verified = True
        elif exit_code == 0 and reported_verified:
            failure, failure_kind = (
                "inconsistent: report says verified but model_new.py is missing",
                "inconsistent",
            )
        elif exit_code == 0:
            failure, failure_kind = "inconsistent: exit 0 but report.verified is not true", "inconsistent"
        elif reported_verified:
            failure, failure_kind = (
                f"inconsistent: exit {exit_code} but report.verified is true",
                "inconsistent",
            )
        elif exit_code == 2:
            failure, failure_kind = str(rep.get("failure") or "bad input (exit 2)"), "bad_input"
        elif exit_code == 1:
            failure, failure_kind = str(rep.get("failure") or "no verified kernel (exit 1)"), "no_kernel"
        else:
            tail = _log_tail(tdir / "optimize.log")
            failure, failure_kind = f"optimize crashed (exit {exit_code}): {tail}", "crash"
    timing = rep.get("timing") if isinstance(rep.get("timing"), dict) else None
    measured = bool(timing) and timing.get("measured", True) is not False
    tm = timing if measured and timing else {}
    cand, eager, comp = _f(tm.get("candidate_ms")), _f(tm.get("eager_ms")), _f(tm.get("compile_ms"))
    # Speedups only from measured timing; the report's own figure first, else the ratio of the
    # reported medians (never a default).
    s_eager = _f(rep.get("speedup_vs_eager")) if measured else None
    s_comp = _f(rep.get("speedup_vs_compile")) if measured else None
    if s_eager is None and cand and eager:
        s_eager = eager / cand
    if s_comp is None and cand and comp:
        s_comp = comp / cand
    compile_check = tm.get("compile_check") if isinstance(tm.get("compile_check"), dict) else {}
    # against the faster of the two baselines (both needed); reports before it have no field
    s_best = _f(rep.get("speedup_vs_best")) if measured else None
    if s_best is None and cand and eager and comp:
        s_best = min(eager, comp) / cand
    stages = []
    for s in rep.get("stages") or []:
        if isinstance(s, dict):
            stages.append({k: s.get(k) for k in STAGE_FIELDS})
    compiled: bool | None = rep.get("compiled") if isinstance(rep.get("compiled"), bool) else None
    if compiled is None and (verified or any((s.get("verified_attempts") or 0) > 0 for s in stages)):
        compiled = True  # a verified candidate necessarily compiled
    try:
        log_text = (tdir / "optimize.log").read_text(errors="replace")
    except OSError:
        log_text = ""
    phases, phases_source = task_phases(report, log_text)
    env = rep.get("env") if isinstance(rep.get("env"), dict) else {}
    versions = {
        k: env.get(k)
        for k in ("torch", "triton", "cuda", "python", "driver", "sm_clock_mhz", "mem_clock_mhz")
    }
    versions_source = "report"
    if not versions["torch"] and not versions["triton"]:
        # CPU runs carry no timing env; record what is installed where the task ran (read from
        # package metadata: importing torch here is not allowed).
        versions.update(_installed_versions())
        versions_source = "installed"
    return {
        "schema": ROW_SCHEMA,
        "eval_id": cfg.eval_id,
        "task": task.id,
        "path": task.path,
        "name": task.name,
        "family": task.family or rep.get("family"),
        "family_source": "header" if task.family else ("report" if rep.get("family") else None),
        "kind": task.kind,
        "level": task.level,
        "description": task.description,
        "verified": verified,
        "compiled": compiled,
        "exit_code": exit_code,
        "failure": None if verified else failure,
        "failure_kind": None if verified else failure_kind,
        "policy": rep.get("policy") or cfg.policy,
        "model": cfg.model,
        # Per role, as optimize resolved it ({"code": ..., "profiler": ..., "debugger": ...}).
        "models": rep.get("model") if isinstance(rep.get("model"), dict) else None,
        "device": rep.get("device") or cfg.device,
        "backend": cfg.backend,
        "gpu_index": gpu,
        "timing_measured": measured,
        "candidate_ms": cand,
        "eager_ms": eager,
        "compile_ms": comp,
        # The kernel's own timing spread (p20/p80 of its timed calls): the report's error bars.
        "candidate_p20_ms": _f(tm.get("candidate_p20_ms")),
        "candidate_p80_ms": _f(tm.get("candidate_p80_ms")),
        # the stage's own timing of the same kernel (metrics flags a final benchmark far from it)
        "stage_ms": _f(tm.get("stage_ms")),
        # the final benchmark's first median, when it drifted from stage_ms and was retaken
        "first_benchmark_ms": _f(tm.get("first_benchmark_ms")),
        # "judge_wall": the kernel's time is the judge's wall clock (its own median unconfirmed)
        "timed_by": tm.get("timed_by") if isinstance(tm.get("timed_by"), str) else None,
        # the same forward as one CUDA-graph replay (no host work between launches), and how busy
        # the host's CPUs were while it was timed: a median far above the replay on a busy host is
        # the host's time, not the kernels'
        "cudagraph_ms": _f(tm.get("cudagraph_ms")),
        # torch.compile's output within the bar our kernels must pass (None: not held to it)
        "compile_within_bar": compile_check.get("within_bar"),
        # why it missed the bar, or why it was not held to it (an error or a skip: never silent)
        "compile_check_note": next(
            (str(compile_check[k]) for k in ("reason", "error", "skipped") if compile_check.get(k)), None
        ),
        "host_cpu_busy": _f(tm.get("host_cpu_busy")),
        "baseline": tm.get("baseline") if isinstance(tm.get("baseline"), str) else None,
        "dtype": rep.get("dtype") if isinstance(rep.get("dtype"), str) else None,
        "speedup_vs_eager": s_eager,
        "speedup_vs_compile": s_comp,
        "speedup_vs_best": s_best,
        "roofline_fraction": _f(rep.get("roofline_fraction")),
        "bottleneck": rep.get("bottleneck"),
        "profile_note": rep.get("profile_note") if isinstance(rep.get("profile_note"), str) else None,
        # the final kernel's algorithm and the precision of its products (reports say which)
        "algorithm": rep.get("algorithm") if isinstance(rep.get("algorithm"), str) else None,
        "precision": _precision(rep.get("params")),
        "stages": stages,
        "tokens": _tokens(rep.get("usage")),
        "degenerate": _degenerate(rep),
        "timing_note": None if measured else rep.get("timing_note"),
        "delegated_ops": [str(x) for x in rep.get("delegated_ops") or []],
        "sizes_used": rep.get("sizes_used") or {},
        # The eval's --shapes; the shapes sizes_used follow (as written when no ragged set ran,
        # shapes_note then says so).
        "shapes": cfg.shapes,
        "shapes_used": rep.get("shapes") if isinstance(rep.get("shapes"), str) else None,
        "shapes_note": rep.get("shapes_note") if isinstance(rep.get("shapes_note"), str) else None,
        "wall_s": round(wall, 3),
        "optimize_wall_s": _f(rep.get("wall_s")),
        # The run's wall-time budget from the eval's time box (None: none), and why the run
        # stopped early (a budget), as its report says.
        "run_seconds": run_seconds,
        "halt": rep.get("halt") if isinstance(rep.get("halt"), str) else None,
        "phases": phases,
        "phases_source": phases_source,
        "versions": versions,
        "versions_source": versions_source,
        "gpu": env.get("gpu"),
        "thread_id": rep.get("thread_id") or thread_id or f"{cfg.eval_id}-{task.id}",
        "report_path": str(report_path) if report is not None else None,
        "finished_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
    }


# ---------------------------------------------------------------------------------------------
# Progress
# ---------------------------------------------------------------------------------------------


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "?"
    s = int(round(seconds))
    h, m = divmod(s // 60, 60)
    return f"{h}h{m:02d}m" if h else (f"{m}m{s % 60:02d}s" if m else f"{s}s")


class _Tally:
    """Counts of one eval (done, verified, failed, running, queued) and a throughput ETA."""

    def __init__(
        self, total: int, skipped: int, clock: Callable[[], float] = time.monotonic, skipped_verified: int = 0
    ):
        # tasks done by an earlier run (--resume) count in done, verified and failed from the start
        self.total, self.skipped, self.done = total, skipped, skipped
        self.verified, self.failed = skipped_verified, skipped - skipped_verified
        self.running: list[str] = []
        self.clock = clock
        self.t0 = clock()
        self._lock = threading.Lock()

    @property
    def queued(self) -> int:
        return max(0, self.total - self.done - len(self.running))

    def eta_s(self) -> float | None:
        """Remaining tasks at this run's rate so far (tasks skipped on --resume do not count)."""
        finished = self.done - self.skipped
        if finished <= 0:
            return None
        return (self.total - self.done) * (self.clock() - self.t0) / finished

    def status(self) -> str:
        return (
            f"done {self.done}/{self.total} ({self.verified} verified, {self.failed} failed), "
            f"running {len(self.running)}, queued {self.queued}, elapsed {_duration(self.clock() - self.t0)}, "
            f"ETA {_duration(self.eta_s())}"
        )

    def _started(self, task_id: str) -> None:
        self.running.append(task_id)

    def _finished(self, row: dict[str, Any]) -> None:
        if row["task"] in self.running:
            self.running.remove(row["task"])
        self.done += 1
        if row["verified"]:
            self.verified += 1
        else:
            self.failed += 1


class _PlainProgress(_Tally):
    """For logs and CI: one line per finished task, and a status line (done, running, queued, ETA)
    every `interval_s` while tasks run. Plain text only: no markup, no control characters."""

    def __init__(
        self,
        total: int,
        skipped: int,
        stream: Any = None,
        interval_s: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
        skipped_verified: int = 0,
    ):
        super().__init__(total, skipped, clock, skipped_verified)
        self.stream = stream or sys.stdout
        self.interval_s = interval_s
        self._last = self.t0
        if skipped:
            self._print(f"resume: {skipped} task(s) already done, {total - skipped} to run")
        self._stop = threading.Event()
        self._ticker = threading.Thread(target=self._tick, daemon=True, name="eval-progress")
        self._ticker.start()

    def _print(self, line: str) -> None:
        print(line, file=self.stream, flush=True)

    def _tick(self) -> None:
        while not self._stop.wait(min(1.0, self.interval_s)):
            self.tick()

    def tick(self) -> None:
        with self._lock:
            if self.running and self.clock() - self._last >= self.interval_s:
                self._last = self.clock()
                self._print(f"eval: {self.status()}")

    def started(self, task_id: str) -> None:
        with self._lock:
            self._started(task_id)

    def finished(self, row: dict[str, Any]) -> None:
        with self._lock:
            self._finished(row)
            if row["verified"]:
                spd = row.get("speedup_vs_eager")
                what = f"verified, {spd:.2f}x vs eager" if spd else "verified, speedup not measured"
            else:
                what = f"FAILED ({row.get('failure_kind')}): {(row.get('failure') or '')[:160]}"
            self._print(
                f"[{self.done}/{self.total}] {row['task']}: {what} ({row['wall_s']:.1f}s); "
                f"running {len(self.running)}, queued {self.queued}, ETA {_duration(self.eta_s())}"
            )

    def close(self) -> None:
        self._stop.set()
        self._ticker.join()


_STAGE_RE = re.compile(rb"\bstage=([A-Za-z_]+)")


def current_stage(log_path: Path) -> str | None:
    """The stage a running optimize last logged (its structlog lines carry stage=<name>)."""
    try:
        with open(log_path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 8192))
            tail = f.read()
    except OSError:
        return None
    found = _STAGE_RE.findall(tail)
    return found[-1].decode() if found else None


class _RichProgress(_Tally):
    """On a TTY: one live line (bar, done/total, verified/failed, running, queued, ETA, and the
    running tasks with their current stage), refreshed every second."""

    def __init__(
        self,
        total: int,
        skipped: int,
        console: Any = None,
        stage_of: Callable[[str], str | None] | None = None,
        skipped_verified: int = 0,
    ):
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

        super().__init__(total, skipped, skipped_verified=skipped_verified)
        # Fields are plain text (markup=False): a task id such as "[x]" must print as written.
        self.progress = Progress(
            TextColumn("eval", markup=False),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[counts]}", markup=False),
            TextColumn("{task.fields[current]}", markup=False),
            console=console,
        )
        self.progress.start()
        self.stage_of = stage_of
        self._stop = threading.Event()
        self._ticker = threading.Thread(target=self._tick, daemon=True, name="eval-progress")
        self._ticker.start()
        self.bar = self.progress.add_task("eval", total=total, completed=skipped, counts="", current="")
        if skipped:
            self.progress.console.print(f"resume: {skipped} task(s) already done", markup=False)
        self._refresh()

    def _tick(self) -> None:
        while not self._stop.wait(1.0):
            with self._lock:
                self._refresh()

    def _label(self, task_id: str) -> str:
        stage = self.stage_of(task_id) if self.stage_of else None
        return f"{task_id} [{stage}]" if stage else task_id

    def _refresh(self) -> None:
        if not hasattr(self, "bar"):
            return
        shown = [self._label(t) for t in self.running[:3]]
        cur = ", ".join(shown) + (f" +{len(self.running) - 3}" if len(self.running) > 3 else "")
        counts = (
            f"{self.verified} verified, {self.failed} failed, running {len(self.running)}, "
            f"queued {self.queued}, ETA {_duration(self.eta_s())}"
        )
        self.progress.update(self.bar, completed=self.done, counts=counts, current=cur)

    def started(self, task_id: str) -> None:
        with self._lock:
            self._started(task_id)
            self._refresh()

    def finished(self, row: dict[str, Any]) -> None:
        with self._lock:
            self._finished(row)
            self._refresh()

    def close(self) -> None:
        self._stop.set()
        self._ticker.join()
        self.progress.stop()


def _make_progress(
    total: int, skipped: int, stage_of: Callable[[str], str | None], skipped_verified: int = 0
) -> _PlainProgress | _RichProgress:
    if sys.stdout.isatty():
        return _RichProgress(total, skipped, stage_of=stage_of, skipped_verified=skipped_verified)
    return _PlainProgress(total, skipped, skipped_verified=skipped_verified)


# ---------------------------------------------------------------------------------------------
# Devices
# ---------------------------------------------------------------------------------------------


def detect_gpus() -> list[int]:
    """Physical GPU indices visible to this process, without importing torch."""
    vis = os.environ.get("CUDA_VISIBLE_DEVICES")
    if vis is not None:
        vis = vis.strip()
        if not vis or vis == "-1":
            return []
        if all(p.strip().isdigit() for p in vis.split(",")):
            return [int(p) for p in vis.split(",")]
        # UUID/MIG names cannot be re-targeted one per slot by index: make the user choose.
        raise EvalUsageError(f"CUDA_VISIBLE_DEVICES={vis!r} is not a list of indices; pass --gpus")
    smi = shutil.which("nvidia-smi")
    if not smi:
        return []
    try:
        out = subprocess.run(
            [smi, "--query-gpu=index", "--format=csv,noheader"], capture_output=True, text=True, timeout=30
        )
    except (OSError, subprocess.SubprocessError):
        return []
    if out.returncode != 0:
        return []
    return [int(x) for x in out.stdout.split() if x.strip().isdigit()]


def resolve_devices(device: str, gpus: list[int] | None) -> tuple[str, list[int]]:
    if device not in ("auto", "cpu", "cuda"):
        raise EvalUsageError(f"--device must be auto, cpu or cuda, not {device!r}")
    if device == "cpu":
        if gpus:
            raise EvalUsageError("--gpus given with --device cpu")
        return "cpu", []
    found = list(gpus) if gpus else detect_gpus()
    if device == "cuda" and not found:
        raise EvalUsageError("--device cuda but no GPU found (nvidia-smi / CUDA_VISIBLE_DEVICES)")
    if len(set(found)) != len(found):
        raise EvalUsageError(f"--gpus lists a GPU twice: {found}")
    return ("cuda", found) if found else ("cpu", [])


# ---------------------------------------------------------------------------------------------
# Backends
# ---------------------------------------------------------------------------------------------


def _run_local(
    cfg: EvalConfig,
    todo: list[TaskEntry],
    slots: list[int | None],
    on_start: Callable[[str], None],
    on_row: Callable[[dict[str, Any]], None],
    time_box_s: float | None = None,
) -> str:
    """Run tasks on the given slots; returns "completed", "interrupted", or "time_box" when the
    time box ended with tasks left."""
    q: queue.Queue[TaskEntry] = queue.Queue()
    for t in todo:
        q.put(t)
    stop = threading.Event()
    errors: list[BaseException] = []

    boxed_out: list[str] = []

    def worker(gpu: int | None) -> None:
        while not stop.is_set():
            budget = None
            if time_box_s is not None:
                budget = run_budget(cfg, time_box_s)
                if budget is None:
                    boxed_out.append("time box")
                    return
            try:
                t = q.get_nowait()
            except queue.Empty:
                return
            try:
                on_start(t.id)
                row = run_task(cfg, t, gpu, stop.is_set, run_seconds=budget)
                if row is None and not stop.is_set():
                    boxed_out.append(t.id)
                if row is not None and not stop.is_set():
                    on_row(row)
            except BaseException as e:  # an eval bug, not a task failure: stop everything
                errors.append(e)
                stop.set()
                return

    threads = [threading.Thread(target=worker, args=(g,), daemon=True, name=f"eval-slot-{g}") for g in slots]
    for th in threads:
        th.start()
    try:
        # join with a timeout so the main thread stays responsive to SIGINT/SIGTERM.
        while any(th.is_alive() for th in threads):
            for th in threads:
                th.join(timeout=0.2)
    except KeyboardInterrupt:
        stop.set()
        for th in threads:
            th.join()
        return "interrupted"
    if errors:
        raise errors[0]
    return "time_box" if boxed_out else "completed"


def _ray_task(cfg_dict: dict[str, Any], task_dict: dict[str, Any]) -> dict[str, Any] | None:
    """Ray entry point: Ray has already set CUDA_VISIBLE_DEVICES to the task's GPU."""
    import ray

    cfg = EvalConfig(**cfg_dict)
    row = run_task(cfg, TaskEntry(**task_dict), None)
    ids = ray.get_gpu_ids() if cfg.device == "cuda" else []
    if row is not None and ids:
        row["gpu_index"] = int(ids[0]) if str(ids[0]).isdigit() else str(ids[0])
    return row


def _run_ray(
    cfg: EvalConfig,
    todo: list[TaskEntry],
    workers: int,
    ray_address: str | None,
    on_start: Callable[[str], None],
    on_row: Callable[[dict[str, Any]], None],
) -> bool:
    try:
        import ray  # lazy: `egg` must work without Ray installed
    except ImportError as e:
        raise EvalUsageError("--backend ray needs Ray: pip install 'egg-kernels[ray]'") from e
    # Workers import evals.runner by reference, so they need this checkout on their path.
    env_vars = {"PYTHONPATH": os.pathsep.join(p for p in (REPO_ROOT, os.environ.get("PYTHONPATH")) if p)}
    # Every worker's optimize writes its checkpoints into the same store (a shared PostgreSQL
    # database reachable from every node, when one is configured).
    if os.environ.get("EGG_CHECKPOINT_URL"):
        env_vars["EGG_CHECKPOINT_URL"] = os.environ["EGG_CHECKPOINT_URL"]
    runtime_env = {"env_vars": env_vars}
    init_kw: dict[str, Any] = {"runtime_env": runtime_env, "include_dashboard": False, "log_to_driver": False}
    if ray_address:
        ray.init(address=ray_address, **init_kw)
    elif cfg.device == "cuda":
        # A local instance sees only the chosen GPUs; Ray then hands each task one of them.
        prev = os.environ.get("CUDA_VISIBLE_DEVICES")
        os.environ["CUDA_VISIBLE_DEVICES"] = ",".join(str(g) for g in cfg.gpus)
        try:
            ray.init(num_gpus=len(cfg.gpus), num_cpus=max(len(cfg.gpus), os.cpu_count() or 1), **init_kw)
        finally:
            if prev is None:
                os.environ.pop("CUDA_VISIBLE_DEVICES", None)
            else:
                os.environ["CUDA_VISIBLE_DEVICES"] = prev
    else:
        ray.init(num_cpus=max(1, workers), num_gpus=0, **init_kw)
    try:
        opts: dict[str, Any] = {"num_cpus": 1, "max_retries": 0}
        if cfg.device == "cuda":
            # --workers tasks share a GPU; their timing is serialised by the per-GPU lock.
            opts["num_gpus"] = 1.0 / max(1, workers)
        remote = ray.remote(_ray_task).options(**opts)
        cfg_dict = asdict(cfg)
        pending = {}
        for t in todo:
            pending[remote.remote(cfg_dict, asdict(t))] = t
            on_start(t.id)  # queued on the cluster; Ray decides when it actually starts
        try:
            while pending:
                ready, _ = ray.wait(list(pending), num_returns=1, timeout=1.0)
                for ref in ready:
                    t = pending.pop(ref)
                    try:
                        row = ray.get(ref)
                    except Exception as e:  # the Ray task itself died (node lost, OOM kill)
                        row = build_row(
                            cfg, t, None, exit_code=None, wall=0.0, launch_error=f"ray task failed: {e}"
                        )
                    if row is not None:
                        on_row(row)
        except KeyboardInterrupt:
            for ref in pending:
                with contextlib.suppress(Exception):
                    ray.cancel(ref)  # non-forced: run_task's finally kills the subprocess group
            return False
        return True
    finally:
        ray.shutdown()


# ---------------------------------------------------------------------------------------------
# Entry point
# ---------------------------------------------------------------------------------------------


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def _manifest(out: Path, cfg_view: dict[str, Any], resume: bool) -> str:
    """Create or check DIR/eval.json; returns the eval id (stable across resumes)."""
    mpath = out / "eval.json"
    if mpath.exists() and resume:
        m = json.loads(mpath.read_text())
        old = m.get("config", {})
        was = {k: old.get(k, _RESUME_DEFAULTS.get(k)) for k in _RESUME_KEYS}
        diff = [k for k in _RESUME_KEYS if was[k] != cfg_view.get(k)]
        if diff:
            detail = ", ".join(f"{k}: {was[k]!r} -> {cfg_view.get(k)!r}" for k in diff)
            raise EvalUsageError(f"--resume with a different configuration ({detail}); use a new --out")
        m.setdefault("resumed_at", []).append(_now())
        mpath.write_text(json.dumps(m, indent=2))
        return str(m["eval_id"])
    eval_id = f"eval-{_dt.datetime.now(_dt.timezone.utc):%Y%m%d-%H%M%S}-{uuid.uuid4().hex[:6]}"
    mpath.write_text(json.dumps({"eval_id": eval_id, "created_at": _now(), "config": cfg_view}, indent=2))
    return eval_id


def _record_sizes(out: Path, rows: list[dict[str, Any]]) -> None:
    """DIR/eval.json: the sizes each recorded task ran with, and the shapes they follow."""
    mpath = out / "eval.json"
    try:
        m = json.loads(mpath.read_text())
    except (OSError, ValueError):
        return
    m["tasks"] = {
        r["task"]: {"sizes_used": r.get("sizes_used") or {}, "shapes_used": r.get("shapes_used")}
        for r in sorted(rows, key=lambda r: r["task"])
    }
    mpath.write_text(json.dumps(m, indent=2))


def _check_run_settings(model: str, stages: list[str] | None, policy: str) -> None:
    """Reject a bad --model/--stages up front with optimize's own rules; otherwise every task
    would start, fail as bad input and the eval would report N failures for one typo."""
    from graph.context import STAGE_NAMES, Context

    try:
        Context(
            code_model=model, profiler_model=model, debugger_model=model,
            stages=tuple(stages) if stages else STAGE_NAMES, policy=policy,
        ).validate()  # fmt: skip
    except ValueError as e:
        raise EvalUsageError(str(e)) from None


def eval_command(
    paths: list[str],
    *,
    out: str,
    resume: bool = False,
    device: str = "auto",
    workers: int = 1,
    gpus: list[int] | None = None,
    model: str = "expert",
    stages: list[str] | None = None,
    policy: str = "mixed",
    backend: str = "local",
    ray_address: str | None = None,
    html: bool = False,
    extra_args: list[str] | None = None,
    optimize_cmd: list[str] | None = None,
    task_timeout_s: float = DEFAULT_TASK_TIMEOUT_S,
    time_box_s: float | None = None,
    shapes: str = "as-written",
) -> int:
    """Run optimize over every task under `paths`, write DIR/results.jsonl and the report.

    Returns 0 when the eval completed, 2 on bad input, 3 when the time box ended with tasks
    left, 130 when interrupted.
    """
    from evals.metrics import latest_rows
    from evals.report import write_report

    def fail(msg: str) -> int:
        print(f"egg eval: {msg}", file=sys.stderr)
        return 2

    try:
        if backend not in ("local", "ray"):
            raise EvalUsageError(f"--backend must be local or ray, not {backend!r}")
        if policy not in ("strict", "mixed"):
            raise EvalUsageError(f"--policy must be strict or mixed, not {policy!r}")
        if workers < 1:
            raise EvalUsageError("--workers must be >= 1")
        if shapes not in SHAPES_MODES:
            raise EvalUsageError(f"--shapes must be {' or '.join(SHAPES_MODES)}, not {shapes!r}")
        if ray_address and backend != "ray":
            raise EvalUsageError("--ray-address needs --backend ray")
        if time_box_s is not None:
            if backend != "local":
                raise EvalUsageError("--time-box needs --backend local (Ray decides when tasks start)")
            if not time_box_s > 2 * time_box_margin(time_box_s):
                raise EvalUsageError(
                    f"--time-box {time_box_s:g} leaves no time to run a task: it needs more than "
                    f"{2 * time_box_margin(time_box_s):g} s (a margin for the last job, and as much to run)"
                )
        _check_run_settings(model, stages, policy)
        tasks = discover(paths)
        dev, gpu_list = resolve_devices(device, gpus)
    except (TaskDiscoveryError, EvalUsageError) as e:
        return fail(str(e))

    out_dir = Path(out).expanduser().resolve()
    out_dir.mkdir(parents=True, exist_ok=True)
    results = ResultsFile(out_dir / "results.jsonl")
    existing = results.load()
    if existing and not resume:
        return fail(f"{results.path} already has {len(existing)} row(s); pass --resume or use a new --out")
    other = sorted({str(r.get("shapes", "as-written")) for r in existing} - {shapes})
    if other:
        # rows at other sizes would be counted as this eval's results
        return fail(
            f"--resume with --shapes {shapes}, but {results.path} has rows run with --shapes "
            f"{', '.join(other)}; use a new --out"
        )
    cfg_view = {
        "model": model, "policy": policy, "stages": list(stages) if stages else None, "device": dev,
        "extra_args": list(extra_args or []), "backend": backend, "gpus": gpu_list, "workers": workers,
        "shapes": shapes,
    }  # fmt: skip
    try:
        eval_id = _manifest(out_dir, cfg_view, resume)
    except EvalUsageError as e:
        return fail(str(e))
    cfg = EvalConfig(
        out=str(out_dir), device=dev, model=model, policy=policy, stages=list(stages) if stages else None,
        extra_args=list(extra_args or []),
        optimize_cmd=list(optimize_cmd) if optimize_cmd else [sys.executable, "-m", "graph.cli", "optimize"],
        backend=backend, eval_id=eval_id, task_timeout_s=task_timeout_s, gpus=gpu_list,
        deadline=None if time_box_s is None else time.time() + time_box_s, shapes=shapes,
    )  # fmt: skip
    done_ids = {r["task"] for r in existing}
    todo = [t for t in tasks if t.id not in done_ids]
    task_ids = {t.id for t in tasks}

    # Stage shown per running task; with Ray the log may be on another node (then no stage).
    progress = _make_progress(
        len(tasks),
        len(tasks) - len(todo),
        lambda tid: current_stage(out_dir / "tasks" / tid / "optimize.log"),
        skipped_verified=len({r["task"] for r in existing if r["task"] in task_ids and r.get("verified")}),
    )

    def on_row(row: dict[str, Any]) -> None:
        results.append(row)  # durable before it is shown as done
        progress.finished(row)

    # SIGTERM (e.g. a job scheduler) must stop tasks as cleanly as Ctrl-C does.
    prev_term = None
    if threading.current_thread() is threading.main_thread():

        def _on_term(signum: int, frame: Any) -> None:
            raise KeyboardInterrupt

        prev_term = signal.signal(signal.SIGTERM, _on_term)
    outcome = "interrupted"
    try:
        if not todo:
            outcome = "completed"
        elif backend == "ray":
            ok = _run_ray(cfg, todo, workers, ray_address, progress.started, on_row)
            outcome = "completed" if ok else "interrupted"
        else:
            slots: list[int | None] = (
                [g for g in gpu_list for _ in range(workers)] if dev == "cuda" else [None] * workers
            )
            outcome = _run_local(cfg, todo, slots, progress.started, on_row, time_box_s)
    except KeyboardInterrupt:
        outcome = "interrupted"
    except EvalUsageError as e:
        progress.close()
        return fail(str(e))
    finally:
        progress.close()
        if prev_term is not None:
            signal.signal(signal.SIGTERM, prev_term)

    completed = outcome == "completed"
    rows = [r for r in latest_rows(results.load()) if r["task"] in task_ids]
    _record_sizes(out_dir, rows)
    written = write_report(out_dir, rows, html=html, complete=completed, total_tasks=len(tasks))
    if not completed:
        why = f"the time box of {time_box_s:g} s ended" if outcome == "time_box" else "interrupted"
        print(f"egg eval: {why}; {len(rows)}/{len(tasks)} task(s) recorded in {results.path}; "
              "rerun with --resume to finish", file=sys.stderr)  # fmt: skip
        return 3 if outcome == "time_box" else 130
    print(f"egg eval: {len(rows)} task(s); report: {written['report_md']}")
    return 0
