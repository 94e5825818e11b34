"""The `time` and `benchmark` jobs (CUDA only): the candidate's claim, checked against the judge's clock.

The candidate runs in the confined runner, which times its own forward with
`triton.testing.do_bench` (warm-up, L2 flushed before every call, CUDA events, median and
p20/p80). That median is a claim from a process the candidate controls, so the judge checks it:

- **wall clock**: the judge asks for many back-to-back calls (about a quarter of a second's
  worth at the claimed speed) on fresh inputs and measures from sending the request to reading
  the last call's output, which must match the reference. A claimed median well below what the
  judge's clock saw per call is rejected (`timing.disagree`), unless the two differ by at most
  ADOPT_RATIO plus ADOPT_HOST_MS per call and the claim is not below the speed of light: then
  it is timed again, and if the clocks still differ the judge's own (slower) wall-clock figure
  is the kernel's time (`timed_by: judge_wall`; a launch-bound network timed while other jobs
  load the CPU, or a kernel of a few microseconds whose forward is mostly host work);
- **speed of light**: a median below max(bytes read / peak bandwidth, flops / peak flop rate)
  cannot be real (`timing.speed_of_light`). Only bytes READ count (inputs + parameters): L2 is
  flushed before each call, but writes can be absorbed by the 60 MB L2 before the end event;
- **fresh inputs after the timed calls** give the right answer (`runtime.stale`), and the timed
  forward launches the candidate's own kernels (`runtime.no_launch`, a claim).

Eager PyTorch and torch.compile are timed here in the judge, with the same do_bench protocol, on
the same inputs and under the same exclusive GPU lock. They are cached per (task, sizes, GPU,
versions) under the EGG home when the toolbox names a cache directory, so a task's baselines are
measured once per machine, not once per candidate; the report says which figures were cached.
The speed-of-light counts (bytes read, FLOPs of the reference) are cached the same way.
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import json
import math
import os
import platform
import time
from pathlib import Path
from typing import Any

import torch

from tools.worker.common import SAME_CHUNK, as_outputs, chunk_ranges, load_task, module_libraries, to_device
from tools.worker.gpumem import ensure_cuda_context, preload_libraries, visible_gpu_query
from tools.worker.laps import Laps, cpu_times

# A stage timing leaves it to the runner whether to time the forward's CUDA-graph replay too
# (runner.op_time: forwards of CUDAGRAPH_PROBE_LAUNCHES or more launches): the profiler's
# host-bound evidence.
CUDAGRAPH_PROBE = "auto"
# The seeds of the weights and inputs a timing job runs on (the wall check draws fresh inputs)
WEIGHT_SEED, INPUT_SEED = 1234, 4321
# Upper bounds used for the speed-of-light check (deliberately above any real H200 number).
SOL_BANDWIDTH = 5.0e12  # bytes/s (H200 spec is 4.8 TB/s)
SOL_FLOPS = {"float32": 1.0e15, "float16": 2.0e15, "bfloat16": 2.0e15, "float64": 1.0e14}
# The claimed median may be this much faster than the judge's clock per call (plus WALL_SLACK_MS)
# before it is called a lie: the wall loop runs without L2 flushes, so it is usually faster.
WALL_TOLERANCE = 1.5
WALL_SLACK_MS = 0.02
WALL_TARGET_S = 0.25
# Past the tolerance but within this ratio, the claim is timed again; if the clocks still differ,
# the judge's wall-clock figure (slower, never the candidate's) is the kernel's time
# (`timed_by: judge_wall`). Beyond it the claim is a lie and the kernel is not measured.
ADOPT_RATIO = 3.0
# ... plus this much per call: the host's own cost of a forward (Python, allocations, launches),
# which the events median hides behind do_bench's L2 flush and the wall loop does not. On the
# H100 (2026-12-06) a verified one-launch reduction claimed 0.0121 ms (eager 0.0218, compile
# 0.0120) and the judge's clock saw 0.0382 ms per call over 5000 calls: a host-bound forward, not
# a lie, yet beyond 3x, and the task was lost. A claim below the speed-of-light bound is never
# adopted: that is a lie whatever the clocks say.
ADOPT_HOST_MS = 0.05
# torch.compile's output is held to the checker's bar (compile_accuracy) for inputs and weights of
# up to this many bytes: the float64 twin of the reference needs about twice them again.
COMPILE_CHECK_MAX_BYTES = 1 << 28
# The judge's allowance for the runner's own work inside the wall window: drawing the inputs
# (timed here on the same seed) and copying the last output back (at least this fast).
COPY_BYTES_PER_S = 2.0e9


def environment() -> dict[str, Any]:
    env: dict[str, Any] = {"torch": torch.__version__, "python": platform.python_version()}
    try:
        import triton

        env["triton"] = triton.__version__
    except Exception:
        env["triton"] = None
    env["cuda"] = torch.version.cuda
    if torch.cuda.is_available():
        # from the driver, not torch: torch's device name would make this process's CUDA context
        # (a screened job's judge makes none, tools/worker/evaluate.py)
        got = visible_gpu_query(["name", "driver_version", "clocks.sm", "clocks.mem"])
        try:
            name, drv, sm, mem = got or ()
            env.update(gpu=name, driver=drv, sm_clock_mhz=int(float(sm)), mem_clock_mhz=int(float(mem)))
        except ValueError:
            # nvidia-smi missing: torch names the GPU, and the environment lacks the clocks
            # (nothing else depends on them)
            env["gpu"] = torch.cuda.get_device_name()
    return env


# Nice value of the judge and its runner while they time. Other jobs compile their kernels
# outside the GPU lock (runner.op_precompile) and can keep every core busy; a forward whose host
# code (launches, PyTorch calls) takes longer than its GPU work is then timed against the
# scheduler: on the H200 the same conv-transpose kernel measured 0.421 and 0.611 ms in two runs
# while its CUDA-graph replay measured 0.352 and 0.353 ms. Lowering a nice value needs root
# (CAP_SYS_NICE); elsewhere priorities stay as they are and the timing says so.
TIMING_NICE = -10


@contextlib.contextmanager
def timing_priority(pids: list[int], out: dict[str, Any]):
    """Run the enclosed timed section with `pids` (this process and the runner) at TIMING_NICE,
    and record in `out` whether it did and how busy the host's CPUs were meanwhile."""
    before: dict[int, int] = {}
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        for pid in pids:
            try:
                before[pid] = os.getpriority(os.PRIO_PROCESS, pid)
                os.setpriority(os.PRIO_PROCESS, pid, TIMING_NICE)
            except OSError:
                before.pop(pid, None)
    out["host_priority"] = f"nice {TIMING_NICE}" if before else "unchanged (needs root)"
    t0 = cpu_times()
    try:
        yield
    finally:
        for pid, nice in before.items():
            try:
                os.setpriority(os.PRIO_PROCESS, pid, nice)
            except OSError:
                pass
        t1 = cpu_times()
        if t0 is not None and t1 is not None and t1[0] > t0[0]:
            out["host_cpu_busy"] = round(1.0 - (t1[1] - t0[1]) / (t1[0] - t0[0]), 3)


