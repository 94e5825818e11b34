"""GPU memory admission for workers that share one GPU (several seeds, several eval tasks).

Checking a candidate at the task's real size keeps several full-size copies alive (pristine
inputs, a float64 reference, the candidate's outputs; the comparison's float64 temporaries are
bounded by its chunk), so a
handful of multi-GB tasks checked at once would run the GPU out of memory. The task's peak is
estimated from its shapes (a forward pass on the meta device, which allocates nothing) once, by
its describe job; the toolbox passes it to every later job, and each worker holds that many of
`SLOTS` equal shares of the GPU's memory, as file locks beside the per-GPU lock
(`<lock>.mem<i>`), before it creates a CUDA context. Requests queue in order, in two lanes (see
gpu_memory): a large request is not starved by small ones, and small ones do not wait behind it.
Lock order everywhere: memory shares first, then the reader/writer lock of
tools/worker/gpulock.py, never the other way round.
"""

from __future__ import annotations

import contextlib
import fcntl
import math
import os
import subprocess
import time
from collections.abc import Iterator
from typing import Any

from tools.worker.gpulock import LOCK_ENV, trace_hold, waiting

# 64 shares of about 2 GiB on an H200: a job that needs a few GiB no longer holds a sixteenth of
# the GPU (with 16 shares, 16 small jobs filled it while most of its memory stayed unused).
SLOTS = 64
# Two CUDA contexts per job (the judge's and the runner's) and the timer's L2-flush buffer.
CONTEXT_BYTES = 2 * 1024**3
# Memory kept outside the shares: one CUDA context per concurrent worker process, the L2-flush
# buffer of the timer, fragmentation.
RESERVED_BYTES = 16 * 1024**3
# Peak bytes per byte of input / of output while checking (copies listed in the docstring).
INPUT_COPIES = 6
OUTPUT_COPIES = 8
PARAM_COPIES = 4
# The comparison's float64 temporaries (tools/worker/check.py compares in chunks of
# COMPARE_CHUNK elements): about 20 bytes per byte of a float32 output, for one chunk at most.
COMPARE_COPIES = 20
COMPARE_WINDOW_BYTES = 4 << 24


def compare_bytes(out_b: int) -> int:
    """Peak bytes of the chunked comparison's temporaries for `out_b` bytes of outputs."""
    return COMPARE_COPIES * min(out_b, COMPARE_WINDOW_BYTES)


def _nbytes(xs: Any) -> int:
    import torch

    if isinstance(xs, torch.Tensor):
        return xs.numel() * xs.element_size()
    if isinstance(xs, (list, tuple)):
        return sum(_nbytes(x) for x in xs)
    return 0


def shape_bytes(task) -> tuple[int, int | None, int | None] | None:
    """(inputs, parameters, outputs) bytes of the task from shapes alone (meta tensors: nothing
    is allocated). None when get_inputs() fails; parameters None when the model cannot be built;
    outputs None when a forward op has no meta kernel."""
    import torch

    with torch.device("meta"):
        try:
            inputs = list(task.module.get_inputs())
        except Exception:
            return None
        in_b = _nbytes(inputs)
        try:
            model = task.module.Model(*task.init_args())
            p_b = sum(p.numel() * p.element_size() for p in model.state_dict().values())
        except Exception:
            return in_b, None, None
        try:
            with torch.no_grad():
                return in_b, p_b, _nbytes(model(*inputs))
        except Exception:
            return in_b, p_b, None


def estimate_peak_bytes(task, sizes: tuple[int, int | None, int | None] | None = None) -> int:
    """The checker's peak GPU memory for this task, from shapes alone (`sizes`: shape_bytes(task),
    when already known)."""
    sizes = sizes or shape_bytes(task)
    if sizes is None:
        return 0
    in_b, p_b, out_b = sizes
    if p_b is None:
        return INPUT_COPIES * in_b
    if out_b is None:  # some ops have no meta kernel: assume outputs as large as the inputs
        out_b = in_b
    return INPUT_COPIES * in_b + PARAM_COPIES * p_b + OUTPUT_COPIES * out_b + compare_bytes(out_b)


