"""Test doubles: a scripted toolbox and scripted role models (no subprocess, no torch, no network).

Candidate sources are tiny scripts of directives the fake toolbox reads, e.g.
`# ms=0.50` (timed median), `# compile_error`, `# mismatch`.
"""

from __future__ import annotations

import contextlib
import re
import threading
from typing import Any

from graph.records import (
    BestKernel,
    CheckReport,
    CompileReport,
    Diagnosis,
    ProfilerAdvice,
    ProfileReport,
    RoleUsage,
    TaskDescription,
    TaskSpec,
    TensorInfo,
    TimingReport,
)
from nodes.models import CodeReply, CodeRequest, DebuggerRequest, ModelSet, ProfilerRequest


class BadTask(Exception):
    pass


class FakeToolbox:
    def __init__(self, device: str = "cuda", eager_ms: float = 1.0):
        self.device = device
        self.eager_ms = eager_ms
        self.calls: list[tuple[str, str]] = []
        self.screens: list[float | None] = []  # the incumbent medians `evaluate` screened against
        self.prefetched: list[TaskSpec] = []  # tasks whose baselines were prefetched
        self._lock = threading.Lock()

    def _log(self, kind: str, source: str) -> None:
        with self._lock:
            self.calls.append((kind, source))

    def describe(self, task: TaskSpec, *, shrink: bool) -> TaskDescription:
        from tools.errors import BadTaskError

        if "class Model" not in task.source:
            raise BadTaskError("task defines no `class Model`")
        return TaskDescription(
            name=task.name,
            source=task.source,
            inputs=[TensorInfo(shape=[8, 8], dtype="float32")],
            outputs=[TensorInfo(shape=[8, 8], dtype="float32")],
            constants={"N": 8},
            sizes_used={"N": 8},
            flops=64.0,
            bytes_moved=512.0,
            device=task.device,
        )

    def compile(self, task: TaskSpec, source: str, **kw: Any) -> CompileReport:
        self._log("compile", source)
        if "compile_error" in source:
            return CompileReport(ok=False, error="triton: bad", error_kind="triton", error_line=3)
        return CompileReport(ok=True)

    def check(
        self, task: TaskSpec, source: str, *, policy: str = "mixed", tolerance: Any = None
    ) -> CheckReport:
        self._log("check", source)
        if "mismatch" in source:
            return CheckReport(
                accepted=False, reasons=["mismatch: trial 0 max_abs_err 1.0 > tol 1e-4"], trials=1
            )
        return CheckReport(accepted=True, trials=5, max_abs_err=1e-7, max_rel_err=1e-7, policy=policy)

    def _timing(self, source: str, with_compile: bool) -> TimingReport:
        if self.device != "cuda":
            return TimingReport(measured=False, reason="timing needs a CUDA GPU; not measured on CPU")
        m = re.search(r"ms=([0-9.]+)", source)
        ms = float(m.group(1)) if m else 1.0
        return TimingReport(
            measured=True,
            candidate_ms=ms,
            candidate_p20_ms=ms,
            candidate_p80_ms=ms,
            eager_ms=self.eager_ms,
            compile_ms=0.8 * self.eager_ms if with_compile else None,
            noise=0.005,
        )

    def evaluate(
        self,
        task: TaskSpec,
        source: str,
        *,
        policy: str = "mixed",
        tolerance: Any = None,
        screen: TimingReport | None = None,
    ):
        """The GPU path's one job, as the real toolbox composes it: compile, check if it compiled,
        time if it was verified (each logged as its own call, so tests see what ran). With
        `screen` (the incumbent's timing) it times first and checks only a contender, by the
        worker's own rule (tools/worker/evaluate.py screened_out)."""
        from graph.reducers import MIN_NOISE
        from tools.toolbox import Evaluation
        from tools.worker.evaluate import screened_out

        comp = self.compile(task, source)
        if not comp.ok:
            return Evaluation(comp)
        timed = None
        if screen is not None and self.device == "cuda":
            self.screens.append(screen.candidate_ms)
            timed = self.time(task, source)
            bar = {"incumbent_ms": screen.candidate_ms, "noise": max(screen.noise or 0.0, MIN_NOISE)}
            why = screened_out(timed.model_dump(), bar)
            if why is not None:
                return Evaluation(comp, None, timed, why)
        check = self.check(task, source, policy=policy, tolerance=tolerance)
        if not check.accepted:
            return Evaluation(comp, check)
        return Evaluation(comp, check, timed or self.time(task, source))

    def time(self, task: TaskSpec, source: str, **kw: Any) -> TimingReport:
        self._log("time", source)
        return self._timing(source, False)

    def prefetch_baselines(self, task: TaskSpec) -> None:
        self.prefetched.append(task)

    def benchmark(self, task: TaskSpec, source: str) -> TimingReport:
        self._log("benchmark", source)
        return self._timing(source, True)

    def profile(self, desc, timing, compile) -> ProfileReport:
        return ProfileReport(
            bottleneck="memory" if timing and timing.measured else "unknown", evidence=["fake"]
        )