def bench(fn, *, warmup_ms: float = 25.0, rep_ms: float = 100.0) -> dict[str, float]:
    """triton.testing.do_bench: warm-up, L2 flushed before each call, CUDA events; median, p20, p80."""
    import triton.testing

    med, p20, p80 = triton.testing.do_bench(fn, warmup=warmup_ms, rep=rep_ms, quantiles=[0.5, 0.2, 0.8])
    return {"median": float(med), "p20": float(p20), "p80": float(p80)}


def rel_err(got: list[Any], want: list[Any], chunk: int = SAME_CHUNK) -> float:
    """Largest error relative to each output's largest magnitude (inf on NaN in one of the two,
    or a shape mismatch; NaN in both is no error), in float64 a chunk of flat elements at a
    time. Whole-tensor float64 copies of both outputs, their difference and NaN masks took about
    ten times an output's size: the judge's timing of a softmax over 6 GiB peaked at 67.5 GiB on
    the H200, its check at 36 GiB."""
    worst = 0.0
    for x, y in zip(got, want, strict=False):
        if not isinstance(x, torch.Tensor) or not isinstance(y, torch.Tensor) or x.shape != y.shape:
            return float("inf")
        xf, yf = x.detach().reshape(-1), y.detach().reshape(-1)
        e = mag = 0.0
        for s, t in chunk_ranges(xf.numel(), chunk):
            a, b = xf[s:t].double(), yf[s:t].double()
            an, bn = torch.isnan(a), torch.isnan(b)
            if bool((an != bn).any()):
                return float("inf")
            d = torch.where(an & bn, torch.zeros_like(a), (a - b).abs())
            ce = float(d.max())
            if ce != ce:  # inf - inf
                return float("inf")
            e = max(e, ce)
            mag = max(mag, float(torch.where(bn, torch.zeros_like(b), b.abs()).max()))
        if xf.numel():
            worst = max(worst, e / (mag + 1e-30))
    return worst


