"""What the graph's tool nodes call: describe, compile, check, time, benchmark, profile.

Every method except `profile` runs one sandboxed worker job (tools/sandbox.py). A kernel's
failure is a value (CompileReport.ok=False, CheckReport.accepted=False, TimingReport.measured=
False); only infrastructure faults raise ToolInfraError, and an unusable task raises BadTaskError.
This module never imports torch or triton.
"""

from __future__ import annotations

import hashlib
import os
import threading
import time
from dataclasses import dataclass
from typing import Any

import structlog

from graph.records import (
    CheckReport,
    CompileReport,
    Environment,
    KernelCompileInfo,
    ProfileReport,
    TaskDescription,
    TaskSpec,
    TimingReport,
)
from graph.reducers import MIN_NOISE, beats  # noqa: F401  (beats re-exported: the one acceptance rule)
from tools.errors import BadTaskError, ToolInfraError
from tools.protocol import Job, JobResult
from tools.sandbox import run_job
from tools.worker.gpumem import SLOTS  # the GPU's memory shares: an OOM's last try asks for all

_log = structlog.get_logger("egg.tools")

# Peak numbers by GPU name substring. A GPU not listed has no peaks ("peak unknown"): another
# GPU's numbers would give it a made-up roofline fraction.
PEAKS: dict[str, dict[str, float]] = {
    "H200": {"gbps": 4300.0, "tflops_fp32": 67.0, "tflops_tf32": 495.0, "tflops_bf16": 790.0},
    "H100": {"gbps": 3000.0, "tflops_fp32": 60.0, "tflops_tf32": 400.0, "tflops_bf16": 700.0},
    "A100": {"gbps": 1800.0, "tflops_fp32": 19.5, "tflops_tf32": 156.0, "tflops_bf16": 312.0},
}
# Below this many microseconds a kernel is dominated by launch latency, not by its work.
LAUNCH_BOUND_US = 15.0


def _fields(model: type, payload: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in payload.items() if k in model.model_fields}


@dataclass(frozen=True)
class Evaluation:
    """What evaluating one candidate found: its compile report, then (when it compiled) its check,
    then (on a GPU, when it was verified) its timing."""

    compile: CompileReport
    check: CheckReport | None = None
    timing: TimingReport | None = None
    # set when the candidate was timed first and, not beating the incumbent, never checked
    screened: str | None = None

    @property
    def verified(self) -> bool:
        return self.compile.ok and self.check is not None and self.check.accepted


