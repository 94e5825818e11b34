"""The `check` job: the correctness protocol and the runtime integrity rules, decided here.

This process (the judge) never imports the candidate. The candidate runs in a confined runner
(tools/worker/runner.py) that gets only seeds and answers with raw output bytes; the reference,
its float64 twin, the inputs (drawn under fresh private seeds), every comparison and the verdict
stay here. Launch counts and the PyTorch ops the runner saw are its claims (policy rules).

Rule names (stable; each reason is "<rule>: <message>"):
  static.*            AST rules (tools/worker/static_rules.py)
  load.error          the candidate failed to import or construct
  weights.mismatch    ModelNew's parameters cannot be matched to the reference's
  run.error           ModelNew.forward raised
  output.count/type/shape/dtype
  nan_parity          NaN/Inf positions differ from the float64 reference
  mismatch            values outside the tolerance
  inputs.mutated      the candidate changed its inputs
  runtime.no_launch   ModelNew.forward launched none of the candidate's own Triton kernels
  runtime.stale       outputs for fresh inputs between repeated calls are wrong (caching)
  policy.torch_compute / policy.single_op   PyTorch compute the policy does not allow
"""

from __future__ import annotations

import contextlib
import copy
import math
import secrets
import time
from collections.abc import Iterator
from typing import Any

import torch

from tools.sizes import second_shape_options
from tools.worker import channel, gpumem
from tools.worker.common import (
    DELEGABLE,
    BadTask,
    InfraFault,
    LoadedTask,
    OpRecorder,
    as_outputs,
    categorize,
    chunk_ranges,
    clone_inputs,
    dtype_name,
    float64_twin_mode,
    int_constants,
    is_oom,
    load_task,
    one_line,
    same_values,
    to_device,
    upcast_copies,
)
from tools.worker.describe import degenerate_flags
from tools.worker.gpulock import gpu_lock
from tools.worker.judge import RunnerFailure, RunnerProcess
from tools.worker.laps import Laps
from tools.worker.runner import scaled
from tools.worker.static_rules import static_findings

# Elements per comparison chunk (float64 temporaries of about 16 x 128 MiB at most).
COMPARE_CHUNK = 1 << 24

# (atol, rtol) by output dtype; the candidate is also allowed REF_ERR_MULT x the reference's own error.
TOLERANCES = {
    "float64": (1e-7, 1e-7),
    "float32": (1e-4, 1e-4),
    "float16": (1e-2, 1e-2),
    "bfloat16": (1e-2, 1e-2),
}
REF_ERR_MULT = 4.0


class Rejected(Exception):
    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def tolerance_for(dtype: torch.dtype, tolerance: float | None) -> tuple[float, float, bool]:
    atol, rtol = TOLERANCES.get(dtype_name(dtype), (1e-4, 1e-4))
    if tolerance is not None:
        widened = tolerance > atol
        return float(tolerance), float(tolerance), widened
    return atol, rtol, False


def compare_stats() -> dict[str, Any]:
    """The running figures `compare` keeps over a check's outputs and trials."""
    return {
        "max_abs": 0.0,
        "max_rel": 0.0,
        "ref_err": 0.0,
        "widened": False,
        "notes": [],
        "atol": None,
        "rtol": None,
    }