def compile_accuracy(
    ref: Any,
    compiled: Any,
    inputs: list[Any],
    tolerance: float | None = None,
    native: list[Any] | None = None,
) -> dict[str, Any]:
    """Whether torch.compile's output on the timed inputs passes the bar a candidate must pass
    (tools/worker/check.py compare: the float64 twin of the reference, the tolerance plus 4x the
    reference's own error). Eager convolutions pick their cuDNN algorithm per layout, and a
    compiled graph that moves a convolution to channels-last can get a TF32 kernel that eager's
    NCHW one is not; a candidate doing the same is refused. Never raises: {"within_bar": True,
    "max_abs", "allowed"}, {"within_bar": False, "reason"}, {"skipped": why} or {"error": why}.
    `native`: the reference's outputs on these inputs when the caller has them already."""
    from tools.worker.check import REF_ERR_MULT, Rejected, compare, compare_stats, tolerance_for
    from tools.worker.common import clone_inputs, float64_twin_mode, upcast_copies

    nbytes = sum(x.numel() * x.element_size() for x in inputs if isinstance(x, torch.Tensor))
    if isinstance(ref, torch.nn.Module):
        nbytes += sum(t.numel() * t.element_size() for t in [*ref.parameters(), *ref.buffers()])
    if nbytes > COMPILE_CHECK_MAX_BYTES:
        return {
            "skipped": f"inputs and weights of {nbytes / 2**30:.2f} GiB (the float64 twin would need twice that)"
        }
    stats = compare_stats()
    try:
        with torch.no_grad():
            if native is None:
                torch.manual_seed(0)
                native = as_outputs(ref(*clone_inputs(inputs)))
            torch.manual_seed(1)
            again = as_outputs(ref(*clone_inputs(inputs)))
            if any(
                isinstance(a, torch.Tensor) and not torch.equal(a, b)
                for a, b in zip(native, again, strict=True)
            ):
                # random ops: torch.compile draws its own numbers, so no comparison can hold
                return {"skipped": "the reference's output changes from call to call (random ops)"}
            del again
            got = as_outputs(compiled(*clone_inputs(inputs)))
            twin = copy.deepcopy(ref).double()
            with float64_twin_mode():
                full = as_outputs(twin(*upcast_copies(inputs)))
            del twin
            for i, (c, r64, rn) in enumerate(zip(got, full, native, strict=True)):
                if isinstance(rn, torch.Tensor):
                    compare("torch.compile", i, c, r64, rn, tolerance, stats)
    except Rejected as e:
        return {"within_bar": False, "reason": e.reason[:400]}
    except Exception as e:  # noqa: BLE001 - a note on the baseline, never a failed timing
        return {"error": f"{type(e).__name__}: {str(e)[:200]}"}
    atol, rtol = stats.get("atol"), stats.get("rtol")
    if atol is None:
        atol, rtol, _ = tolerance_for(torch.float32, tolerance)
    return {
        "within_bar": True,
        "max_abs": stats["max_abs"],
        "allowed": max(float(atol), REF_ERR_MULT * stats["ref_err"]),
        "rtol": rtol,
    }


class BaselineCache:
    """Eager and torch.compile medians per (task source, sizes, GPU, versions), as JSON files.

    Written only by judges (trusted processes); the runner never sees the directory."""

    def __init__(self, directory: str | None, job: Any, env: dict[str, Any]) -> None:
        self.dir = Path(directory) if directory else None
        ident = json.dumps(
            [
                job.task_source,
                sorted(job.size_overrides.items()),
                env.get("gpu"),
                env.get("torch"),
                env.get("triton"),
            ]
        )
        self.key = hashlib.sha256(ident.encode()).hexdigest()[:32]

    def get(self, what: str) -> dict[str, Any] | None:
        if self.dir is None:
            return None
        try:
            return json.loads((self.dir / f"{self.key}.{what}.json").read_text())
        except (OSError, ValueError):
            return None

    def put(self, what: str, value: dict[str, Any]) -> None:
        if self.dir is None:
            return
        with contextlib.suppress(OSError):
            self.dir.mkdir(parents=True, exist_ok=True)
            tmp = self.dir / f"{self.key}.{what}.{os.getpid()}.tmp"
            tmp.write_text(json.dumps({**value, "measured_at": time.strftime("%Y-%m-%dT%H:%M:%S")}))
            tmp.replace(self.dir / f"{self.key}.{what}.json")


def run_time(
    job, *, benchmark: bool, runner: Any = None, staged_lock: bool = False, wall_check: bool = True
) -> dict[str, Any]:
    """Time the candidate (if any) in the runner, eager and (benchmark) torch.compile here.

    `runner`: the evaluate job's runner, already loaded (its caller holds the exclusive lock);
    otherwise one is started here, before this process touches CUDA. staged_lock: take the
    per-GPU lock here, shared for the set-up and exclusive only for the timed section; a long
    Inductor compile holds it only while it benchmarks configs (`compile_warmup_lock`).
    wall_check=False (a screening timing, tools/worker/evaluate.py): the runner's median is
    taken without the judge's wall-clock check and fresh-input recheck, and the result says so
    (`wall_checked: False`). Such a figure only screens a candidate out (a kernel screened out is
    never a result, and one that claimed to be slower only loses); a contender is timed again
    with the full protocol after its check, and that timing is the one kept."""
    from tools.worker.describe import bytes_and_flops
    from tools.worker.gpulock import gpu_lock
    from tools.worker.judge import RunnerFailure, RunnerProcess

    t0 = time.monotonic()
    if job.device != "cuda":
        return {"measured": False, "reason": "timing needs a CUDA GPU; not measured on CPU", "seconds": 0.0}
    own = runner is None and job.candidate_source is not None
    if own:
        runner = RunnerProcess(job, timeout_s=float(job.options.get("runner_timeout_s", 280)))
    try:
        if not torch.cuda.is_available():
            return {
                "measured": False,
                "reason": "timing needs a CUDA GPU; none is visible",
                "seconds": time.monotonic() - t0,
            }
        return _time(
            job, benchmark, runner, staged_lock, t0, gpu_lock, bytes_and_flops, RunnerFailure, wall_check
        )
    finally:
        if own and runner is not None:
            runner.close()