class Toolbox:
    def __init__(self, *, timeout_s: float = 300.0, python: str | None = None, egg_home: str | None = None):
        self.timeout_s = timeout_s
        self.python = python
        # The EGG home (as graph.context resolves it): hidden from every candidate, and where the
        # judges cache eager/torch.compile baselines per task, sizes, GPU and versions.
        self.egg_home = os.path.abspath(egg_home or os.environ.get("EGG_HOME") or ".egg")
        self._lock = threading.Lock()
        # Per task (source + sizes): the checker's peak GPU memory (bytes, and shares of the GPU)
        # from its describe job, passed to every later GPU job on the task.
        self._peak: dict[str, dict[str, float | int]] = {}
        # Per task: set when its baseline prefetch (prefetch_baselines) has ended.
        self._prefetch: dict[str, threading.Event] = {}

    def _run(self, job: Job, timeout_s: float | None = None) -> JobResult:
        """Run a job; faults of the machine are retried, never reported as the task's or the
        candidate's. `oom` (the GPU was full: other jobs held it) is retried with more memory
        shares, the last try with all of them, where the candidate is told the truth if it still
        does not fit; a judge that died (it never runs candidate code) or could not start is retried as is.

        An OOM retry first asks for twice its shares (at least what the task's jobs measured), and
        only the last try for the whole GPU: a retry with every share waits until every other job
        has drained, and every job queued after it waits as well (on the H200 three such retries
        of one task stalled eight tasks for 150-190 s each). The doubled shares are kept for the
        task's later jobs, whose shape estimate just proved too small or too close to the edge."""
        last: JobResult | None = None
        for attempt in range(INFRA_RETRIES + 1):
            if attempt:
                time.sleep(min(8.0, 0.5 * 2**attempt))
            try:
                res = run_job(job, timeout_s=timeout_s or self.timeout_s, python=self.python)
            except OSError as e:
                last = JobResult(kind=job.kind, ok=False, error_kind="infra", error=f"could not start: {e}")
                continue
            fault = infra_fault(job, res)
            if fault is None:
                return res
            last = res
            _log.warning("tool.infra_fault", kind=job.kind, fault=fault, attempt=attempt + 1, error=res.error)
            if fault == "oom" and job.device == "cuda":
                last_try = attempt + 1 == INFRA_RETRIES
                opts = {**job.options, "memory_units": self._oom_retry_units(job, last_try)}
                if last_try:
                    opts["last_attempt"] = True
                job = job.model_copy(update={"options": opts})
        assert last is not None
        raise ToolInfraError(
            f"{job.kind} job failed {INFRA_RETRIES + 1} times for reasons of the machine "
            f"({last.error_kind}): {last.error}"
        )

    def _oom_retry_units(self, job: Job, last_try: bool) -> int:
        """Shares for the retry of a job that ran out of GPU memory (see _run)."""
        held = job.options.get("memory_units")
        if last_try or not isinstance(held, int) or held <= 0:
            # a job that had no shares from the toolbox sized itself from shapes in the worker
            # (describe, a lone check): the toolbox cannot tell how much more it needs
            return SLOTS
        with self._lock:
            entry = self._peak.setdefault(self._key(job.task_source, job.size_overrides), {})
            # a screened job held the task's screening shares; any other, its check's
            slot = "screen_units" if entry.get("screen_units") == held else "memory_units"
            known = entry.get(slot)
            units = min(SLOTS, max(2 * held, int(known) if known else 0, OOM_RETRY_MIN_UNITS))
            # this task's later jobs of the same kind ask for as much
            entry[slot] = units
        return units

    @staticmethod
    def _task_key(task: TaskSpec) -> str:
        return Toolbox._key(task.source, task.size_overrides)

    @staticmethod
    def _key(source: str, size_overrides: dict) -> str:
        return hashlib.sha256(f"{source}\0{sorted(size_overrides.items())}".encode()).hexdigest()

    def _job(self, kind: str, task: TaskSpec, **kw: Any) -> Job:
        known = self._peak.get(self._task_key(task)) if task.device == "cuda" else None
        if known and kind != "describe":
            kw["options"] = {**kw.get("options", {}), **known}
        kw["options"] = {
            "egg_home": self.egg_home,
            "baseline_cache": os.path.join(self.egg_home, "baselines"),
            # the runner must give up (and be blamed) before the job's own limit kills the judge
            "runner_timeout_s": max(10.0, self.timeout_s - 20.0),
            **kw.get("options", {}),
        }
        return Job(
            kind=kind,
            task_path=task.path,
            task_source=task.source,
            device=task.device,
            size_overrides=dict(task.size_overrides),
            **kw,
        )

    def describe(self, task: TaskSpec, *, shrink: bool) -> TaskDescription:
        opts: dict[str, Any] = {"shrink": shrink, "name": task.name}
        if task.shapes != "as-written":
            opts["shapes"] = task.shapes  # chosen in the worker: the task's code runs only there
        res = self._run(self._job("describe", task, options=opts))
        if res.error_kind == "bad_task":
            raise BadTaskError(res.error or "bad task")
        if not res.ok:
            if res.error_kind in ("timeout", "crash"):
                raise BadTaskError(f"loading the task failed ({res.error_kind}): {res.error}")
            raise ToolInfraError(
                f"describe failed ({res.error_kind}): {res.error}\n{res.stderr_tail[-2000:]}"
            )
        desc = TaskDescription(**_fields(TaskDescription, res.payload))
        if desc.check_peak_bytes is not None and not shrink:
            known: dict[str, float | int] = {"peak_bytes": desc.check_peak_bytes}
            if desc.check_memory_units is not None:
                known["memory_units"] = desc.check_memory_units
            if desc.screen_memory_units is not None:
                known["screen_units"] = desc.screen_memory_units
            # keyed by the sizes the run goes on with (ragged shapes change them here)
            ran = task.model_copy(update={"size_overrides": desc.size_overrides()})
            with self._lock:
                self._peak[self._task_key(ran)] = known
        return desc

    def compile(
        self, task: TaskSpec, source: str, *, policy: str = "mixed", tolerance: float | None = None
    ) -> CompileReport:
        res = self._run(self._job("compile", task, candidate_source=source))
        return self._compile_report(res)

    def evaluate(
        self,
        task: TaskSpec,
        source: str,
        *,
        policy: str = "mixed",
        tolerance: float | None = None,
        screen: TimingReport | None = None,
    ) -> Evaluation:
        """Compile, check and (on a GPU, when verified) time a candidate in one `evaluate` job: one
        judge process, one runner, the task loaded once. On CPU nothing is timed.

        `screen`: the incumbent's timing. On a GPU the candidate is then timed before its check and
        checked only when it beats the incumbent beyond noise (tools/worker/evaluate.py); one that
        does not comes back `screened`, unchecked."""
        opts: dict[str, Any] = {} if tolerance is None else {"tolerance": float(tolerance)}
        if screen is not None and screen.measured and screen.candidate_ms and task.device == "cuda":
            opts["screen"] = {
                "incumbent_ms": float(screen.candidate_ms),
                "noise": max(float(screen.noise or 0.0), MIN_NOISE),
            }
        res = self._run(self._job("evaluate", task, candidate_source=source, policy=policy, options=opts))
        if not res.ok:
            return Evaluation(self._compile_report(res))
        parts = dict(res.payload)
        phases = dict(parts.pop("phases", {}) or {})
        gpu = dict(parts.pop("gpu", {}) or {})
        # Admission by what the task's jobs really used (with a margin), once one has run: the
        # shape estimates are deliberately pessimistic. A later job that needs more runs out of
        # memory and is retried with more shares (see _run), never blamed. A job that ran a
        # check measures the check's shares; a screened one, only what screening needs.
        for measured, key in (("measured_units", "memory_units"), ("measured_screen_units", "screen_units")):
            if isinstance(gpu.get(measured), int):
                with self._lock:
                    self._peak.setdefault(self._task_key(task), {})[key] = gpu[measured]
        # Process start, interpreter and result hand-back: what the worker itself did not time
        # (its top-level phases; "step.sub" entries are parts of their step).
        phases["startup_and_exit"] = round(res.seconds - sum(v for k, v in phases.items() if "." not in k), 3)
        _log.info("tool.evaluate", task=task.name, wall_s=round(res.seconds, 3), **phases, **gpu)
        comp = self._compile_report(res.model_copy(update={"kind": "compile", "payload": parts["compile"]}))
        check = (
            self._check_report(
                res.model_copy(update={"kind": "check", "payload": parts["check"]}), task, policy
            )
            if "check" in parts
            else None
        )
        timing = (
            self._timing_report(res.model_copy(update={"kind": "time", "payload": parts["time"]}))
            if "time" in parts
            else None
        )
        screened = parts.get("screened")
        return Evaluation(comp, check, timing, screened if isinstance(screened, str) else None)

    def _compile_report(self, res: JobResult) -> CompileReport:
        if not res.ok:
            return self._bad_task_or(
                res,
                lambda: CompileReport(
                    ok=False,
                    error_kind="timeout" if res.error_kind == "timeout" else "crash",
                    error=f"{res.error} {_tail(res)}".strip(),
                    seconds=res.seconds,
                ),
            )
        p = dict(res.payload)
        p["kernels"] = [KernelCompileInfo(**k) for k in p.get("kernels", [])]
        return CompileReport(**_fields(CompileReport, p))

    def check(
        self, task: TaskSpec, source: str, *, policy: str = "mixed", tolerance: float | None = None
    ) -> CheckReport:
        opts: dict[str, Any] = {}
        if tolerance is not None:
            opts["tolerance"] = float(tolerance)
        res = self._run(self._job("check", task, candidate_source=source, policy=policy, options=opts))
        return self._check_report(res, task, policy)

    def _check_report(self, res: JobResult, task: TaskSpec, policy: str) -> CheckReport:
        if not res.ok:
            rule = {"timeout": "sandbox.timeout", "internal": "sandbox.internal"}.get(
                res.error_kind or "", "sandbox.crash"
            )
            return self._bad_task_or(
                res,
                lambda: CheckReport(
                    accepted=False,
                    reasons=[f"{rule}: {res.error} {_tail(res)}".strip()],
                    policy=policy,
                    device=task.device,
                    seconds=res.seconds,
                ),
            )
        return CheckReport(**_fields(CheckReport, res.payload))

    def _timing(self, kind: str, task: TaskSpec, source: str | None, options: dict[str, Any]) -> TimingReport:
        if task.device != "cuda":
            return TimingReport(measured=False, reason="timing needs a CUDA GPU; not measured on CPU")
        return self._timing_report(self._run(self._job(kind, task, candidate_source=source, options=options)))

    def _timing_report(self, res: JobResult) -> TimingReport:
        if not res.ok:
            return self._bad_task_or(
                res,
                lambda: TimingReport(
                    measured=False,
                    reason=f"timing.{res.error_kind}: {res.error} {_tail(res)}".strip(),
                    seconds=res.seconds,
                ),
            )
        p = dict(res.payload)
        if p.get("env"):
            p["env"] = Environment(**_fields(Environment, p["env"]))
        return TimingReport(**_fields(TimingReport, p))

    def time(
        self, task: TaskSpec, source: str, *, policy: str = "mixed", tolerance: float | None = None
    ) -> TimingReport:
        return self._timing("time", task, source, {})

    def prefetch_baselines(self, task: TaskSpec) -> None:
        """On a GPU, start timing eager and torch.compile for `task` now, in the background: the
        final benchmark then finds torch.compile's median cached (its Inductor compile, 10-45 s
        of CPU work on the H200, off the run's critical path) and measures eager and the
        candidate in its own job, as always. The figures are keyed by task source, sizes, GPU and
        versions (tools/worker/timing.py BaselineCache), and the final report names them cached.
        A prefetch that fails costs nothing: the final benchmark measures torch.compile itself."""
        if task.device != "cuda":
            return
        key = self._task_key(task)
        with self._lock:
            if key in self._prefetch:
                return
            done = threading.Event()
            self._prefetch[key] = done

        def run() -> None:
            t0 = time.monotonic()
            try:
                # no candidate: the job times the reference only (eager, then torch.compile)
                job = self._job("benchmark", task, candidate_source=None, options={"cudagraph": False})
                screen = job.options.get("screen_units")
                if screen is not None:  # no float64 reference, no candidate: the timing's shares
                    job = job.model_copy(update={"options": {**job.options, "memory_units": screen}})
                rep = self._timing_report(self._run(job))
                _log.info(
                    "tool.prefetch_baselines",
                    task=task.name,
                    measured=rep.measured,
                    compile_ms=rep.compile_ms,
                    reason=rep.reason,
                    wall_s=round(time.monotonic() - t0, 3),
                )
            except Exception as e:  # noqa: BLE001  (an optimisation: the final benchmark measures it)
                _log.warning("tool.prefetch_baselines_failed", task=task.name, error=str(e)[:300])
            finally:
                done.set()

        threading.Thread(target=run, name=f"egg-baselines-{task.name}", daemon=True).start()

    def benchmark(self, task: TaskSpec, source: str) -> TimingReport:
        # A prefetch of this task's baselines still running: wait for it rather than compile
        # torch.compile twice at once (bounded: past the job limit the benchmark goes on alone).
        pending = self._prefetch.get(self._task_key(task))
        if pending is not None and not pending.wait(self.timeout_s):
            _log.warning("tool.prefetch_baselines_pending", task=task.name, waited_s=self.timeout_s)
        return self._timing("benchmark", task, source, {"cudagraph": True})

    @staticmethod
    def _bad_task_or(res: JobResult, make):
        if res.error_kind == "bad_task":
            raise BadTaskError(res.error or "bad task")
        return make()

    def profile(
        self, desc: TaskDescription, timing: TimingReport | None, compile: CompileReport | None
    ) -> ProfileReport:
        return profile_report(desc, timing, compile)


