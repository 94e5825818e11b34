"""The `check` job: the correctness protocol and the runtime integrity rules.

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

import copy
import math
import secrets
import time
from typing import Any

import torch

from tools.worker.common import (
    DELEGABLE,
    BadTask,
    CandidateLoadError,
    LoadedTask,
    OpRecorder,
    as_outputs,
    categorize,
    clone_inputs,
    dtype_name,
    int_constants,
    launch_log,
    line_in,
    load_module,
    load_task,
    one_line,
    sync,
    to_device,
    upcast,
)
from tools.worker.gpulock import gpu_lock
from tools.worker.laps import Laps
from tools.worker.static_rules import static_findings

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


def load_candidate(source: str) -> Any:
    try:
        mod = load_module(source, "candidate")
    except SyntaxError as e:
        raise CandidateLoadError(f"syntax error: {e.msg}", e.lineno, "syntax") from None
    except Exception as e:
        raise CandidateLoadError(one_line(e), line_in(e, "egg_candidate_"), "import") from None
    if not hasattr(mod, "ModelNew"):
        raise CandidateLoadError("candidate defines no ModelNew", None, "import")
    return mod


def copy_weights(ref: torch.nn.Module, cand: torch.nn.Module) -> None:
    rsd, csd = ref.state_dict(), cand.state_dict()
    if set(rsd) == set(csd):
        for k in rsd:
            if rsd[k].shape != csd[k].shape:
                raise Rejected(
                    f"weights.mismatch: `{k}` has shape {list(csd[k].shape)}, reference {list(rsd[k].shape)}"
                )
        cand.load_state_dict(rsd)
        return
    # Same structure under other names: match in order when every shape agrees.
    rv, cv = list(rsd.items()), list(csd.items())
    if len(rv) == len(cv) and all(a[1].shape == b[1].shape for a, b in zip(rv, cv, strict=False)):
        cand.load_state_dict({cn: rt for (cn, _), (_, rt) in zip(cv, rv, strict=False)})
        return
    missing = sorted(set(rsd) - set(csd))[:4]
    extra = sorted(set(csd) - set(rsd))[:4]
    raise Rejected(
        f"weights.mismatch: ModelNew's state_dict does not match the reference (missing {missing}, "
        f"unexpected {extra})"
    )


def tolerance_for(dtype: torch.dtype, tolerance: float | None) -> tuple[float, float, bool]:
    atol, rtol = TOLERANCES.get(dtype_name(dtype), (1e-4, 1e-4))
    if tolerance is not None:
        widened = tolerance > atol
        return float(tolerance), float(tolerance), widened
    return atol, rtol, False


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
    c64 = c.detach().double()
    r64 = r64.detach().double()
    rn64 = rn.detach().double()
    if not torch.equal(torch.isnan(c64), torch.isnan(r64)):
        n_bad = int((torch.isnan(c64) != torch.isnan(r64)).sum())
        raise Rejected(
            f"nan_parity: trial {trial} output {i}: {n_bad} element(s) NaN in one of candidate/reference "
            "only (unwritten output memory is poisoned with NaN)"
        )
    cinf, rinf = torch.isinf(c64), torch.isinf(r64)
    # Where PyTorch's own result in the task's dtype overflowed to Inf but float64 did not, the
    # candidate can be no more accurate than PyTorch: it must give the same Inf. Those elements
    # are also left out of the reference-error bar (an Inf there would make the bar infinite).
    overflow = torch.isinf(rn64) & ~rinf
    bad_inf = (rinf & (c64 != r64)) | (overflow & (c64 != rn64)) | (cinf & ~rinf & ~overflow)
    if bool(bad_inf.any()):
        raise Rejected(
            f"nan_parity: trial {trial} output {i}: {int(bad_inf.sum())} element(s) with Inf positions "
            "or signs that differ from the reference"
        )
    if bool(overflow.any()):
        note = "some reference elements overflow to Inf in the task's dtype; the candidate matched them"
        if note not in stats["notes"]:
            stats["notes"].append(note)
    finite = torch.isfinite(r64) & ~overflow
    if not bool(finite.any()):
        return
    atol, rtol, widened = tolerance_for(rn.dtype, tolerance)
    stats["widened"] = stats["widened"] or widened
    amax = float(r64[finite].abs().max())
    if amax < 10 * atol and tolerance is None:
        # Outputs this small would let anything (even zeros) pass an absolute tolerance: scale it.
        atol = max(amax * 1e-3, 1e-30)
        note = f"tolerance scaled to output magnitude (max |ref| {amax:.2e})"
        if note not in stats["notes"]:
            stats["notes"].append(note)
    ref_err = float((rn64 - r64)[finite].abs().max())
    bar = max(atol, REF_ERR_MULT * ref_err)
    err = (c64 - r64)[finite].abs()
    allowed = bar + rtol * r64[finite].abs()
    max_abs = float(err.max())
    rel = float((err / r64[finite].abs().clamp_min(atol)).max())
    stats["max_abs"] = max(stats["max_abs"], max_abs)
    stats["max_rel"] = max(stats["max_rel"], rel)
    stats["ref_err"] = max(stats["ref_err"], ref_err)
    stats["atol"], stats["rtol"] = atol, rtol
    bad = err > allowed
    if bool(bad.any()):
        idx = int(bad.nonzero()[0, 0])
        raise Rejected(
            f"mismatch: trial {trial} output {i}: {int(bad.sum())}/{err.numel()} elements out of "
            f"tolerance; max_abs_err {max_abs:.3g} (allowed {bar:.3g} + {rtol:g}*|ref|; reference's own "
            f"{dtype_name(rn.dtype)} error {ref_err:.3g}); first bad element {idx}: "
            f"{float(c64[finite][idx]):.6g} vs {float(r64[finite][idx]):.6g}"
        )


def _inputs_equal(a: list[Any], b: list[Any]) -> bool:
    for x, y in zip(a, b, strict=False):
        if isinstance(x, torch.Tensor):
            if x.shape != y.shape or not torch.equal(
                torch.nan_to_num(x.double() if x.is_floating_point() else x),
                torch.nan_to_num(y.double() if y.is_floating_point() else y),
            ):
                return False
    return True


def poison_freed(outputs: list[Any], inputs: list[Any]) -> None:
    """Overwrite the reference's own output buffers with NaN before they are freed, so memory the
    candidate gets back from the (CUDA caching) allocator holds NaN, not the right answer."""
    in_storages = {x.untyped_storage().data_ptr() for x in inputs if isinstance(x, torch.Tensor)}
    for o in outputs:
        if not isinstance(o, torch.Tensor) or o.untyped_storage().data_ptr() in in_storages:
            continue  # a view of an input: poisoning it would corrupt the input
        if o.is_floating_point():
            o.detach().fill_(float("nan"))
        elif o.dtype != torch.bool:
            o.detach().fill_(-1)


def scaled(xs: list[Any]) -> list[Any]:
    return [x * 3.0 - 0.5 if isinstance(x, torch.Tensor) and x.is_floating_point() else x for x in xs]


class Checker:
    def __init__(self, job) -> None:
        self.job = job
        self.device = job.device
        self.tolerance = job.options.get("tolerance")
        self.stats: dict[str, Any] = {
            "max_abs": 0.0,
            "max_rel": 0.0,
            "ref_err": 0.0,
            "widened": False,
            "notes": [],
            "atol": None,
            "rtol": None,
        }
        self.cand_ops: list[str] = []
        self.ref_ops: list[str] = []
        self.shapes: list[dict[str, Any]] = []
        self.launches: list[int] = []
        self.cand_mod: Any = None

    def build(self, task: LoadedTask, seed: int) -> tuple[torch.nn.Module, torch.nn.Module]:
        init = task.init_args()
        torch.manual_seed(seed)
        ref = task.module.Model(*init)
        try:
            torch.manual_seed(seed ^ 0x5A5A)
            cand = self.cand_mod.ModelNew(*copy.deepcopy(init))
        except Exception as e:
            raise Rejected(f"load.error: ModelNew(*get_init_inputs()) raised {one_line(e)}") from None
        if not isinstance(cand, torch.nn.Module):
            raise Rejected("load.error: ModelNew is not a torch.nn.Module")
        copy_weights(ref, cand)
        return ref.to(self.device).eval(), cand.to(self.device).eval()

    def reference(self, ref: torch.nn.Module, inputs: list[Any]) -> tuple[list[Any], list[Any]]:
        ref64 = copy.deepcopy(ref).double()
        with torch.no_grad():
            rec = OpRecorder()
            with rec:
                native = as_outputs(ref(*clone_inputs(inputs)))
            self.ref_ops.extend(rec.ops)
            full = as_outputs(ref64(*upcast(clone_inputs(inputs))))
        return native, full

    def run_candidate(self, cand: torch.nn.Module, inputs: list[Any], trial: str) -> tuple[list[Any], int]:
        rec = OpRecorder(poison=True)
        with torch.no_grad(), launch_log() as log:
            try:
                with rec:
                    out = cand(*inputs)
                sync(self.device)
            except Rejected:
                raise
            except Exception as e:
                line = line_in(e, "egg_candidate_")
                where = f" (candidate line {line})" if line else ""
                raise Rejected(
                    f"run.error: trial {trial}: ModelNew.forward raised {one_line(e)}{where}"
                ) from None
        self.cand_ops.extend(rec.ops)
        own = log.count(self.cand_mod.__name__)
        return as_outputs(out), own

    def trial(self, task: LoadedTask, name: str, seed: int, transform=None) -> None:
        ref, cand = self.build(task, seed)
        try:
            inputs = to_device(task.inputs(seed, self.device), self.device)
        except Exception as e:
            raise BadTask(f"get_inputs() failed: {one_line(e)}") from None
        if transform is not None:
            inputs = transform(inputs)
        pristine = clone_inputs(inputs)
        ref_in = clone_inputs(inputs)
        native, full = self.reference(ref, ref_in)
        ref_native = [o.detach().clone() for o in native]
        poison_freed(native, ref_in)
        del native, ref_in
        cand_in = clone_inputs(inputs)
        outs, own = self.run_candidate(cand, cand_in, name)
        self.launches.append(own)
        if own == 0:
            raise Rejected(
                f"runtime.no_launch: trial {name}: ModelNew.forward launched none of the candidate's own "
                "Triton kernels"
            )
        if len(outs) != len(full):
            raise Rejected(f"output.count: trial {name}: {len(outs)} output(s), expected {len(full)}")
        for i, (c, r64, rn) in enumerate(zip(outs, full, ref_native, strict=False)):
            compare(name, i, c, r64, rn, self.tolerance, self.stats)
        if not _inputs_equal(cand_in, pristine):
            raise Rejected(f"inputs.mutated: trial {name}: ModelNew.forward modified its inputs in place")
        self.shapes.append(
            {
                "trial": name,
                "sizes": dict(task.sizes),
                "inputs": [list(x.shape) for x in inputs if isinstance(x, torch.Tensor)],
            }
        )

    def stale(self, task: LoadedTask, seeds: list[int]) -> None:
        """Repeated calls on one instance: new tensors, then the first tensors refilled in place."""
        ref, cand = self.build(task, seeds[0])
        a = to_device(task.inputs(seeds[0], self.device), self.device)
        b = to_device(task.inputs(seeds[1], self.device), self.device)
        fresh = to_device(task.inputs(seeds[2], self.device), self.device)
        plan = [
            ("call 1", a, None),
            ("call 2 (new tensors)", b, None),
            ("call 3 (same tensors, new values)", a, fresh),
        ]
        for label, xs, refill in plan:
            if refill is not None:
                for x, y in zip(xs, refill, strict=False):
                    if isinstance(x, torch.Tensor):
                        x.copy_(y)
            native, full = self.reference(ref, xs)
            outs, _ = self.run_candidate(cand, xs, f"stale/{label}")
            try:
                for i, (c, r64) in enumerate(zip(outs, full, strict=False)):
                    compare(f"stale/{label}", i, c, r64, native[i], self.tolerance, self.stats)
            except Rejected as r:
                raise Rejected(
                    "runtime.stale: repeated calls return wrong results for fresh inputs (" + r.reason + ")"
                ) from None

    def policy(self) -> tuple[list[str], list[str]]:
        reasons: list[str] = []
        cats = categorize(self.cand_ops)
        ref_cats = categorize(self.ref_ops)
        if cats["compute"]:
            reasons.append(
                f"policy.torch_compute: ModelNew.forward computes {', '.join(cats['compute'])} in PyTorch "
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


def second_shape(task_source: str, sizes: dict[str, int], device: str, init_ok) -> dict[str, int] | None:
    """Size constants changed to smaller non-power-of-two values, if the task still runs with them."""
    cands = sorted((k for k, v in sizes.items() if v >= 8), key=lambda k: -sizes[k])

    def alt(v: int) -> int:
        n = v - v // 4 - 1
        if n & (n - 1) == 0:
            n -= 1
        return max(n, 3)

    options = [{k: alt(sizes[k]) for k in cands}] + [{k: alt(sizes[k])} for k in cands]
    for ov in options:
        if not ov:
            continue
        trial = {**sizes, **ov}
        if init_ok(trial):
            return trial
    return None


def run_check(job) -> dict[str, Any]:
    t0 = time.monotonic()
    base: dict[str, Any] = {
        "policy": job.policy,
        "device": job.device,
        "tolerance": {},
        "delegated_ops": [],
        "shapes_checked": [],
        "degenerate": [],
        "trials": 0,
    }
    static = static_findings(job.candidate_source or "")
    if static:
        return {**base, "accepted": False, "reasons": static, "seconds": time.monotonic() - t0}
    task = load_task(job.task_source, dict(job.size_overrides))
    ck = Checker(job)
    try:
        ck.cand_mod = load_candidate(job.candidate_source or "")
    except CandidateLoadError as e:
        where = f" (line {e.line})" if e.line else ""
        return {
            **base,
            "accepted": False,
            "reasons": [f"load.error: {e}{where}"],
            "seconds": time.monotonic() - t0,
        }

    lap = Laps()
    n_trials = int(job.options.get("trials", 3))
    seeds = [secrets.randbits(31) for _ in range(n_trials + 5)]
    reasons: list[str] = []
    trials_done = 0
    try:
        # Each GPU step holds the per-GPU lock shared for itself only (tools/worker/gpulock.py).
        for k in range(n_trials):
            with gpu_lock(exclusive=False):
                ck.trial(task, f"{k + 1}", seeds[k])
            trials_done += 1
            lap("trials")
        with gpu_lock(exclusive=False):
            ck.trial(task, "scaled(x*3-0.5)", seeds[n_trials], transform=scaled)
        trials_done += 1
        lap("trials")

        def runs(sizes: dict[str, int]) -> bool:
            try:
                t2 = load_task(job.task_source, sizes)
                init = t2.init_args()
                with gpu_lock(exclusive=False), torch.no_grad():
                    m = t2.module.Model(*init).to(job.device).eval()
                    m(*to_device(t2.inputs(0, job.device), job.device))
                return True
            except Exception:
                return False

        sizes2 = second_shape(
            job.task_source, {**int_constants(job.task_source), **dict(job.size_overrides)}, job.device, runs
        )
        lap("second_shape_probe")
        if sizes2 is not None:
            with gpu_lock(exclusive=False):
                ck.trial(load_task(job.task_source, sizes2), "second-shape", seeds[n_trials + 1])
            trials_done += 1
        else:
            ck.stats["notes"].append("second shape skipped: no size constant could be changed")
        lap("second_shape")
        with gpu_lock(exclusive=False):
            ck.stale(task, seeds[n_trials + 2 : n_trials + 5])
        lap("stale")
    except Rejected as r:
        reasons.append(r.reason)
    pol, delegated = ck.policy()
    reasons.extend(pol)
    from tools.worker.describe import degenerate_flags

    try:
        with gpu_lock(exclusive=False), torch.no_grad():
            t_ref = task.module.Model(*task.init_args()).to(job.device).eval()
            deg = degenerate_flags(
                [
                    o
                    for o in as_outputs(t_ref(*to_device(task.inputs(seeds[-1], job.device), job.device)))
                    if isinstance(o, torch.Tensor)
                ]
            )
    except Exception:
        deg = []
    deg += ck.stats["notes"]
    lap("degenerate")
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
        "phases": lap.phases,
    }