def _time(
    job, benchmark, runner, staged_lock, t0, gpu_lock, bytes_and_flops, RunnerFailure, wall_check=True
) -> dict[str, Any]:
    lap = Laps()

    def locked(exclusive: bool, step: str):
        return gpu_lock(exclusive, step) if staged_lock else contextlib.nullcontext()

    opts = job.options
    kw = {"warmup_ms": float(opts.get("warmup_ms", 25)), "rep_ms": float(opts.get("rep_ms", 100))}
    env = environment()
    out: dict[str, Any] = {"env": env, "phases": lap.phases}
    cache = BaselineCache(opts.get("baseline_cache"), job, env)
    lap("env")

    def refuse(rule: str, why: str) -> dict[str, Any]:
        out.update(measured=False, reason=f"{rule}: {why}", seconds=time.monotonic() - t0)
        return out

    compiled = None
    err0 = 0.0
    weight_seed, input_seed = WEIGHT_SEED, INPUT_SEED
    cached_eager = cache.get("eager") if not benchmark else None
    if not wall_check and runner is not None and cached_eager is not None:
        return _screen(job, runner, locked, lap, out, refuse, cached_eager, kw, RunnerFailure, t0)
    # The task's module and its reference model are made on the CPU before the GPU lock (a job
    # waiting to time waits for every shared holder, so CPU work under it delays all timing),
    # and the runner makes its candidate's meanwhile (runner.op_stage).
    staging = _stage_build(runner, job, weight_seed) if staged_lock else False
    task = load_task(job.task_source, dict(job.size_overrides))
    init = task.init_args()
    torch.manual_seed(weight_seed)
    ref_cpu = task.module.Model(*init)
    # a screened evaluate job's judge makes its context only when it needs one: here, before the
    # lock, not inside it (tools/worker/evaluate.py)
    ensure_cuda_context()
    # and loads the libraries the reference calls (cuDNN for a convolution), also before the lock
    preload_libraries(module_libraries(ref_cpu))
    if staging:
        _staged_reply(runner, RunnerFailure)
    lap("load")
    with locked(False, "time.setup"), torch.no_grad():
        ref = ref_cpu.cuda().eval()
        del ref_cpu
        inputs = to_device(task.inputs(input_seed, "cuda"), "cuda")
        ref_out = as_outputs(ref(*inputs))
        lap("setup")
        if runner is not None:
            try:
                r, why = _first_call(runner, job, weight_seed, input_seed, ref_out)
                if why is not None:
                    return refuse(*why)
                first = _read_outputs(runner, r, ref_out)
            except RunnerFailure as f:
                return refuse(f.rule, f.message)
            if first is None:
                return refuse("output.shape", "the timed forward's outputs do not match the reference's")
            # The candidate's own error on these inputs (already verified by `check`) sets the bar
            # for the fresh-input recheck after timing, so TF32-class differences are not "stale".
            err0 = rel_err(first, ref_out)
            del first
            out["candidate_launches"] = int(r.get("launches") or 0)
            lap("first_call")
        nbytes, flops = _roofline_counts(cache, ref, inputs, bytes_and_flops)
        torch.cuda.synchronize()
        lap("roofline_bounds")
    # `sol_scale` exists only so a GPU test can drive this rejection path with a real kernel.
    dt = str(ref_out[0].dtype).replace("torch.", "") if ref_out else "float32"
    sol_ms = (
        max(nbytes / SOL_BANDWIDTH, flops / SOL_FLOPS.get(dt, 1e15)) * 1e3 * float(opts.get("sol_scale", 1.0))
    )
    cached_compile = cache.get("compile") if benchmark else None
    if benchmark and cached_compile is None:
        with torch.no_grad():
            try:
                compiled = torch.compile(ref)
                with compile_warmup_lock(gpu_lock if staged_lock else None, out):
                    compiled(*inputs)
            except Exception as ex:  # recorded, not hidden: the report shows compile_ms=None and why
                compiled = None
                out["compile_error"] = f"{type(ex).__name__}: {str(ex)[:200]}"
        lap("compile_warmup")
        if compiled is not None:
            # is torch.compile's own output within the bar a candidate must pass? (cached with
            # its median; the report names the tasks where it is not)
            with locked(False, "time.compile_check"):
                out["compile_check"] = compile_accuracy(ref, compiled, inputs, opts.get("tolerance"), ref_out)
                torch.cuda.synchronize()
            lap("compile_check")

    pids = [os.getpid()] + ([runner.pid] if runner is not None and getattr(runner, "pid", 0) else [])
    with locked(True, "time.kept"), torch.no_grad(), timing_priority(pids, out):
        lap("wait_exclusive")
        if runner is not None:
            try:
                # Stage timings probe the CUDA-graph replay only for a forward of many launches
                # (the runner decides): the profiler's evidence of a host-bound forward.
                graph = bool(opts.get("cudagraph", True)) if benchmark else CUDAGRAPH_PROBE
                c = runner.request("time", cudagraph=graph, **kw)
            except RunnerFailure as f:
                return refuse(f.rule, f.message)
            if not c.get("ok"):
                return refuse(str(c.get("rule") or "run.error"), str(c.get("error"))[:400])
            med = _positive(c.get("median"))
            if med is None:
                return refuse("timing.disagree", "the candidate's process reported no usable median")
            out.update(_claim(c, med), candidate_launches=int(c.get("launches") or 0))
            if c.get("cudagraph_ms") is not None:
                out["cudagraph_ms"] = _positive(c.get("cudagraph_ms"))
            if out["noise"] > NOISY_TIMING:
                try:
                    again = runner.request("time", cudagraph=False, **kw)
                except RunnerFailure as f:
                    return refuse(f.rule, f.message)
                med = steadier(out, again, med)
            lap("bench_candidate")
            out["wall_checked"] = wall_check
            verdict = _wall_check(task, ref, runner, med, err0, out, RunnerFailure) if wall_check else None
            lap("wall_check")
            if verdict is not None and _near_miss(verdict, out, med, sol_ms):
                # A launch-bound forward timed while other jobs load the CPU can miss the
                # tolerance without any lie: time it again (see `recheck`).
                try:
                    verdict = recheck(
                        lambda: runner.request("time", cudagraph=False, **kw),
                        lambda m: _wall_check(task, ref, runner, m, err0, out, RunnerFailure),
                        med,
                        out,
                        sol_ms,
                    )
                except RunnerFailure as f:
                    return refuse(f.rule, f.message)
                lap("wall_recheck")
            if verdict is not None:
                return refuse(*verdict)
        if cached_eager is not None:
            e = cached_eager
            out["baseline"] = f"cached {cached_eager.get('measured_at')}"
        else:
            e = bench(lambda: ref(*inputs), **kw)
            cache.put("eager", e)
            out["baseline"] = "measured"
        lap("bench_eager")
        out["eager_ms"], out["eager_p20_ms"], out["eager_p80_ms"] = e["median"], e["p20"], e["p80"]
        if cached_compile is not None:
            if cached_compile.get("median") is not None:
                out["compile_ms"] = cached_compile["median"]
                out["compile_p20_ms"], out["compile_p80_ms"] = cached_compile["p20"], cached_compile["p80"]
            else:
                out["compile_error"] = cached_compile.get("error")
            if cached_compile.get("check") is not None:
                out["compile_check"] = cached_compile["check"]
            out["baseline"] = f"eager measured, torch.compile cached {cached_compile.get('measured_at')}"
        elif compiled is not None:
            try:
                cb = bench(lambda: compiled(*inputs), **kw)
                out["compile_ms"], out["compile_p20_ms"], out["compile_p80_ms"] = (
                    cb["median"],
                    cb["p20"],
                    cb["p80"],
                )
                cache.put("compile", {**cb, "check": out.get("compile_check")})
            except Exception as ex:
                out["compile_error"] = f"{type(ex).__name__}: {str(ex)[:200]}"
            lap("bench_compile")
        elif benchmark and out.get("compile_error"):
            cache.put("compile", {"median": None, "error": out["compile_error"]})

    if runner is not None:
        if out["candidate_launches"] == 0:
            return refuse(
                "runtime.no_launch", "the timed forward launched none of the candidate's own Triton kernels"
            )
        out["sol_ms"] = sol_ms
        if out["candidate_ms"] < sol_ms:
            return refuse(
                "timing.speed_of_light",
                f"candidate median {out['candidate_ms']:.4g} ms is below the speed-of-light bound "
                f"{sol_ms:.4g} ms ({nbytes:.3g} B read, {flops:.3g} FLOP): a measurement error, not a speedup",
            )
    out.setdefault("measured", True)
    out["seconds"] = time.monotonic() - t0
    return out


