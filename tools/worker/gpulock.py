"""A per-GPU reader/writer file lock shared by every worker process on the machine.

Timing must not overlap with any other GPU work (it would distort clocks and memory traffic);
compiling and checking may overlap with each other. Workers hold the lock exclusively while they
time, and shared only around the steps that run work on the GPU (one correctness trial, the
launch-recording call), not for a whole job: a writer then waits for at most one short step of
each reader, not for whole compile + check jobs, and CPU-only work (imports, the sm_90
compile, static rules) never holds the GPU. A file lock (not a lock in the agent process)
also covers several `egg` processes sharing one GPU.

Writers go first, and together: a worker waiting to time, or timing, holds the writers' file
(`<lock>.writers`) shared, and a reader takes that file exclusively before it takes the lock, so
no GPU step starts while any timer waits. Timers that queue while one drains the readers' steps
then run one after another, and the readers waiting meanwhile start together after the last:
one drain per batch of timings, not one per timing. Replayed against the H200 suite run's trace
of 2026-12-06 (`python -m evals.h200.locksim`), the old turnstile let a reader in between two
timers and drained the GPU before nearly every timing (54% of that run's wall time).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import sys
import threading
import time
from collections.abc import Iterator

LOCK_ENV = "EGG_GPU_LOCK"
# When set (to anything but "" or "0"), every hold of the lock and of memory shares appends one
# line to `<lock>.trace`: "<what> <pid> <asked> <got> <released>" (epoch seconds; what is
# exclusive, shared or mem<units>, the lock's modes followed by ":<step>" where the holder named
# the step it holds the lock for, e.g. shared:check.trial). `python -m evals.h200.locktrace`
# turns the lines into the share of a run's wall time the GPU was held, drained for a writer, or
# free (issue 12's "make the next bottleneck visible"). Off by default: one short append per
# hold, only when asked.
TRACE_ENV = "EGG_GPU_TRACE"

# Seconds spent waiting for the lock in this process, by mode (reported by the evaluate job).
WAITED: dict[str, float] = {"shared": 0.0, "exclusive": 0.0}

# Where this worker tells the agent how long it has waited for the GPU (the lock and memory
# shares, tools/worker/gpumem.py): "<seconds waited> <monotonic start of a wait under way or 0>".
# The agent does not count those seconds against the job's time limit (tools/sandbox.py), and
# the judge does not count them against its runner's (judge.py): waiting for other tasks is the
# machine's doing, never the candidate's.
_WAIT_NOTE: list[str | None] = [None]


def total_waited() -> float:
    return sum(WAITED.values())


def note_waits_to(path: str | None) -> None:
    _WAIT_NOTE[0] = path
    _note(0.0)


def _note(since: float) -> None:
    path = _WAIT_NOTE[0]
    if not path:
        return
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(f"{total_waited():.3f} {since:.3f}\n")
    os.replace(tmp, path)


def read_wait_note(path: str, now: float | None = None) -> float:
    """Seconds a worker has waited for the GPU so far (0 when it wrote nothing readable)."""
    try:
        with open(path) as f:
            done, since = (float(x) for x in f.read().split()[:2])
    except (OSError, ValueError):
        return 0.0
    now = time.monotonic() if now is None else now
    return max(0.0, done) + (max(0.0, now - since) if since > 0 else 0.0)


def trace_hold(what: str, asked: float, got: float) -> None:
    """Append one hold of `what` (asked at `asked`, acquired at `got`, released now) to the
    trace beside the lock, when tracing is on (TRACE_ENV). One write of a short line with
    O_APPEND, so lines of concurrent workers never interleave."""
    path = os.environ.get(LOCK_ENV)
    if not path or os.environ.get(TRACE_ENV, "") in ("", "0"):
        return
    line = f"{what} {os.getpid()} {asked:.4f} {got:.4f} {time.time():.4f}\n".encode()
    try:
        fd = os.open(path + ".trace", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            os.write(fd, line)
        finally:
            os.close(fd)
    except OSError as e:
        # a diagnostic is never a reason for a job to fail, but a trace that lost a line says so
        # (the job's stderr reaches its log)
        sys.stderr.write(f"egg: GPU lock trace not written ({e}); the trace misses this hold\n")


@contextlib.contextmanager
def waiting(kind: str) -> Iterator[None]:
    """Account the enclosed acquisition as a wait of `kind` (WAITED, the note to the agent)."""
    t0 = time.monotonic()
    _note(t0)
    try:
        yield
    finally:
        WAITED[kind] = WAITED.get(kind, 0.0) + time.monotonic() - t0
        _note(0.0)


# Whether this thread holds the lock: an inner gpu_lock() while it does is a no-op, so a step
# that takes the shared lock for its own GPU work can also run inside a job holding it (a nested
# acquire would deadlock against a writer waiting among the writers).
_HELD = threading.local()


@contextlib.contextmanager
def gpu_lock(exclusive: bool, step: str | None = None) -> Iterator[None]:
    """Hold the per-GPU lock, exclusively or shared; `step` names what for in the trace."""
    path = os.environ.get(LOCK_ENV)
    held = getattr(_HELD, "mode", None)
    if path and held == "shared" and exclusive:
        raise RuntimeError("exclusive GPU lock asked for while this thread holds it shared")
    if not path or held is not None:
        yield
        return
    mode = "exclusive" if exclusive else "shared"
    writers = os.open(path + ".writers", os.O_RDWR | os.O_CREAT, 0o600)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    asked = time.time()
    try:
        with waiting(mode):
            if exclusive:
                # counted among the writers until released: readers wait for every writer
                fcntl.flock(writers, fcntl.LOCK_SH)
                fcntl.flock(fd, fcntl.LOCK_EX)
            else:
                # no writer waits or holds the lock; no writer can take it before this hold
                fcntl.flock(writers, fcntl.LOCK_EX)
                try:
                    fcntl.flock(fd, fcntl.LOCK_SH)
                finally:
                    fcntl.flock(writers, fcntl.LOCK_UN)
        _HELD.mode = mode
        got = time.time()
        try:
            yield
        finally:
            _HELD.mode = None
            trace_hold(f"{mode}:{step}" if step else mode, asked, got)
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)
        os.close(writers)  # a writer's shared hold of it ends here, after the lock's