# Peak bytes per byte of input, parameters and output while timing: the judge's reference and the
# runner's candidate each hold their own copy of the inputs and weights and make their outputs;
# the outputs count twice for the intermediates a forward keeps alive.
TIMING_COPIES = 2
TIMING_OUTPUT_COPIES = 4
FLUSH_BYTES = 256 * 1024**2  # triton.testing.do_bench's L2-flush buffer


def estimate_timing_bytes(task, sizes: tuple[int, int | None, int | None] | None = None) -> int:
    """A screened job's peak before its check (compile and timing only), from shapes alone: far
    below the check's (no float64 reference, no pristine copies). A contender queues for the
    check's shares after its timing (tools/worker/evaluate.py). Where the shapes are not all
    known, the check's estimate stands."""
    sizes = sizes or shape_bytes(task)
    if sizes is None or None in sizes:
        return estimate_peak_bytes(task, sizes)
    in_b, p_b, out_b = sizes
    return TIMING_COPIES * (in_b + p_b) + TIMING_OUTPUT_COPIES * out_b + FLUSH_BYTES


# Peak allocated bytes of this process before the last reset of PyTorch's peak counter, and of
# each step still open: the judge resets the counter per step to see each step's own peak, and
# steps nest (the check's steps inside the evaluate job's check step).
_EARLIER_PEAK = [0]
_OPEN: list[int] = []


def _fold() -> None:
    import torch

    p = int(torch.cuda.max_memory_allocated())
    _EARLIER_PEAK[0] = max(_EARLIER_PEAK[0], p)
    _OPEN[:] = [max(v, p) for v in _OPEN]


def step_peak_start() -> None:
    """Open a step: its peak starts at the bytes allocated now."""
    import torch

    _fold()
    torch.cuda.reset_peak_memory_stats()
    _OPEN.append(int(torch.cuda.memory_allocated()))


def step_peak_end() -> int:
    """Close the innermost open step: its peak allocated bytes, inner steps' included."""
    _fold()
    return _OPEN.pop()


def process_peak() -> int:
    """This process's peak allocated bytes since it started, over every step's reset."""
    _fold()
    return _EARLIER_PEAK[0]