def _roofline_counts(
    cache: BaselineCache, ref: Any, inputs: list[Any], bytes_and_flops
) -> tuple[float, float]:
    """The reference's bytes read and FLOPs for the speed-of-light bound: counted once per task,
    sizes, GPU and versions and cached beside the eager baseline, since counting the FLOPs runs
    the reference once more under a counting mode, inside the timing's shared GPU hold (every
    contender of a task and its final benchmark counted the same numbers again)."""
    got = cache.get("roofline")
    if got is not None:
        try:
            nbytes, flops = float(got["bytes"]), float(got["flops"])
            if all(math.isfinite(v) and v >= 0 for v in (nbytes, flops)):
                return nbytes, flops
        except (KeyError, TypeError, ValueError):
            pass  # an unreadable entry is counted again and rewritten
    from tools.worker.describe import flop_counter

    nbytes = bytes_and_flops(ref, inputs, [])  # reads only: see the module docstring
    with flop_counter(ref) as counted:
        ref(*inputs)
    flops = float(counted())
    cache.put("roofline", {"bytes": nbytes, "flops": flops})
    return nbytes, flops


def _stage_build(runner, job, weight_seed: int) -> bool:
    """Ask a GPU job's runner for its build's CPU part (runner.op_stage) before the GPU lock is
    taken for the build; True when the request is on its way (its reply: `_staged_reply`)."""
    if runner is None or job.device != "cuda":
        return False
    from tools.worker.judge import RunnerFailure

    try:
        if runner.load(job) is not None:  # a no-op once loaded
            return False  # the failed load is reported by the build's step
        runner.start("stage", overrides=dict(job.size_overrides), weight_seed=weight_seed)
    except RunnerFailure:
        return False  # the build's own request raises it again and refuses the timing
    return True