class ScriptedCode:
    """Seeds and stage steps from a script: {(stage, mode): [source, ...]} consumed by iteration."""

    name = "scripted"

    def __init__(self, script: dict[tuple[str, str], list[str | None]], unsupported: str | None = None):
        self.script = script
        self.unsupported = unsupported
        self.requests: list[CodeRequest] = []
        self._lock = threading.Lock()

    def write(self, req: CodeRequest) -> CodeReply:
        with self._lock:
            self.requests.append(req)
        if self.unsupported:
            return CodeReply(source=None, unsupported=self.unsupported)
        seq = self.script.get((req.stage.name, req.mode), [])
        i = req.seed_index if req.mode == "seed" else req.iteration
        if req.mode == "refine" or req.mode == "tune":
            # a parallel tuning round asks for variants 0..n-1 at once; later steps go on from there
            i = sum(1 for r in req.recent if r.mode == req.mode)
            if req.mode == "tune":
                i += req.seed_index
        if req.mode == "fix":
            i = 0
        if i >= len(seq) or seq[i] is None:
            return CodeReply(source=None)
        src = seq[i]
        params = dict(re.findall(r"(\w+)=(\w+)", src))
        return CodeReply(
            source=src,
            origin=f"{req.mode}:{i}",
            algorithm=f"alg{i}",
            family="fake",
            params=params,
            usage=RoleUsage(calls=1, input_tokens=100, output_tokens=20),
        )


class FakeProfiler:
    name = "fake"

    def advise(self, req: ProfilerRequest):
        return ProfilerAdvice(bottleneck=req.profile.bottleneck, evidence=["fake"], plan="go"), RoleUsage(
            calls=1
        )


class FakeDebugger:
    name = "fake"

    def diagnose(self, req: DebuggerRequest):
        return Diagnosis(rule="x", diagnosis="broken", fix_plan="fix it"), RoleUsage(calls=1)


def scripted_models(code: ScriptedCode) -> ModelSet:
    return ModelSet(code=code, profiler=FakeProfiler(), debugger=FakeDebugger())


def best_from_reply(reply: CodeReply, stage: str = "algorithm", **params: Any) -> BestKernel:
    """A verified best kernel made of a code reply (its params updated by `params`), as a tuning
    or repair request receives it."""
    cand = reply.candidate("c", stage, params={**reply.params, **params})
    return BestKernel(candidate=cand, check=CheckReport(accepted=True))


@contextlib.contextmanager
def gpu_lock_held_elsewhere(exclusive: bool):
    """Another job holding the per-GPU lock (a thread of this process, under the lock file the
    test set): held when the block starts, released when the block sets the yielded event,
    joined when the block ends."""
    from tools.worker.gpulock import gpu_lock

    held, release = threading.Event(), threading.Event()

    def holder() -> None:
        with gpu_lock(exclusive=exclusive):
            held.set()
            release.wait(10)

    th = threading.Thread(target=holder)
    th.start()
    held.wait(10)
    try:
        yield release
    finally:
        release.set()
        th.join(10)