def units_for(peak_bytes: int, total: int) -> int:
    share = max(1, (total - RESERVED_BYTES) // SLOTS)
    return max(1, min(SLOTS, math.ceil(peak_bytes / share)))


def units_with_margin(peak_bytes: float, contexts: int = 2) -> int:
    """Shares for a job whose peak is `peak_bytes`, measured or estimated without its contexts:
    a quarter more, plus its CUDA contexts (the judge's and the runner's; a screened-out job's
    judge makes none, tools/worker/evaluate.py) and the flush buffer."""
    return units_for(int(peak_bytes * 1.25) + CONTEXT_BYTES * contexts // 2, total_bytes())


# The express lane: requests of at most EXPRESS_UNITS shares queue apart from larger ones and are
# served first from the last EXPRESS_SLOTS shares. With one queue, a 2-share check waited 154 s
# (median) on the H200 behind 25-share checks of a task with an 8 GiB input: the large request
# at the head held up every small one behind it.
EXPRESS_UNITS = 4
EXPRESS_SLOTS = 16
GENERAL = tuple(range(SLOTS - EXPRESS_SLOTS))
EXPRESS = tuple(range(SLOTS - EXPRESS_SLOTS, SLOTS))


def _grab(fds: list[int], lane: tuple[int, ...], held: list[int], units: int, start: int) -> list[int]:
    """Free shares of `lane`, taken without waiting, until `held` and they make `units`."""
    got: list[int] = []
    for k in range(len(lane)):
        if len(held) + len(got) >= units:
            break
        i = lane[(start + k) % len(lane)]
        if i in held:
            continue
        try:
            fcntl.flock(fds[i], fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            continue
        got.append(i)
    return got


def _borrow(
    fds: list[int], queue_fd: int, lane: tuple[int, ...], held: list[int], units: int, start: int
) -> None:
    """Shares of the other lane: only while nobody queues in it, and only when they complete the
    request at once (a request never sits on the other lane's shares while it waits)."""
    try:
        fcntl.flock(queue_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return
    try:
        got = _grab(fds, lane, held, units, start)
        if len(held) + len(got) < units:
            for i in got:
                fcntl.flock(fds[i], fcntl.LOCK_UN)
        else:
            held.extend(got)
    finally:
        fcntl.flock(queue_fd, fcntl.LOCK_UN)


@contextlib.contextmanager
def gpu_memory(units: int) -> Iterator[None]:
    """Hold `units` of the GPU's SLOTS memory shares (no-op when no per-GPU lock is set).

    Two lanes, each first-in first-out: requests of up to EXPRESS_UNITS shares queue on
    `<lock>.memqx` and take the express shares, larger ones queue on `<lock>.memq` and take the
    general shares. Either may also take the other lane's free shares when nobody queues there
    and that completes it at once. A request larger than the general lane holds both queues (the
    general first) and gathers every share it needs, as the one queue did."""
    path = os.environ.get(LOCK_ENV)
    if not path or units <= 0:
        yield
        return
    units = min(units, SLOTS)
    fds = [os.open(f"{path}.mem{i}", os.O_RDWR | os.O_CREAT, 0o600) for i in range(SLOTS)]
    general_q = os.open(f"{path}.memq", os.O_RDWR | os.O_CREAT, 0o600)
    express_q = os.open(f"{path}.memqx", os.O_RDWR | os.O_CREAT, 0o600)
    held: list[int] = []
    asked = got = time.time()
    small, huge = units <= EXPRESS_UNITS, units > len(GENERAL)
    own, own_q = (EXPRESS, express_q) if small else (GENERAL, general_q)
    other, other_q = (GENERAL, general_q) if small else (EXPRESS, express_q)
    queues = [own_q, other_q] if huge else [own_q]  # lock order: general queue, then express
    try:
        # Only a lane's head takes its shares; holders release without queueing, so the head
        # always makes progress and nobody waits while holding what another waits for.
        with waiting("memory"):
            for q in queues:
                fcntl.flock(q, fcntl.LOCK_EX)
            try:
                start = os.getpid()  # spread first picks over the shares
                while len(held) < units:
                    held += _grab(fds, own, held, units, start)
                    if len(held) < units:
                        if huge:
                            held += _grab(fds, other, held, units, start)
                        else:
                            _borrow(fds, other_q, other, held, units, start)
                    if len(held) < units:
                        time.sleep(0.05)
            finally:
                for q in queues:
                    fcntl.flock(q, fcntl.LOCK_UN)
        got = time.time()
        yield
    finally:
        for i in held:
            fcntl.flock(fds[i], fcntl.LOCK_UN)
        if len(held) == units:
            trace_hold(f"mem{units}", asked, got)
        for fd in (*fds, general_q, express_q):
            os.close(fd)


def share_cpu_threads() -> None:
    """At most 4 intra-op CPU threads per worker: many workers share the machine's cores."""
    import torch

    torch.set_num_threads(max(1, min(4, torch.get_num_threads())))


def known_units(job) -> int | None:
    """The shares the toolbox passed (options["memory_units"], from the task's describe job), so
    a worker can queue for them before it creates a CUDA context; None when not given."""
    units = job.options.get("memory_units")
    if units is None:
        return None
    try:
        return max(1, min(SLOTS, int(units)))
    except (TypeError, ValueError):
        return None


def job_units(job) -> int:
    """Memory shares for a GPU job on its task (1 when the estimate is impossible). The toolbox
    passes the task's estimate from its `describe` job (options["memory_units"] or
    ["peak_bytes"]); without it (a lone `egg check`, the describe job itself) the estimate is
    made here."""
    from tools.worker.common import load_task

    known = known_units(job)
    if known is not None:
        return known
    try:
        peak = job.options.get("peak_bytes")
        if peak is None:
            peak = estimate_peak_bytes(load_task(job.task_source, dict(job.size_overrides)))
        total = total_bytes()
    except Exception:
        return 1
    return units_for(int(peak), total)


def total_bytes() -> int:
    """The GPU's memory in bytes. A process with no CUDA context of its own (a screened job's
    judge, tools/worker/evaluate.py) asks the driver through nvidia-smi instead of making a
    context only to read this; torch's figure where that fails."""
    import torch

    if not torch.cuda.is_initialized():
        got = visible_gpu_query(["memory.total"])
        try:
            return int(float(got[0])) * 2**20  # MiB
        except (TypeError, ValueError, IndexError):
            pass
    return torch.cuda.get_device_properties(torch.cuda.current_device()).total_memory


def visible_gpu_query(fields: list[str]) -> list[str] | None:
    """nvidia-smi's values of `fields` for the first visible GPU (torch's device 0: the index or
    UUID CUDA_VISIBLE_DEVICES names first), with no CUDA context made; None where it fails."""
    dev = (os.environ.get("CUDA_VISIBLE_DEVICES") or "0").split(",")[0].strip() or "0"
    try:
        r = subprocess.run(
            ["nvidia-smi", "-i", dev, f"--query-gpu={','.join(fields)}", "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=20,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    lines = r.stdout.strip().splitlines()
    if r.returncode != 0 or not lines:
        return None
    values = [v.strip() for v in lines[0].split(",")]
    return values if len(values) == len(fields) else None


def ensure_cuda_context() -> bool:
    """Make this process's CUDA context if it has none; True when it made one. Callers do this
    outside any GPU lock: creating a context is a second or more of driver work, which under the
    lock every timer would wait for."""
    import torch

    if torch.cuda.is_initialized():
        return False
    torch.cuda.init()
    torch.empty(1, device="cuda")
    return True


# the vendor libraries a first library call loads lazily, by the soname prefix of the library
# PyTorch itself links (its siblings in the same folder are the same release)
_LIBRARY_FAMILY = {"cudnn": "libcudnn", "cublas": "libcublas"}


_PRELOADED: set[str] = set()  # the vendor libraries preload_libraries handled in this process


def preload_libraries(names: set[str] | frozenset[str]) -> dict[str, Any]:
    """Open the shared libraries of the vendor libraries `names` ("cudnn", "cublas") that this
    process has not loaded yet, from the folder of the one PyTorch loaded: CPU work (reading
    and relocating a few hundred MB) that a first convolution otherwise does inside its call,
    under a shared hold of the GPU lock that every waiting timer waits for. Nothing runs on the
    GPU; each library is handled once per process. Returns {} when there is nothing to do, else
    {"preloaded": files opened, "preload_failed": files that did not open, "preload_s": seconds}."""
    import ctypes

    import torch

    names = set(names) - _PRELOADED
    if not names:
        return {}
    _PRELOADED.update(names)
    t0 = time.monotonic()
    opened = failed = 0
    if "cudnn" in names and torch.backends.cudnn.is_available():
        torch.backends.cudnn.version()  # loads libcudnn.so itself, whose siblings load lazily
    loaded = _loaded_libraries()
    for name in sorted(names):
        prefix = _LIBRARY_FAMILY.get(name)
        if prefix is None:
            continue
        folders = {os.path.dirname(p) for p in loaded if os.path.basename(p).startswith(prefix)}
        for folder in sorted(folders):
            for entry in sorted(os.listdir(folder)):
                path = os.path.join(folder, entry)
                if not entry.startswith(prefix) or ".so" not in entry or path in loaded:
                    continue
                try:
                    ctypes.CDLL(path)
                    opened += 1
                except OSError:
                    failed += 1  # counted in the reply: the call loads it, as without a preload
    return {"preloaded": opened, "preload_failed": failed, "preload_s": round(time.monotonic() - t0, 3)}


def _loaded_libraries() -> set[str]:
    """Paths of the shared libraries mapped into this process (Linux), else an empty set."""
    try:
        with open("/proc/self/maps") as f:
            return {ln.split(None, 5)[5].strip() for ln in f if ".so" in ln and len(ln.split(None, 5)) == 6}
    except OSError:
        return set()


def preload_for_reference(task_source: str, overrides: dict[str, int]) -> dict[str, Any]:
    """preload_libraries for what the task's reference uses (a judge, before its first GPU lock),
    named by its modules (common.module_libraries; the model is built on the meta device). Not
    by a meta forward: a dispatch mode's first use imports TorchDynamo (1.4 s of CPU on this
    project's CI host) and a recurrent layer's meta forward takes seconds. A library the
    reference calls only functionally is loaded by its first call, as without a preload;
    nothing fails here."""
    import torch

    from tools.worker.common import load_task, module_libraries

    try:
        task = load_task(task_source, overrides)
        # the process's random state is the judge's: untouched (forked) by this build
        with torch.random.fork_rng(devices=[]), torch.device("meta"):
            found = module_libraries(task.module.Model(*task.init_args()))
    except Exception:  # noqa: BLE001 - a hint only: the first call loads what was not preloaded
        return {}
    return preload_libraries(found)