def _staged_reply(runner, RunnerFailure) -> None:
    with contextlib.suppress(RunnerFailure):  # the build's own request reports a dead runner
        runner.finish("stage")


def _screen(job, runner, locked, lap, out, refuse, cached_eager, kw, RunnerFailure, t0) -> dict[str, Any]:
    """A screening timing (run_time's wall_check=False with the task's eager time cached): the
    runner's median under the exclusive lock, after the candidate's first call (the recording
    call's, kept by the runner, or else one under the shared lock), and nothing of the judge's
    own on the GPU. The reference is not made here: its outputs, its
    roofline counts and the speed-of-light bound serve the wall check and the kept timings, which
    a contender gets in full after its check. The set-up the judge skips (the reference's first
    forward in a fresh process, 1.0 s median and 2.7 s at the 90th percentile on the H100 suite)
    held the GPU shared, and every timing job queued behind it."""
    if getattr(runner, "ready_to_time", False):
        # The compile step's recording call left its model and inputs in the runner, called once
        # (compile_job.run_compile): its kernels are loaded and any autotuning is done, so the
        # first call under a second shared hold is not needed. Its weights are ModelNew's own
        # (seed 0), not the reference's: a screening timing only ever screens a candidate out.
        out["first_call"] = "recording"
    else:
        if _stage_build(runner, job, WEIGHT_SEED):
            _staged_reply(runner, RunnerFailure)
        with locked(False, "time.screen_first_call"), torch.no_grad():
            try:
                _, why = _first_call(runner, job, WEIGHT_SEED, INPUT_SEED)
            except RunnerFailure as f:
                return refuse(f.rule, f.message)
            if why is not None:
                return refuse(*why)
            lap("first_call")
    pids = [os.getpid()] + ([runner.pid] if getattr(runner, "pid", 0) else [])
    with locked(True, "time.screen"), torch.no_grad(), timing_priority(pids, out):
        lap("wait_exclusive")
        try:
            c = runner.request("time", cudagraph=False, **kw)
        except RunnerFailure as f:
            return refuse(f.rule, f.message)
        lap("bench_candidate")
    if not c.get("ok"):
        return refuse(str(c.get("rule") or "run.error"), str(c.get("error"))[:400])
    med = _positive(c.get("median"))
    if med is None:
        return refuse("timing.disagree", "the candidate's process reported no usable median")
    launches = int(c.get("launches") or 0)
    if launches == 0:
        return refuse(
            "runtime.no_launch", "the timed forward launched none of the candidate's own Triton kernels"
        )
    out.update(_claim(c, med), candidate_launches=launches, wall_checked=False)
    out["eager_ms"], out["eager_p20_ms"], out["eager_p80_ms"] = (
        cached_eager["median"],
        cached_eager["p20"],
        cached_eager["p80"],
    )
    out["baseline"] = f"cached {cached_eager.get('measured_at')}"
    out.update(measured=True, seconds=time.monotonic() - t0)
    return out


