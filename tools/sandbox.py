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
_ENV_PASS = ("PATH", "LANG", "CUDA_VISIBLE_DEVICES", "TRITON_CACHE_DIR", "CUDA_HOME", "CUDA_PATH", "TZ")
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


class _Tail:
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


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    except PermissionError:
        proc.kill()


def run_job(job: Job, *, timeout_s: float, python: str | None = None) -> JobResult:
    """Run `job` in a fresh worker process; never raises for a job's own failure.

    GPU jobs take the per-GPU file lock inside the worker (shared to compile or check, exclusive
    to time), so timing never overlaps other GPU work, from this process or another."""
    py = python or sys.executable
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="egg-job-") as workdir:
        job_path = Path(workdir) / "job.json"
        result_path = Path(workdir) / "result.json"
        job_path.write_text(job.model_dump_json())
        nonce = secrets.token_hex(16)
        env = sandbox_env(workdir, job.device, {"EGG_RESULT_NONCE": nonce})
        proc = subprocess.Popen(
            [py, "-m", "tools.worker", str(job_path), str(result_path)],
            cwd=workdir,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
        out, err = _Tail(proc.stdout), _Tail(proc.stderr)
        timed_out = False
        try:
            rc = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            timed_out = True
            _kill_group(proc)
            rc = proc.wait()
        # Whatever the candidate left running in its session goes too.
        _kill_group(proc)
        seconds = time.monotonic() - t0
        stdout_tail, stderr_tail = out.text(), err.text()
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