def compare(
    trial: str,
    i: int,
    c: Any,
    r64: torch.Tensor,
    rn: torch.Tensor,
    tolerance: float | None,
    stats: dict[str, Any],
) -> None:
    if type(c) is not torch.Tensor:
        raise Rejected(
            f"output.type: trial {trial} output {i} is {type(c).__module__}.{type(c).__name__}, "
            "expected exactly torch.Tensor"
        )
    if tuple(c.shape) != tuple(rn.shape):
        raise Rejected(
            f"output.shape: trial {trial} output {i} has shape {list(c.shape)}, expected {list(rn.shape)}"
        )
    if c.dtype != rn.dtype:
        raise Rejected(
            f"output.dtype: trial {trial} output {i} is {dtype_name(c.dtype)}, expected {dtype_name(rn.dtype)}"
        )
    if c.device.type != rn.device.type:
        raise Rejected(f"output.type: trial {trial} output {i} is on {c.device}, expected {rn.device}")
    if not rn.is_floating_point():
        if not torch.equal(c, rn):
            raise Rejected(
                f"mismatch: trial {trial} output {i} ({dtype_name(c.dtype)}) differs from the reference"
            )
        stats["max_abs"] = max(stats["max_abs"], 0.0)
        return
    # Compared in chunks of flat elements: float64 temporaries of a whole multi-GB output would
    # need many times its size in GPU memory (and the memory admission would have to reserve it).
    cf, rf, rnf = c.detach().reshape(-1), r64.detach().reshape(-1), rn.detach().reshape(-1)
    n = rnf.numel()
    nan_bad = inf_bad = 0
    any_overflow = any_finite = False
    amax = ref_err = 0.0
    for s, e in _chunks(n):
        c64, r, rn64 = cf[s:e].double(), rf[s:e].double(), rnf[s:e].double()
        nan_bad += int((torch.isnan(c64) != torch.isnan(r)).sum())
        cinf, rinf = torch.isinf(c64), torch.isinf(r)
        # Where PyTorch's own result in the task's dtype overflowed to Inf but float64 did not, the
        # candidate can be no more accurate than PyTorch: it must give the same Inf. Those elements
        # are also left out of the reference-error bar (an Inf there would make the bar infinite).
        overflow = torch.isinf(rn64) & ~rinf
        inf_bad += int(((rinf & (c64 != r)) | (overflow & (c64 != rn64)) | (cinf & ~rinf & ~overflow)).sum())
        any_overflow = any_overflow or bool(overflow.any())
        finite = torch.isfinite(r) & ~overflow
        if bool(finite.any()):
            any_finite = True
            amax = max(amax, float(r[finite].abs().max()))
            ref_err = max(ref_err, float((rn64 - r)[finite].abs().max()))
    if nan_bad:
        raise Rejected(
            f"nan_parity: trial {trial} output {i}: {nan_bad} element(s) NaN in one of candidate/reference "
            "only (unwritten output memory is poisoned with NaN)"
        )
    if inf_bad:
        raise Rejected(
            f"nan_parity: trial {trial} output {i}: {inf_bad} element(s) with Inf positions "
            "or signs that differ from the reference"
        )
    if any_overflow:
        note = "some reference elements overflow to Inf in the task's dtype; the candidate matched them"
        if note not in stats["notes"]:
            stats["notes"].append(note)
    if not any_finite:
        return
    atol, rtol, widened = tolerance_for(rn.dtype, tolerance)
    stats["widened"] = stats["widened"] or widened
    if amax < 10 * atol and tolerance is None:
        # Outputs this small would let anything (even zeros) pass an absolute tolerance: scale it.
        atol = max(amax * 1e-3, 1e-30)
        note = f"tolerance scaled to output magnitude (max |ref| {amax:.2e})"
        if note not in stats["notes"]:
            stats["notes"].append(note)
    bar = max(atol, REF_ERR_MULT * ref_err)
    max_abs = rel = 0.0
    n_bad = n_finite = 0
    first_bad: tuple[int, float, float] | None = None
    for s, e in _chunks(n):
        c64, r, rn64 = cf[s:e].double(), rf[s:e].double(), rnf[s:e].double()
        finite = torch.isfinite(r) & ~(torch.isinf(rn64) & ~torch.isinf(r))
        err = torch.where(finite, (c64 - r).abs(), torch.zeros_like(r))
        mag = torch.where(finite, r.abs(), torch.zeros_like(r))
        n_finite += int(finite.sum())
        if err.numel():
            max_abs = max(max_abs, float(err.max()))
            rel = max(rel, float((err / mag.clamp_min(atol)).max()))
        bad = err > bar + rtol * mag
        k = int(bad.sum())
        if k and first_bad is None:
            j = int(bad.nonzero()[0, 0])
            first_bad = (s + j, float(c64[j]), float(r[j]))
        n_bad += k
    stats["max_abs"] = max(stats["max_abs"], max_abs)
    stats["max_rel"] = max(stats["max_rel"], rel)
    stats["ref_err"] = max(stats["ref_err"], ref_err)
    stats["atol"], stats["rtol"] = atol, rtol
    if first_bad is not None:
        idx, got, want = first_bad
        raise Rejected(
            f"mismatch: trial {trial} output {i}: {n_bad}/{n_finite} elements out of "
            f"tolerance; max_abs_err {max_abs:.3g} (allowed {bar:.3g} + {rtol:g}*|ref|; reference's own "
            f"{dtype_name(rn.dtype)} error {ref_err:.3g}); first bad element at flat index {idx}: "
            f"{got:.6g} vs {want:.6g}"
        )