@contextlib.contextmanager
def compile_warmup_lock(gpu_lock: Any, out: dict[str, Any]):
    """The GPU lock for torch.compile's first call: Inductor's compile is seconds of CPU work, and
    a reader holding the lock through it kept every timing job, and every reader queued behind
    it, off the GPU (H200 suite run: waits for the exclusive lock clustered in the final
    benchmarks' windows). So the call holds no lock, except where Inductor benchmarks its
    kernels' configs: that holds it exclusively, so compile's own autotuning runs on a quiet GPU
    (under the shared lock it raced other jobs' checks). The one forward that ends the call is
    the only GPU work left unlocked. Where that hook is missing (another torch), the whole call
    holds the lock shared, as before. `out["compile_warmup_lock"]` says which applied."""
    if gpu_lock is None:  # the caller holds the lock already (or there is none)
        out["compile_warmup_lock"] = "caller's"
        yield
        return
    try:
        from torch._inductor.runtime.triton_heuristics import CachingAutotuner

        original = CachingAutotuner.benchmark_all_configs
    except (ImportError, AttributeError):
        out["compile_warmup_lock"] = "shared (no autotuner hook in this torch)"
        with gpu_lock(False, "time.compile_warmup"):
            yield
        return

    def benchmark_all_configs(self, *args, **kwargs):
        with gpu_lock(True, "time.inductor_autotune"):
            return original(self, *args, **kwargs)

    CachingAutotuner.benchmark_all_configs = benchmark_all_configs
    out["compile_warmup_lock"] = "autotuning exclusive, compile unlocked"
    try:
        yield
    finally:
        CachingAutotuner.benchmark_all_configs = original


def _positive(v: Any) -> float | None:
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) and f > 0 else None


def _first_call(
    runner: Any, job: Any, weight_seed: int, input_seed: int, outs_like: list[Any] | None = None
) -> tuple[dict[str, Any], tuple[str, str] | None]:
    """Load the candidate, build it with `weight_seed` and call it once on `input_seed` (the
    runner's failures raise): (the call's reply, None), or ({}, (rule, why)) to refuse the timing
    with. `outs_like`: outputs whose size the channel's slab is made ready for before each step."""
    failed = runner.load(job)
    if failed is not None:
        return {}, (str(failed["rule"]), str(failed["error"]))
    r: dict[str, Any] = {}
    for op, kw in (("build", {"weight_seed": weight_seed}), ("call", {"input_seed": input_seed})):
        if outs_like is not None:
            _size_slab(runner, outs_like)
        r = runner.request(op, overrides=dict(job.size_overrides), **kw)
        if not r.get("ok"):
            return {}, (str(r.get("rule") or "run.error"), str(r.get("error"))[:400])
    return r, None


def _size_slab(runner: Any, outs: list[Any]) -> None:
    from tools.worker import channel

    need = sum(o.numel() * o.element_size() for o in outs if isinstance(o, torch.Tensor))
    channel.reserve(runner.slab, need)


def _read_outputs(runner: Any, reply: dict[str, Any], want: list[Any]) -> list[Any] | None:
    """The runner's outputs, when they have the reference's count, types, shapes and dtypes."""
    from tools.worker import channel
    from tools.worker.common import dtype_name

    descs = list(reply.get("outputs") or [])
    if len(descs) != len(want):
        return None
    got = []
    for d, w in zip(descs, want, strict=True):
        if (
            d.get("type") != "torch.Tensor"
            or d.get("shape") != list(w.shape)
            or d.get("dtype") != dtype_name(w.dtype)
            or not d.get("written")
        ):
            return None
        try:
            got.append(channel.read_tensor(runner.slab, d, "cuda"))
        except channel.ChannelError:
            return None
    return got


def _wall_check(
    task, ref, runner, med: float, err0: float, out: dict[str, Any], RunnerFailure
) -> tuple[str, str] | None:
    """Many calls timed by this process's clock on fresh inputs; the last output must be right.
    Returns (rule, why) when the claim does not hold."""
    seed = 98765
    iters = int(min(5000, max(5, math.ceil(WALL_TARGET_S / (med / 1e3)))))
    t_gen = time.perf_counter()
    fresh = to_device(task.inputs(seed, "cuda"), "cuda")
    torch.cuda.synchronize()
    gen_s = time.perf_counter() - t_gen
    # the reference's own inputs, no copy: the runner makes its own from the seed
    want = as_outputs(ref(*fresh))
    del fresh
    out_bytes = sum(o.numel() * o.element_size() for o in want if isinstance(o, torch.Tensor))
    _size_slab(runner, want)
    t_send = time.perf_counter()
    try:
        started = runner.request(
            "wall", input_seed=seed, iters=iters, timeout_s=max(60.0, 20 * iters * med / 1e3)
        )
        if started.get("phase") != "start":
            return ("timing.disagree", "the candidate's process broke the wall-clock protocol")
        r = runner.recv_more("wall", timeout_s=max(60.0, 20 * iters * med / 1e3))
    except RunnerFailure as f:
        return (f.rule, f.message)
    elapsed = time.perf_counter() - t_send
    if not r.get("ok"):
        return (str(r.get("rule") or "run.error"), str(r.get("error"))[:400])
    allowance = 2 * gen_s + out_bytes / COPY_BYTES_PER_S + 0.005
    wall_ms = max(0.0, elapsed - allowance) / iters * 1e3
    out["wall_ms"] = wall_ms
    got = _read_outputs(runner, r, want)
    if got is None:
        return ("runtime.stale", "the timed calls' last output does not match the reference's shapes")
    err1 = rel_err(got, want)
    if not err1 <= max(4 * err0, 1e-3):
        return (
            "runtime.stale",
            "outputs after the timed calls do not match the reference for fresh inputs (results cached "
            f"or computed elsewhere): relative error {err1:.3g} vs {err0:.3g} before timing",
        )
    if wall_ms > med * WALL_TOLERANCE + WALL_SLACK_MS:
        return (
            "timing.disagree",
            f"the candidate's process claims a median of {med:.4g} ms per call, but the judge's clock saw "
            f"{wall_ms:.4g} ms per call over {iters} calls",
        )
    return None