INFRA_RETRIES = 2
# An OOM's first retry asks for at least this many of gpumem.SLOTS shares (about 8 GiB on an H200).
OOM_RETRY_MIN_UNITS = 4


def infra_fault(job: Job, res: JobResult) -> str | None:
    """Whether a failed job failed for the machine's reasons (retry), not the task's or candidate's."""
    if res.ok:
        return None
    if res.error_kind in ("oom", "infra"):
        return res.error_kind
    if res.error_kind == "crash" and job.candidate_source is not None and "signal" in (res.error or ""):
        # The judge itself was killed (it runs no candidate code; the runner dying is reported
        # inside a normal result): the OOM killer, a dead worker server.
        return "dead_worker"
    return None


def _tail(res: JobResult) -> str:
    lines = [ln for ln in (res.stderr_tail or "").strip().splitlines() if ln.strip()]
    return f"[stderr: {lines[-1][:300]}]" if lines else ""


def peaks_for(gpu: str | None) -> dict[str, float] | None:
    for key, peaks in PEAKS.items():
        if gpu and key in gpu:
            return peaks
    return None


def profile_report(
    desc: TaskDescription, timing: TimingReport | None, compile: CompileReport | None
) -> ProfileReport:
    flops, nbytes = desc.flops, desc.bytes_moved
    evidence: list[str] = []
    if compile is not None and compile.ok:
        for k in compile.kernels:
            evidence.append(
                f"kernel {k.name}: {k.num_warps} warps, {k.num_stages} stages, "
                f"{k.registers} regs, {k.spills} B spills, {k.shared_bytes} B shared"
            )
            if k.spills:
                evidence.append(f"kernel {k.name} spills {k.spills} bytes: reduce tile size or live values")
    if timing is None or not timing.measured or not timing.candidate_ms:
        why = timing.reason if timing is not None and timing.reason else "no timing"
        return ProfileReport(
            flops=flops,
            bytes_moved=nbytes,
            evidence=evidence + [f"not measured: {why}"],
            suggestion=None,
            ncu_skipped="ncu not run (no GPU timing)",
        )
    gpu = timing.env.gpu if timing.env else None
    peaks = peaks_for(gpu)
    sec = timing.candidate_ms / 1e3
    gbps = nbytes / sec / 1e9 if nbytes else None
    tflops = flops / sec / 1e12 if flops else None
    if peaks is None:
        # The achieved rates are facts, but against no known peak: reported as text, and no
        # fraction or bottleneck is derived from them.
        rates = [f"{gbps:.0f} GB/s" if gbps else None, f"{tflops:.2f} TFLOP/s" if tflops else None]
        return ProfileReport(
            flops=flops,
            bytes_moved=nbytes,
            evidence=evidence
            + [f"peak unknown for GPU {gpu!r}: no roofline fraction (tools/toolbox.py PEAKS)"]
            + [f"achieved {', '.join(r for r in rates if r)}" if any(rates) else "no work estimate"],
            bottleneck="latency" if timing.candidate_ms * 1e3 < LAUNCH_BOUND_US else "unknown",
            ncu_skipped="ncu not run: needs explicit permission and an ncu binary on the GPU host",
        )
    dt = desc.outputs[0].dtype if desc.outputs else "float32"
    # fp32 at full accuracy is fastest as 3xTF32 on tensor cores (three TF32 products per fp32 one),
    # so that, not the FMA-pipe peak, is the compute roof an fp32 kernel can reach (H200: ~165 TFLOP/s).
    peak_tf = (
        peaks["tflops_bf16"]
        if dt in ("float16", "bfloat16")
        else max(peaks["tflops_fp32"], peaks["tflops_tf32"] / 3.0)
    )
    mem_frac = gbps / peaks["gbps"] if gbps else 0.0
    comp_frac = tflops / peak_tf if tflops else 0.0
    t_mem_us = (nbytes or 0) / (peaks["gbps"] * 1e9) * 1e6
    t_comp_us = (flops or 0) / (peak_tf * 1e12) * 1e6
    ideal_us = max(t_mem_us, t_comp_us)
    us = timing.candidate_ms * 1e3
    evidence.insert(
        0,
        f"candidate {us:.1f} us; ideal {ideal_us:.1f} us "
        f"(memory {t_mem_us:.1f} us at {peaks['gbps']:.0f} GB/s, compute {t_comp_us:.1f} us at "
        f"{peak_tf:.0f} TFLOP/s)",
    )
    if gbps is not None:
        evidence.append(f"achieved {gbps:.0f} GB/s ({mem_frac:.0%} of peak bandwidth)")
    if tflops is not None:
        evidence.append(f"achieved {tflops:.2f} TFLOP/s ({comp_frac:.0%} of peak)")
    if timing.candidate_launches is not None:
        evidence.append(f"{timing.candidate_launches} launch(es) of the candidate's kernels per forward")
    if timing.noise is not None:
        evidence.append(f"timing noise (p80-p20)/median {timing.noise:.1%}")
    roofline = ideal_us / us if us > 0 else None
    if us < LAUNCH_BOUND_US or (ideal_us < 0.2 * us and (timing.candidate_launches or 1) > 1 and us < 50):
        bottleneck = "latency"
        suggestion = (
            "latency/launch bound: fuse kernels to cut launches, use fewer larger programs, or "
            "CUDA graphs; the work itself is tiny"
        )
    elif t_mem_us >= t_comp_us:
        bottleneck = "memory"
        suggestion = (
            "memory bound: fuse passes so each byte is read once, vectorize/coalesce loads, "
            "use larger blocks per program"
            if mem_frac < 0.6
            else "memory bound and near peak bandwidth: only reducing bytes moved helps further"
        )
    else:
        bottleneck = "compute"
        suggestion = (
            "compute bound: use tensor cores (tl.dot) with larger tiles, more stages for "
            "pipelining, and check register spills"
            if comp_frac < 0.6
            else "compute bound near peak: little headroom left"
        )
    return ProfileReport(
        flops=flops,
        bytes_moved=nbytes,
        achieved_gbps=gbps,
        achieved_tflops=tflops,
        roofline_fraction=roofline,
        bottleneck=bottleneck,
        evidence=evidence,
        suggestion=suggestion,
        ncu_skipped="ncu not run: needs explicit permission and an ncu binary on the GPU host",
    )