def _chunks(n: int, size: int | None = None):
    return chunk_ranges(n, size or COMPARE_CHUNK)


# Inputs larger than this come back from the runner only as its claim of being unchanged; smaller
# ones are sent back after every call and compared here.
VERIFY_INPUT_BYTES = 1 << 30


class Checker:
    """The judge's side of the correctness protocol. The reference runs here, on inputs drawn
    here under fresh private seeds; the candidate runs in the runner, which is told the seeds
    only when it is asked for outputs; the comparison and the verdict are made here."""

    def __init__(self, job, runner: RunnerProcess) -> None:
        self.job = job
        self.runner = runner
        self.device = job.device
        self.tolerance = job.options.get("tolerance")
        self.stats = compare_stats()
        self.cand_ops: list[str] = []
        self.ref_ops: list[str] = []
        self.shapes: list[dict[str, Any]] = []
        self.launches: list[int] = []
        self.claimed_inputs_only = False
        self.degenerate: list[str] | None = None
        # Seconds of the judge's own steps over all trials (the runner's are runner.seconds).
        self.steps: dict[str, float] = {}
        # On a GPU, the judge's peak allocated bytes per step over all trials, and its live bytes
        # while the runner computes (what the two processes hold at once): where a check's
        # memory goes, for the memory admission (tools/worker/gpumem.py).
        self.memory: dict[str, int] = {}
        self._cuda = self.device == "cuda" and torch.cuda.is_available()
        # (task, weight seed) -> the reference Model built on the CPU and the CPU generator's
        # state right after, made by `stage` before the GPU lock is taken (one at a time)
        self._staged: dict[tuple[int, int], tuple[torch.nn.Module, torch.Tensor]] = {}

    def stage(self, task: LoadedTask, weight_seed: int, overrides: dict[str, int] | None = None) -> None:
        """Build the reference for `weight_seed` on the CPU now, outside any GPU lock: a model's
        weights are initialised on the CPU, seconds for a large one, and a trial holds the lock
        shared while it runs, keeping every waiting timer off the GPU. `reference` then copies it
        to the device. The same model and random state as building it there (see reference).
        With `overrides` (a GPU check), the runner builds its candidate's CPU part meanwhile
        (runner.op_stage) for the trial's `build`."""
        key = (id(task), weight_seed)
        started = False
        if overrides is not None and self._cuda:
            try:
                self.runner.start("stage", overrides=overrides, weight_seed=weight_seed)
                started = True
            except RunnerFailure as f:
                raise Rejected(f.reason) from None
        try:
            if key not in self._staged:
                with self.step("judge.stage_reference"):
                    torch.manual_seed(weight_seed)
                    model = task.module.Model(*task.init_args())
                    self._staged = {key: (model, torch.get_rng_state())}
        finally:
            if started:
                self.ask_pending("stage")

    def ask_pending(self, op: str) -> dict[str, Any]:
        """The reply to `op`, sent ahead with runner.start (failures as `ask` raises them)."""
        try:
            return self.runner.finish(op)
        except RunnerFailure as f:
            raise Rejected(f.reason) from None

    @contextlib.contextmanager
    def step(self, name: str) -> Iterator[None]:
        t, first = time.monotonic(), name not in self.steps
        # from the first step on a CUDA context (a lone check job creates it in its first step)
        tracked = self._cuda and torch.cuda.is_initialized()
        if tracked:
            gpumem.step_peak_start()
        try:
            yield
        finally:
            dt = time.monotonic() - t
            self.steps[name] = round(self.steps.get(name, 0.0) + dt, 3)
            if first:  # the first call apart: one-time costs (CUDA libraries, kernel loading)
                self.steps[name + ".first"] = round(dt, 3)
            if tracked:
                self.memory[name] = max(self.memory.get(name, 0), gpumem.step_peak_end())

    def note_live(self, key: str) -> None:
        """The judge's allocated bytes now, kept as the largest seen under `key`."""
        if self._cuda and torch.cuda.is_initialized():
            self.memory[key] = max(self.memory.get(key, 0), int(torch.cuda.memory_allocated()))

    def ask(self, op: str, **kw: Any) -> dict[str, Any]:
        try:
            reply = self.runner.request(op, **kw)
        except RunnerFailure as f:
            raise Rejected(f.reason) from None
        if not reply.get("ok"):
            rule = str(reply.get("rule") or "run.error")
            if rule == "bad_task":
                raise BadTask(str(reply.get("error"))[:400])
            if is_oom(str(reply.get("error"))) and self.device == "cuda":
                if not self.job.options.get("last_attempt"):
                    # other jobs may hold the memory: the machine's fault until shown otherwise
                    raise InfraFault(
                        "oom", f"the candidate's process ran out of GPU memory: {reply.get('error')}"
                    )
                raise Rejected(
                    f"run.oom: ran out of GPU memory with the whole GPU to itself: {reply.get('error')}"
                )
            raise Rejected(f"{rule}: {str(reply.get('error'))[:600]}")
        return reply

    def reference(self, task: LoadedTask, weight_seed: int, inputs: list[Any]) -> tuple[list[Any], list[Any]]:
        staged = self._staged.get((id(task), weight_seed))
        torch.manual_seed(weight_seed)
        if staged is None:
            ref = task.module.Model(*task.init_args()).to(self.device).eval()
        else:
            # a copy of the staged model (a forward may change a module's state), and the CPU
            # generator where building it left it; the GPU's stays as manual_seed set it, as
            # building on the CPU never draws from it
            model, cpu_state = staged
            torch.set_rng_state(cpu_state)
            ref = copy.deepcopy(model).to(self.device).eval()
        ref64 = copy.deepcopy(ref).double()
        with torch.no_grad():
            # float64 first: its upcast inputs are gone before the native forward's outputs
            # exist (the other order held both, 6.4 GB more at a 6.4 GB input, the softmax's
            # judge peak of 36 GiB on the H200)
            with float64_twin_mode():
                full = as_outputs(ref64(*upcast_copies(inputs)))
            del ref64
            rec = OpRecorder()
            with rec:
                native = as_outputs(ref(*clone_inputs(inputs)))
            self.ref_ops.extend(rec.ops)
        return [o.detach() for o in native], full

    def inputs(self, task: LoadedTask, seed: int, transform: str | None) -> list[Any]:
        try:
            xs = to_device(task.inputs(seed, self.device), self.device)
        except Exception as e:
            if is_oom(e):
                raise InfraFault("oom", f"get_inputs() ran out of GPU memory: {one_line(e)}") from None
            raise BadTask(f"get_inputs() failed: {one_line(e)}") from None
        return scaled(xs, task.module) if transform == "scaled" else xs

    def call(self, name: str, seed: int, inputs: list[Any], native: list[Any], **kw: Any) -> list[Any]:
        """One forward in the runner on the inputs of `seed`; its outputs, read back here."""
        in_bytes = sum(x.numel() * x.element_size() for x in inputs if isinstance(x, torch.Tensor))
        verify = in_bytes <= VERIFY_INPUT_BYTES
        need = sum(o.numel() * o.element_size() for o in native if isinstance(o, torch.Tensor))
        need += in_bytes if verify else 0
        channel.reserve(self.runner.slab, need)
        self.note_live("judge.live_at_call")
        try:
            r = self.ask("call", input_seed=seed, return_inputs=verify, **kw)
        except Rejected as e:
            raise Rejected(e.reason.replace(": ", f": trial {name}: ", 1)) from None
        self.cand_ops.extend(str(op) for op in (r.get("ops") or [])[:2000])
        own = int(r.get("launches") or 0)
        self.launches.append(own)
        if own == 0:
            raise Rejected(
                f"runtime.no_launch: trial {name}: ModelNew.forward launched none of the candidate's own "
                "Triton kernels"
            )
        descs = list(r.get("outputs") or [])
        if len(descs) != len(native):
            raise Rejected(f"output.count: trial {name}: {len(descs)} output(s), expected {len(native)}")
        with self.step("judge.read_outputs"):
            outs = [self.read(name, i, d, o) for i, (d, o) in enumerate(zip(descs, native, strict=True))]
        if verify:
            back = list(r.get("inputs") or [])
            mine = [x for x in inputs if isinstance(x, torch.Tensor)]
            same = len(back) == len(mine)
            with self.step("judge.inputs_unchanged"):
                for d, x in zip(back, mine, strict=False):
                    same = same and self._same_input(d, x)
            if not same:
                raise Rejected(f"inputs.mutated: trial {name}: ModelNew.forward modified its inputs in place")
        else:
            self.claimed_inputs_only = True
            if r.get("mutated"):
                raise Rejected(f"inputs.mutated: trial {name}: ModelNew.forward modified its inputs in place")
        return outs

    def _same_input(self, d: dict[str, Any], x: torch.Tensor) -> bool:
        if d.get("shape") != list(x.shape) or d.get("dtype") != dtype_name(x.dtype) or not d.get("written"):
            return False
        return same_values(x, channel.read_tensor(self.runner.slab, d, self.device))

    def read(self, name: str, i: int, d: dict[str, Any], want: Any) -> torch.Tensor:
        kind = d.get("type")
        if kind != "torch.Tensor":
            raise Rejected(
                f"output.type: trial {name} output {i} is {str(kind)[:80]}, expected exactly torch.Tensor"
            )
        if d.get("shape") != list(want.shape):
            raise Rejected(
                f"output.shape: trial {name} output {i} has shape {str(d.get('shape'))[:80]}, "
                f"expected {list(want.shape)}"
            )
        if d.get("dtype") != dtype_name(want.dtype):
            raise Rejected(
                f"output.dtype: trial {name} output {i} is {str(d.get('dtype'))[:40]}, expected {dtype_name(want.dtype)}"
            )
        if d.get("device") != want.device.type:
            raise Rejected(
                f"output.type: trial {name} output {i} is on {str(d.get('device'))[:20]}, expected {want.device}"
            )
        if not d.get("written"):
            raise Rejected(f"sandbox.protocol: trial {name} output {i} did not reach the judge")
        try:
            return channel.read_tensor(self.runner.slab, d, self.device)
        except channel.ChannelError as e:
            raise Rejected(f"sandbox.protocol: trial {name} output {i}: {e}") from None

    def trial(
        self,
        task: LoadedTask,
        name: str,
        seed: int,
        overrides: dict[str, int],
        transform=None,
        weight_seed: int | None = None,
    ) -> None:
        """One trial on a fresh instance; `weight_seed` drawn here unless the caller drew (and
        staged) it before taking the GPU lock."""
        if weight_seed is None:
            weight_seed = secrets.randbits(31)
        self.ask("build", overrides=overrides, weight_seed=weight_seed)
        shapes = self.one_call(task, name, seed, weight_seed, transform=transform)
        self.shapes.append({"trial": name, "sizes": dict(task.sizes), "inputs": shapes})

    def sequence(self, task: LoadedTask, overrides: dict[str, int], seeds: list[int]) -> None:
        """The first trials as repeated calls on one instance: call 1, call 2 on new tensors, then
        every further call on the second call's tensors refilled with new values in place. Each
        call is a trial of its own (fresh inputs, its own reference), and together they are the
        check for results cached between calls: a cache keyed on the instance, the tensors or their
        addresses returns a wrong result on a later call. When a later call is wrong, the same call
        on a fresh instance tells the two apart: right there means `runtime.stale`, wrong there is
        the plain mismatch.

        Each call holds the GPU lock shared for itself only (the first with the build): a timer
        that asks for the GPU meanwhile waits for one call, not the whole sequence (H100 suite,
        2026-12-06: a check's trials took 3.1 s median under one hold, 8 s at most, and the GPU
        was drained for waiting timers 40% of the run's wall time)."""
        weight_seed = secrets.randbits(31)
        self.stage(task, weight_seed, overrides)  # before the first hold: every trial here uses it
        for k, seed in enumerate(seeds):
            name = str(k + 1) if k < 2 else f"{k + 1} (same tensors, new values)"
            try:
                with gpu_lock(exclusive=False, step="check.trial"):
                    if k == 0:
                        self.ask("build", overrides=overrides, weight_seed=weight_seed)
                    shapes = self.one_call(task, name, seed, weight_seed, reuse=k >= 2)
            except Rejected as r:
                if k == 0 or r.reason.split(":", 1)[0] not in ("mismatch", "nan_parity"):
                    raise
                with gpu_lock(exclusive=False, step="check.fresh_instance"):
                    self.ask("build", overrides=overrides, weight_seed=weight_seed)
                    self.one_call(task, f"{k + 1} (fresh instance)", seed, weight_seed)
                raise Rejected(
                    "runtime.stale: repeated calls on one instance return wrong results for fresh "
                    f"inputs, a fresh instance is right ({r.reason})"
                ) from None
            self.shapes.append({"trial": name, "sizes": dict(task.sizes), "inputs": shapes})

    def one_call(
        self, task: LoadedTask, name: str, seed: int, weight_seed: int, *, native_ref=None, **kw: Any
    ) -> list[list[int]]:
        """Inputs, references, one candidate forward, the comparison; returns the input shapes.
        Every tensor of the call dies on return, so consecutive calls never hold two calls'
        tensors at once (which would double the check's GPU peak). `native_ref` is (inputs,
        native, full) computed by the caller for this seed and weight seed."""
        if native_ref is None:
            with self.step("judge.inputs"):
                inputs = self.inputs(task, seed, kw.get("transform"))
            with self.step("judge.reference"):
                native, full = self.reference(task, weight_seed, inputs)
        else:
            inputs, native, full = native_ref
            native_ref = None
        if self.degenerate is None:
            # the reference's own outputs say whether the comparison can tell anything apart
            self.degenerate = degenerate_flags([o for o in native if isinstance(o, torch.Tensor)])
        outs = self.call(name, seed, inputs, native, **kw)
        with self.step("judge.compare"):
            for i, (c, r64, rn) in enumerate(zip(outs, full, native, strict=False)):
                compare(name, i, c, r64, rn, self.tolerance, self.stats)
        return [list(x.shape) for x in inputs if isinstance(x, torch.Tensor)]

    def second_shape(self, job, sizes: dict[str, int], seed: int) -> bool:
        """One trial at size constants changed to smaller non-power-of-two values: the first set
        of `second_shape_options` the task itself runs with (its reference is the probe, so no
        forward is spent only on finding out). False when none runs."""
        for sizes2 in second_shape_options(sizes):
            weight_seed = secrets.randbits(31)
            try:
                task2 = load_task(job.task_source, sizes2)
                with self.step("judge.inputs"):
                    inputs = to_device(task2.inputs(seed, self.device), self.device)
                with self.step("judge.reference"):
                    native, full = self.reference(task2, weight_seed, inputs)
            except Exception as e:
                if is_oom(e) and self.device == "cuda":
                    raise InfraFault(
                        "oom", f"second-shape reference ran out of GPU memory: {one_line(e)}"
                    ) from None
                continue
            self.ask("build", overrides=sizes2, weight_seed=weight_seed)
            shapes = self.one_call(
                task2, "second-shape", seed, weight_seed, native_ref=(inputs, native, full)
            )
            del inputs, native, full
            self.shapes.append({"trial": "second-shape", "sizes": dict(task2.sizes), "inputs": shapes})
            return True
        return False

    def policy(self) -> tuple[list[str], list[str]]:
        reasons: list[str] = []
        cats = categorize(self.cand_ops)
        ref_cats = categorize(self.ref_ops)
        if cats["compute"]:
            reasons.append(
                f"policy.torch_compute: ModelNew.forward computes {', '.join(cats['compute'][:12])} in PyTorch "
                f"(policy {self.job.policy}: elementwise/reduction/normalization ops must be in Triton)"
            )
        delegated = [op for op in cats["library"] if op in DELEGABLE]
        if delegated and self.job.policy == "strict":
            reasons.append(
                f"policy.torch_compute: ModelNew.forward delegates {', '.join(delegated)} to PyTorch "
                "(policy strict: every arithmetic op must be in Triton)"
            )
        elif delegated and not ref_cats["compute"]:
            reasons.append(
                f"policy.single_op: the task is only library op(s) ({', '.join(ref_cats['library'])}); "
                f"delegating {', '.join(delegated)} to PyTorch leaves nothing for Triton"
            )
        return reasons, delegated