def recheck(
    time_again, wall_again, med: float, out: dict[str, Any], floor_ms: float = 0.0
) -> tuple[str, str] | None:
    """After a near miss of the wall check: the candidate's median once more, checked again.
    Confirmed this time: that median stands (`timed_by: events, second try`). A near miss again:
    the kernel's time is the lower of the judge's two wall-clock figures, each well above the
    claim, so the figure is never the candidate's own (`timed_by: judge_wall`, `claimed_ms` the
    claim). Anything else: the second verdict stands. floor_ms: the speed-of-light bound (see
    `_near_miss`)."""
    first_wall = out["wall_ms"]
    c = time_again()
    med2 = _positive(c.get("median")) if c.get("ok") else None
    if med2 is None:
        return ("timing.disagree", "the candidate's process reported no usable median on the second try")
    verdict = wall_again(med2)
    if verdict is None:
        out.update(_claim(c, med2), timed_by="events, second try")
        return None
    if not _near_miss(verdict, out, med2, floor_ms):
        return verdict
    wall = min(first_wall, out["wall_ms"])
    out.update(
        candidate_ms=wall,
        candidate_p20_ms=wall,
        candidate_p80_ms=wall,
        claimed_ms=min(med, med2),
        timed_by="judge_wall",
        wall_ms=wall,
    )
    return None


# A kept timing whose spread ((p80 - p20) / median) is above this is taken once more in the same
# exclusive section, and the steadier of the two stands. On the H100 (2026-12-06, call 3 of the
# suite) 7 of 23 final benchmarks spread over 10% on a jittery host: one kernel's median read
# 0.166 ms against its p20 of 0.096 and its CUDA-graph replay of 0.095 (the same file measured
# 0.096 ms with a 1% spread on another host); none of 26 did on the host before.
NOISY_TIMING = 0.10


def steadier(out: dict[str, Any], again: dict[str, Any], med: float) -> float:
    """After a timing too noisy to trust (`out`, median `med`): keep the steadier of it and the
    retake `again` (a failed or unusable retake keeps the first). Both are recorded in
    out["noisy_retake"]; returns the median that stands, for the wall check."""
    med2 = _positive(again.get("median")) if again.get("ok") else None
    first = {"candidate_ms": med, "noise": out["noise"]}
    if med2 is None:
        out["noisy_retake"] = [first, {"error": str(again.get("error") or "no usable median")[:200]}]
        return med
    second = _claim(again, med2)
    out["noisy_retake"] = [first, {"candidate_ms": med2, "noise": second["noise"]}]
    if second["noise"] < out["noise"]:
        out.update(second)
        return med2
    return med


def _claim(c: dict[str, Any], med: float) -> dict[str, float]:
    """The candidate's timing fields from its `time` reply with a usable median `med`."""
    p20, p80 = _positive(c.get("p20")) or med, _positive(c.get("p80")) or med
    return {"candidate_ms": med, "candidate_p20_ms": p20, "candidate_p80_ms": p80, "noise": (p80 - p20) / med}


def _near_miss(verdict: tuple[str, str], out: dict[str, Any], med: float, floor_ms: float = 0.0) -> bool:
    """A `timing.disagree` whose clocks differ by at most ADOPT_RATIO plus a forward's host cost
    (ADOPT_HOST_MS): contention or a host-bound forward, not a lie. Never for a claim below
    `floor_ms` (the speed-of-light bound): the kernel's time would then be the judge's figure,
    and a claim that no GPU can reach is refused as such."""
    wall = out.get("wall_ms")
    return (
        verdict[0] == "timing.disagree"
        and wall is not None
        and med >= floor_ms
        and wall <= med * ADOPT_RATIO + ADOPT_HOST_MS
    )


def run_do_bench(job) -> dict[str, Any]:
    """Independent baseline numbers with triton.testing.do_bench (used by gpu_selfcheck)."""
    task = load_task(job.task_source, dict(job.size_overrides))
    torch.manual_seed(1234)
    ref = task.module.Model(*task.init_args()).cuda().eval()
    inputs = to_device(task.inputs(4321, "cuda"), "cuda")
    with torch.no_grad():
        eager = bench(lambda: ref(*inputs))["median"]
        compiled = torch.compile(ref)
        compiled(*inputs)
        comp = bench(lambda: compiled(*inputs))["median"]
    return {"eager_ms": float(eager), "compile_ms": float(comp), "pid": os.getpid()}
