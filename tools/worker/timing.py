"""The `time` and `benchmark` jobs (CUDA only): do_bench-style timing, in one process.

Per repetition: flush L2 (write a buffer larger than L2), record CUDA events around one call,
and take the median and p20/p80 of the per-call times after a warm-up. Candidate, eager and
(benchmark) torch.compile run on the same inputs in the same process.

Speed-of-light: a candidate median below max(bytes read / peak bandwidth, flops / peak flop
rate) cannot be real. Only the bytes READ count (inputs + parameters): L2 is flushed before each
call so reads must come from HBM, but output writes can be absorbed by the 60 MB L2 before the
end event, so counting them could reject an honest kernel. Such a result cannot be real (e.g. work on another stream, or nothing done). Such a result is returned with
measured=False and reason "timing.speed_of_light: ...", so no speedup is ever quoted from it
and `beats()` never accepts it; the raw numbers stay in the report for diagnosis.
"""

from __future__ import annotations

import contextlib
import copy
import os
import platform
import subprocess
import time
from typing import Any

import torch

from tools.worker.common import as_outputs, clone_inputs, launch_log, load_task, to_device
from tools.worker.laps import Laps

# Upper bounds used for the speed-of-light check (deliberately above any real H200 number).
SOL_BANDWIDTH = 5.0e12  # bytes/s (H200 spec is 4.8 TB/s)
SOL_FLOPS = {"float32": 1.0e15, "float16": 2.0e15, "bfloat16": 2.0e15, "float64": 1.0e14}


def environment() -> dict[str, Any]:
    env: dict[str, Any] = {"torch": torch.__version__, "python": platform.python_version()}
    try:
        import triton

        env["triton"] = triton.__version__
    except Exception:
        env["triton"] = None
    env["cuda"] = torch.version.cuda
    if torch.cuda.is_available():
        env["gpu"] = torch.cuda.get_device_name()
        try:
            r = subprocess.run(
                [
                    "nvidia-smi",
                    "--query-gpu=driver_version,clocks.sm,clocks.mem",
                    "--format=csv,noheader,nounits",
                    f"--id={torch.cuda.current_device()}",
                ],
                capture_output=True,
                text=True,
                timeout=20,
            )
            drv, sm, mem = [s.strip() for s in r.stdout.strip().splitlines()[0].split(",")]
            env.update(driver=drv, sm_clock_mhz=int(float(sm)), mem_clock_mhz=int(float(mem)))
        except Exception:
            pass  # nvidia-smi missing: the environment then lacks clocks, nothing else depends on it
    return env


class Bencher:
    def __init__(self, l2_bytes: int = 256 * 1024 * 1024) -> None:
        self.flush_buf = torch.empty(l2_bytes // 4, dtype=torch.int32, device="cuda")

    def bench(
        self, fn, *, warmup_ms: float = 25.0, rep_ms: float = 100.0, min_reps: int = 10, max_reps: int = 1000
    ) -> dict[str, float]:
        fn()
        torch.cuda.synchronize()
        # Estimate one call to size warm-up and repetitions.
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        for _ in range(5):
            self.flush_buf.zero_()
            fn()
        e.record()
        torch.cuda.synchronize()
        est = max(s.elapsed_time(e) / 5, 1e-3)
        n_warm = max(1, int(warmup_ms / est))
        n_rep = min(max_reps, max(min_reps, int(rep_ms / est)))
        for _ in range(n_warm):
            fn()
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(n_rep)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(n_rep)]
        for i in range(n_rep):
            self.flush_buf.zero_()
            starts[i].record()
            fn()
            ends[i].record()
        torch.cuda.synchronize()
        times = torch.tensor(
            [a.elapsed_time(b) for a, b in zip(starts, ends, strict=False)], dtype=torch.float64
        )
        q = torch.quantile(times, torch.tensor([0.2, 0.5, 0.8], dtype=torch.float64))
        return {"p20": float(q[0]), "median": float(q[1]), "p80": float(q[2]), "reps": n_rep}