def static_rejection(job, t0: float) -> dict[str, Any] | None:
    """The static rules, before any candidate code runs: a rejected candidate is never run."""
    if job.options.get("static_rules", True) is False:
        return None  # tests of the runtime containment only; the toolbox never sends this
    found = static_findings(job.candidate_source or "")
    return (
        {**_base(job), "accepted": False, "reasons": found, "seconds": time.monotonic() - t0}
        if found
        else None
    )


def _base(job) -> dict[str, Any]:
    return {
        "policy": job.policy,
        "device": job.device,
        "tolerance": {},
        "delegated_ops": [],
        "shapes_checked": [],
        "degenerate": [],
        "trials": 0,
    }


def run_check(job, runner: RunnerProcess | None = None) -> dict[str, Any]:
    """The correctness protocol. `runner` is the job's runner when the caller (the evaluate job)
    already started and loaded one; otherwise one is started here."""
    t0 = time.monotonic()
    early = static_rejection(job, t0)
    if early is not None:
        return early
    own = runner is None
    if runner is None:
        runner = RunnerProcess(job, timeout_s=float(job.options.get("runner_timeout_s", 280)))
    try:
        return _check(job, runner, t0)
    finally:
        if own:
            runner.close()


def _check(job, runner: RunnerProcess, t0: float) -> dict[str, Any]:
    base = _base(job)
    base["isolation"] = runner.isolation
    task = load_task(job.task_source, dict(job.size_overrides))
    failed = runner.load(job)
    if failed is not None:
        line = failed.get("line")
        where = f" (line {line})" if line else ""
        reason = f"{failed.get('rule', 'load.error')}: {str(failed.get('error'))[:600]}{where}"
        return {**base, "accepted": False, "reasons": [reason], "seconds": time.monotonic() - t0}
    ck = Checker(job, runner)
    lap = Laps()
    # at least three: the repeated-call sequence needs new tensors and then refilled ones
    n_trials = max(3, int(job.options.get("trials", 3)))
    seeds = [secrets.randbits(31) for _ in range(n_trials + 2)]
    overrides = dict(job.size_overrides)
    reasons: list[str] = []
    try:
        # Each GPU step holds the per-GPU lock shared for itself only (tools/worker/gpulock.py).
        # Trials 1..n are repeated calls on one instance (the stale-result check, Checker.sequence),
        # each call under its own hold.
        ck.sequence(task, overrides, seeds[:n_trials])
        lap("trials")
        scaled_weights = secrets.randbits(31)
        ck.stage(task, scaled_weights, overrides)
        with gpu_lock(exclusive=False, step="check.scaled"):
            ck.trial(
                task,
                "scaled(x*3-0.5)",
                seeds[n_trials],
                overrides,
                transform="scaled",
                weight_seed=scaled_weights,
            )
        lap("trials")
        sizes = {**int_constants(job.task_source), **overrides}
        options = second_shape_options(sizes)
        if options and job.device == "cuda":
            # new sizes are new specialisations: compiled before the lock (runner.op_precompile)
            ck.ask("precompile", overrides=options[0])
            lap("second_shape_precompile")
        with gpu_lock(exclusive=False, step="check.second_shape"):
            if not ck.second_shape(job, sizes, seeds[n_trials + 1]):
                ck.stats["notes"].append("second shape skipped: no size constant could be changed")
        lap("second_shape")
    except Rejected as r:
        reasons.append(r.reason)
    pol, delegated = ck.policy()
    reasons.extend(pol)
    if ck.claimed_inputs_only:
        ck.stats["notes"].append(
            "inputs over 1 GiB: 'inputs unchanged' is the candidate process's claim, not compared here"
        )
    deg = (ck.degenerate or []) + ck.stats["notes"]
    trials_done = len(ck.shapes)
    atol = ck.stats["atol"]
    tol = (
        {
            "atol": atol,
            "rtol": ck.stats["rtol"],
            "ref_err_mult": REF_ERR_MULT,
            "reference_err": ck.stats["ref_err"],
        }
        if atol is not None
        else {}
    )
    return {
        **base,
        "accepted": not reasons,
        "reasons": reasons,
        "max_abs_err": ck.stats["max_abs"] if trials_done else None,
        "max_rel_err": ck.stats["max_rel"] if trials_done else None,
        "trials": trials_done,
        "delegated_ops": delegated,
        "tolerance": {k: float(v) for k, v in tol.items() if v is not None and not math.isnan(v)},
        "tolerance_widened": ck.stats["widened"],
        "shapes_checked": ck.shapes,
        "degenerate": deg,
        "seconds": time.monotonic() - t0,
        "launches_per_forward": ck.launches,
        "memory_gib": {k: round(v / 2**30, 3) for k, v in sorted(ck.memory.items())},
        "phases": {
            **lap.phases,
            **ck.steps,
            **{f"runner.{k}": v for k, v in runner.seconds.items()},
        },
    }
