"""Run one worker job in a fresh, contained process.

Every job gets its own process (`python -m tools.worker JOB.json RESULT.json`) in a fresh
temporary directory, its own session (so a timeout kills the whole process group, including
anything the candidate spawned), an allowlisted environment (no API keys or tokens can leak
into generated code), and bounded stdout/stderr capture. The result is read from the result
file only; stdout is never parsed, so a candidate printing a fake result achieves nothing.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from tools.protocol import Job, JobResult

REPO_ROOT = Path(__file__).resolve().parent.parent
TAIL_BYTES = 16_000

# Environment variables passed through unchanged. Everything else (in particular *_KEY,
# *_TOKEN, OPENAI_*, cloud credentials) is dropped.
_ENV_PASS = (
    "PATH",
    "LANG",
    "CUDA_VISIBLE_DEVICES",
    "TRITON_CACHE_DIR",
    "CUDA_HOME",
    "CUDA_PATH",
    "TZ",
    "EGG_GPU_TRACE",  # the lock's trace switch (tools/worker/gpulock.py); the runner never sees it
)
_ENV_PREFIX_PASS = ("LC_",)


def sandbox_env(workdir: str, device: str, extra: dict[str, str] | None = None) -> dict[str, str]:
    env: dict[str, str] = {}
    for k, v in os.environ.items():
        if k in _ENV_PASS or k.startswith(_ENV_PREFIX_PASS):
            env[k] = v
    env.setdefault("PATH", "/usr/local/bin:/usr/bin:/bin")
    env["HOME"] = workdir
    env["TMPDIR"] = workdir
    env["PYTHONPATH"] = str(REPO_ROOT)
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env["PYTHONHASHSEED"] = "0"
    # Triton's kernel cache would otherwise land in HOME (the throwaway dir); keep a shared one
    # when the parent set it, else a per-user dir so repeated compiles stay fast.
    env.setdefault("TRITON_CACHE_DIR", str(Path(tempfile.gettempdir()) / f"egg-triton-cache-{os.getuid()}"))
    if device == "cpu":
        env["TRITON_INTERPRET"] = "1"
        env["CUDA_VISIBLE_DEVICES"] = ""
    else:
        # Workers serialise GPU timing through this file (tools/worker/gpulock.py), per visible GPU.
        gpus = env.get("CUDA_VISIBLE_DEVICES", "all").replace(",", "_") or "all"
        env["EGG_GPU_LOCK"] = str(Path(tempfile.gettempdir()) / f"egg-gpu-{os.getuid()}-{gpus}.lock")
    if extra:
        env.update(extra)
    return env


class Tail:
    """Keeps only the last `limit` bytes written to a pipe (a candidate may print gigabytes)."""

    def __init__(self, stream, limit: int = TAIL_BYTES) -> None:
        self.buf = bytearray()
        self.limit = limit
        self.total = 0
        self._t = threading.Thread(target=self._pump, args=(stream,), daemon=True)
        self._t.start()

    def _pump(self, stream) -> None:
        while True:
            chunk = stream.read(65536)
            if not chunk:
                break
            self.total += len(chunk)
            self.buf += chunk
            if len(self.buf) > 2 * self.limit:
                del self.buf[: len(self.buf) - self.limit]

    def text(self) -> str:
        self._t.join(timeout=5)
        data = bytes(self.buf[-self.limit :])
        prefix = f"[... {self.total - len(data)} bytes dropped ...]\n" if self.total > len(data) else ""
        return prefix + data.decode("utf-8", errors="replace")


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    except PermissionError:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


class _Cold:
    """A job in its own fresh `python -m tools.worker` process."""

    def __init__(self, py: str, workdir: str, job: Job, nonce: str) -> None:
        self.proc = subprocess.Popen(
            [py, "-m", "tools.worker", f"{workdir}/job.json", f"{workdir}/result.json", str(os.getpid())],
            cwd=workdir,
            env=sandbox_env(workdir, job.device),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
        try:
            # the nonce goes on stdin: an environment variable would be readable in /proc
            self.proc.stdin.write(nonce.encode() + b"\n")
            self.proc.stdin.close()
        except OSError:
            pass  # the worker died at once: reported as a crash
        self.out, self.err = Tail(self.proc.stdout), Tail(self.proc.stderr)

    def wait(self, timeout_s: float) -> int | None:
        try:
            return self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            return None

    def kill(self) -> None:
        _kill_group(self.proc.pid)

    def reap(self) -> int:
        return self.proc.wait()

    def tails(self) -> tuple[str, str]:
        return self.out.text(), self.err.text()


class _Warm:
    """A job in a process forked from a warm server (see WorkerPool)."""

    def __init__(self, pool: WorkerPool, workdir: str, nonce: str) -> None:
        self.pool, self.workdir = pool, workdir
        self.slot = pool.submit(workdir, nonce)

    def wait(self, timeout_s: float) -> int | None:
        if not self.slot.done.wait(timeout_s):
            return None
        return self.slot.rc

    def kill(self) -> None:
        if self.slot.pid:
            _kill_group(self.slot.pid)

    def reap(self) -> int:
        self.slot.done.wait(30)
        return self.slot.rc if self.slot.rc is not None else -signal.SIGKILL

    def tails(self) -> tuple[str, str]:
        return tuple(_file_tail(Path(self.workdir) / n) for n in ("stdout.log", "stderr.log"))  # type: ignore[return-value]


def _file_tail(path: Path, limit: int = TAIL_BYTES) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - limit))
            data = f.read()
    except OSError:
        return ""
    prefix = f"[... {size - len(data)} bytes dropped ...]\n" if size > len(data) else ""
    return prefix + data.decode("utf-8", errors="replace")


class _Slot:
    def __init__(self) -> None:
        self.done = threading.Event()
        self.pid = 0
        self.rc: int | None = None


class WorkerPool:
    """One warm server per device: it imports torch and triton once and forks a worker per job,
    which saves the interpreter start and those imports (seconds) on every job, with the same
    isolation: each job is its own process, in its own session, in its own directory.

    The server exits when this process closes its stdin (this process ended, however), and
    its job processes die with it. A server that dies is started again by the next job."""

    _pools: dict[tuple, WorkerPool] = {}
    _lock = threading.Lock()

    @classmethod
    def for_device(cls, device: str) -> WorkerPool:
        key = (device, os.environ.get("CUDA_VISIBLE_DEVICES"), os.getpid())
        with cls._lock:
            pool = cls._pools.get(key)
            if pool is None or not pool.alive():
                pool = cls._pools[key] = WorkerPool(device)
            return pool

    def __init__(self, device: str) -> None:
        self.device = device
        self.home = tempfile.mkdtemp(prefix="egg-server-")
        _mark_owner(self.home)
        r, w = os.pipe()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tools.worker.server", str(w)],
            cwd=self.home,
            env=sandbox_env(self.home, device),
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            pass_fds=(w,),
            start_new_session=True,
        )
        os.close(w)
        self.err = Tail(self.proc.stderr)
        self.replies = os.fdopen(r, "rb")
        self.slots: dict[str, _Slot] = {}
        self.ready = threading.Event()
        self.write_lock = threading.Lock()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def alive(self) -> bool:
        return self.proc.poll() is None

    def _read(self) -> None:
        for line in self.replies:
            try:
                msg = json.loads(line)
            except ValueError:
                continue
            if msg.get("ready"):
                self.ready.set()
                continue
            slot = self.slots.get(str(msg.get("id")))
            if slot is None:
                continue
            if "pid" in msg:
                slot.pid = int(msg["pid"])
            if "rc" in msg:
                slot.rc = int(msg["rc"])
                slot.done.set()
        # the server is gone: every job still waiting died with it
        self.ready.set()
        for slot in list(self.slots.values()):
            if not slot.done.is_set():
                slot.rc = -signal.SIGKILL
                slot.done.set()

    def submit(self, workdir: str, nonce: str) -> _Slot:
        if not self.ready.wait(300) or not self.alive():
            raise OSError(f"the warm worker server did not start: {self.err.text()[-300:]}")
        slot = _Slot()
        key = secrets.token_hex(8)
        self.slots[key] = slot
        req = {
            "id": key,
            "workdir": workdir,
            "job": f"{workdir}/job.json",
            "result": f"{workdir}/result.json",
        }
        line = (json.dumps({**req, "nonce": nonce}) + "\n").encode()
        with self.write_lock:
            self.proc.stdin.write(line)
            self.proc.stdin.flush()
        return slot


def warm_workers_enabled() -> bool:
    return os.environ.get("EGG_WARM_WORKERS", "1") not in ("0", "false", "no")


def _mark_owner(workdir: str) -> None:
    """Record the owning process, so a later sweep can remove directories of dead owners."""
    Path(workdir, "owner.pid").write_text(str(os.getpid()))


_SWEPT = [False]


def sweep_stale_dirs() -> int:
    """Remove work directories left by EGG processes that were killed (SIGKILL leaves no chance
    to clean up); only directories whose recorded owner no longer runs. Once per process."""
    if _SWEPT[0]:
        return 0
    _SWEPT[0] = True
    removed = 0
    for d in Path(tempfile.gettempdir()).glob("egg-*"):
        owner = d / "owner.pid"
        try:
            pid = int(owner.read_text())
        except (OSError, ValueError):
            continue
        try:
            os.kill(pid, 0)
            continue  # alive
        except ProcessLookupError:
            pass
        except PermissionError:
            continue
        shutil.rmtree(d, ignore_errors=True)
        removed += 1
    return removed


_SECRET_HINTS = ("KEY", "TOKEN", "SECRET", "PASSWORD")


def protect_agent() -> bool:
    """When this process holds a credential in its environment, make it undumpable: its /proc
    files (environ, mem) then belong to root, so even where the runner's namespaces are missing
    a process of the same user cannot read the key there. Returns whether it applied."""
    if not any(h in k.upper() for k in os.environ for h in _SECRET_HINTS):
        return False
    from tools.worker.confine import make_undumpable

    return make_undumpable()


def run_job(job: Job, *, timeout_s: float, python: str | None = None) -> JobResult:
    """Run `job` in a worker process of its own; never raises for a job's own failure.

    A warm server (WorkerPool) forks the process unless EGG_WARM_WORKERS=0 or a `python` is
    given; otherwise a fresh interpreter starts. GPU jobs take the per-GPU file lock inside the
    worker (shared to compile or check, exclusive to time), so timing never overlaps other GPU
    work, from this process or another."""
    if not _SWEPT[0]:
        protect_agent()
    sweep_stale_dirs()
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="egg-job-") as workdir:
        _mark_owner(workdir)
        result_path = Path(workdir) / "result.json"
        (Path(workdir) / "job.json").write_text(job.model_dump_json())
        nonce = secrets.token_hex(16)
        if python is None and warm_workers_enabled():
            proc: _Cold | _Warm = _Warm(WorkerPool.for_device(job.device), workdir, nonce)
        else:
            proc = _Cold(python or sys.executable, workdir, job, nonce)
        rc, waited = _wait_job(proc, Path(workdir) / WAIT_NOTE, timeout_s)
        timed_out = rc is None
        # Whatever the job left running in its session goes too (its runner dies with it).
        proc.kill()
        if timed_out:
            rc = proc.reap()
        seconds = time.monotonic() - t0
        stdout_tail, stderr_tail = proc.tails()
        if timed_out and waited >= MAX_GPU_WAIT_S:
            # it spent its time queueing for the GPU behind other jobs: the machine's fault
            return JobResult(
                kind=job.kind, ok=False, error_kind="infra", exit_code=rc, seconds=seconds,
                error=f"{job.kind} job waited {waited:.0f} s for the GPU's memory or lock and was stopped",
                stdout_tail=stdout_tail, stderr_tail=stderr_tail,
            )  # fmt: skip
        return _interpret(
            job, rc, timed_out, timeout_s, result_path, nonce, stdout_tail, stderr_tail, seconds
        )


# The file a worker notes its waits for the GPU in (tools/worker/gpulock.py, __main__.py), and
# how long a job may wait in all before the wait itself is a fault of the machine.
WAIT_NOTE = "waited"
MAX_GPU_WAIT_S = 1800.0


def _wait_job(proc: _Cold | _Warm, note: Path, timeout_s: float) -> tuple[int | None, float]:
    """Wait for the job; seconds it spent waiting for the GPU (other jobs' memory shares or
    timing) do not count against timeout_s, up to MAX_GPU_WAIT_S. Returns (exit code or None
    when out of time, seconds waited)."""
    from tools.worker.gpulock import read_wait_note

    t0 = time.monotonic()
    while True:
        now = time.monotonic()
        waited = read_wait_note(str(note), now)
        left = t0 + timeout_s + min(waited, MAX_GPU_WAIT_S) - now
        if left <= 0:
            return None, waited
        rc = proc.wait(min(left, 1.0))
        if rc is not None:
            return rc, waited


def _interpret(
    job: Job,
    rc: int | None,
    timed_out: bool,
    timeout_s: float,
    result_path: Path,
    nonce: str,
    stdout_tail: str,
    stderr_tail: str,
    seconds: float,
) -> JobResult:
    common = dict(
        kind=job.kind, exit_code=rc, stdout_tail=stdout_tail, stderr_tail=stderr_tail, seconds=seconds
    )
    if timed_out:
        return JobResult(
            ok=False,
            error_kind="timeout",
            error=f"{job.kind} job exceeded {timeout_s:.0f}s and was killed",
            **common,
        )
    if result_path.exists():
        try:
            wrapped = json.loads(result_path.read_text())
            if not isinstance(wrapped, dict) or wrapped.get("nonce") != nonce:
                raise ValueError("result not written by the worker (nonce mismatch)")
            res = JobResult.model_validate(wrapped["result"])
        except (ValueError, KeyError, TypeError) as e:
            return JobResult(
                ok=False,
                error_kind="no_result",
                error=f"worker wrote an unreadable result: {str(e)[:200]}",
                **common,
            )
        if rc != 0 and res.ok:
            # The worker claims success but the process died afterwards: do not trust it.
            return JobResult(
                ok=False,
                error_kind="crash",
                error=f"worker exited with code {rc} after writing a result",
                **common,
            )
        return res.model_copy(update=common)
    if rc is not None and rc < 0:
        sig = -rc
        name = signal.Signals(sig).name if sig in signal.Signals._value2member_map_ else str(sig)
        return JobResult(
            ok=False,
            error_kind="crash",
            error=f"worker killed by signal {name} (e.g. a segfault or out-of-memory kill)",
            **common,
        )
    last = stderr_tail.strip().splitlines()[-1:] or [""]
    return JobResult(
        ok=False,
        error_kind="no_result" if rc == 0 else "crash",
        error=f"worker exited with code {rc} without a result: {last[0][:300]}",
        **common,
    )