def _rel_err(got: list[Any], want: list[Any]) -> float:
    """Largest error relative to each output's magnitude (inf on NaN or shape mismatch)."""
    worst = 0.0
    for x, y in zip(got, want, strict=False):
        if not isinstance(x, torch.Tensor) or not isinstance(y, torch.Tensor) or x.shape != y.shape:
            return float("inf")
        d = (x.double() - y.double()).abs()
        d = torch.where(torch.isnan(x.double()) & torch.isnan(y.double()), torch.zeros_like(d), d)
        e = float(d.max()) if d.numel() else 0.0
        if e != e:
            return float("inf")
        worst = max(worst, e / (float(y.double().abs().max()) + 1e-30) if y.numel() else 0.0)
    return worst


def run_time(job, *, benchmark: bool, staged_lock: bool = False) -> dict[str, Any]:
    """Time the candidate (if any), eager and (benchmark) torch.compile on the same inputs.

    staged_lock: take the per-GPU lock here, shared for the set-up (loading, first calls, the
    torch.compile warm-up, the roofline bounds) and exclusive only for the timed section, so a
    long Inductor compile does not hold other workers off the GPU. The evaluate job holds the
    exclusive lock itself and passes False.
    """
    from tools.worker.check import copy_weights, load_candidate
    from tools.worker.describe import bytes_and_flops
    from tools.worker.gpulock import gpu_lock

    t0 = time.monotonic()
    if job.device != "cuda" or not torch.cuda.is_available():
        return {
            "measured": False,
            "reason": "timing needs a CUDA GPU; not measured on CPU",
            "seconds": time.monotonic() - t0,
        }
    lap = Laps()

    def locked(exclusive: bool):
        return gpu_lock(exclusive) if staged_lock else contextlib.nullcontext()

    opts = job.options
    kw = {"warmup_ms": float(opts.get("warmup_ms", 25)), "rep_ms": float(opts.get("rep_ms", 100))}
    out: dict[str, Any] = {"env": environment(), "phases": lap.phases}
    lap("env")
    cand = mod = cin = compiled = None
    err0 = 0.0
    with locked(False), torch.no_grad():
        task = load_task(job.task_source, dict(job.size_overrides))
        init = task.init_args()
        torch.manual_seed(1234)
        ref = task.module.Model(*init).cuda().eval()
        inputs = to_device(task.inputs(4321, "cuda"), "cuda")
        bench = Bencher()
        ref_out = as_outputs(ref(*inputs))
        lap("setup")
        if job.candidate_source is not None:
            mod = load_candidate(job.candidate_source)
            cand = mod.ModelNew(*copy.deepcopy(init))
            copy_weights(ref, cand)
            cand = cand.cuda().eval()
            cin = clone_inputs(inputs)
            with launch_log() as log:
                first = as_outputs(cand(*cin))
                torch.cuda.synchronize()
            # The candidate's own error on these inputs (already verified by `check`) sets the bar
            # for the fresh-input recheck below, so TF32-class differences are not called stale.
            err0 = _rel_err(first, ref_out)
            del first
            out["candidate_launches"] = log.count(mod.__name__)
            lap("first_call")
        if benchmark:
            try:
                compiled = torch.compile(ref)
                compiled(*inputs)
            except Exception as ex:  # recorded, not hidden: the report shows compile_ms=None and why
                compiled = None
                out["compile_error"] = f"{type(ex).__name__}: {str(ex)[:200]}"
            lap("compile_warmup")
        nbytes = flops = None
        if cand is not None:
            from torch.utils.flop_counter import FlopCounterMode

            nbytes = bytes_and_flops(ref, inputs, [])  # reads only: see the module docstring
            with FlopCounterMode(display=False) as fc:
                ref(*inputs)
            flops = float(fc.get_total_flops())
            torch.cuda.synchronize()
        lap("roofline_bounds")

    with locked(True), torch.no_grad():
        lap("wait_exclusive")
        if cand is not None:
            c = bench.bench(lambda: cand(*cin), **kw)
            lap("bench_candidate")
            out.update(
                candidate_ms=c["median"],
                candidate_p20_ms=c["p20"],
                candidate_p80_ms=c["p80"],
                noise=(c["p80"] - c["p20"]) / c["median"] if c["median"] > 0 else None,
            )
            # After the timed calls: fresh values in the same tensors must still give right answers.
            fresh = to_device(task.inputs(98765, "cuda"), "cuda")
            for x, y in zip(cin, fresh, strict=False):
                if isinstance(x, torch.Tensor):
                    x.copy_(y)
            got = as_outputs(cand(*cin))
            want = as_outputs(ref(*clone_inputs(cin)))
            err1 = _rel_err(got, want)
            if not err1 <= max(4 * err0, 1e-3):
                out.update(
                    measured=False,
                    reason="runtime.stale: outputs after the timed calls do not match the "
                    "reference for fresh inputs (results cached or computed elsewhere): relative error "
                    f"{err1:.3g} vs {err0:.3g} before timing",
                )
            if out["candidate_launches"] == 0 and out.get("measured", True):
                out.update(
                    measured=False,
                    reason="runtime.no_launch: the timed forward launched none of the "
                    "candidate's own Triton kernels",
                )
            lap("recheck")
        e = bench.bench(lambda: ref(*inputs), **kw)
        lap("bench_eager")
        out["eager_ms"] = e["median"]
        out["eager_p20_ms"], out["eager_p80_ms"] = e["p20"], e["p80"]
        if compiled is not None:
            try:
                out["compile_ms"] = bench.bench(lambda: compiled(*inputs), **kw)["median"]
            except Exception as ex:
                out["compile_error"] = f"{type(ex).__name__}: {str(ex)[:200]}"
            lap("bench_compile")
        if benchmark and cand is not None and opts.get("cudagraph", True):
            try:
                g = torch.cuda.CUDAGraph()
                s = torch.cuda.Stream()
                s.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(s):
                    cand(*cin)
                torch.cuda.current_stream().wait_stream(s)
                with torch.cuda.graph(g):
                    cand(*cin)
                out["cudagraph_ms"] = bench.bench(g.replay, **kw)["median"]
            except Exception as ex:
                out["cudagraph_error"] = f"{type(ex).__name__}: {str(ex)[:200]}"
            lap("bench_cudagraph")

    if cand is not None and out.get("measured", True):
        dt = str(ref_out[0].dtype).replace("torch.", "") if ref_out else "float32"
        # `sol_scale` exists only so a GPU test can drive this rejection path with a real kernel.
        sol_ms = (
            max(nbytes / SOL_BANDWIDTH, flops / SOL_FLOPS.get(dt, 1e15))
            * 1e3
            * float(opts.get("sol_scale", 1.0))
        )
        out["sol_ms"] = sol_ms
        if out["candidate_ms"] < sol_ms:
            out.update(
                measured=False,
                reason=f"timing.speed_of_light: candidate median {out['candidate_ms']:.4g} ms "
                f"is below the speed-of-light bound {sol_ms:.4g} ms ({nbytes:.3g} B read, {flops:.3g} FLOP): "
                "a measurement error, not a speedup",
            )
    out.setdefault("measured", True)
    out["seconds"] = time.monotonic() - t0
    return out


def run_do_bench(job) -> dict[str, Any]:
    """Independent baseline numbers with triton.testing.do_bench (used by gpu_selfcheck)."""
    import triton.testing

    task = load_task(job.task_source, dict(job.size_overrides))
    torch.manual_seed(1234)
    ref = task.module.Model(*task.init_args()).cuda().eval()
    inputs = to_device(task.inputs(4321, "cuda"), "cuda")
    with torch.no_grad():
        eager = triton.testing.do_bench(lambda: ref(*inputs), warmup=25, rep=100, return_mode="median")
        compiled = torch.compile(ref)
        compiled(*inputs)
        comp = triton.testing.do_bench(lambda: compiled(*inputs), warmup=25, rep=100, return_mode="median")
    return {"eager_ms": float(eager), "compile_ms": float(comp), "pid": os.getpid()}
