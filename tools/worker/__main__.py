"""Worker entry point: read one Job, run it, write one JobResult to the result file.

The job file is deleted and argv/env scrubbed before any task or candidate code runs, and the
result is wrapped with a nonce the candidate cannot see, so generated code cannot forge a result.
"""

from __future__ import annotations

import json
import os
import sys
import time
import traceback
from pathlib import Path


def _write(path: Path, nonce: str, result: dict) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"nonce": nonce, "result": result}, default=str))
    tmp.replace(path)


def main() -> int:
    job_path, result_path = Path(sys.argv[1]), Path(sys.argv[2])
    nonce = os.environ.pop("EGG_RESULT_NONCE", "")
    sys.argv = sys.argv[:1]
    raw = job_path.read_text()
    job_path.unlink()

    from tools.protocol import Job

    job = Job.model_validate_json(raw)
    t0 = time.monotonic()
    base = {"kind": job.kind}
    try:
        from tools.worker.common import BadTask

        try:
            payload = _dispatch(job)
            result = {**base, "ok": True, "payload": payload}
        except BadTask as e:
            result = {**base, "ok": False, "error_kind": "bad_task", "error": str(e)}
    except Exception as e:
        tb = traceback.format_exc()
        sys.stderr.write(tb)
        result = {
            **base,
            "ok": False,
            "error_kind": "internal",
            "error": f"{type(e).__name__}: {str(e)[:500]}",
            "stderr_tail": tb[-4000:],
        }
    result["seconds"] = time.monotonic() - t0
    _write(result_path, nonce, result)
    sys.stdout.flush()
    sys.stderr.flush()
    # Skip interpreter teardown: candidate objects with odd finalizers cannot change the result.
    os._exit(0)


def _dispatch(job) -> dict:
    if job.kind == "evaluate":
        from tools.worker.evaluate import run_evaluate

        return run_evaluate(job)
    if job.device != "cuda":
        return _dispatch_unlocked(job)
    from tools.worker.gpulock import gpu_lock
    from tools.worker.gpumem import gpu_memory, job_units, share_cpu_threads

    share_cpu_threads()
    with gpu_memory(job_units(job)):
        if job.kind in ("time", "benchmark"):
            from tools.worker.timing import run_time

            # Shared lock for the set-up (incl. torch.compile's warm-up), exclusive to time.
            return run_time(job, benchmark=job.kind == "benchmark", staged_lock=True)
        if job.kind in ("compile", "check"):
            return _dispatch_unlocked(job)  # these take the shared lock around each GPU step
        with gpu_lock(exclusive=False):
            return _dispatch_unlocked(job)


def _dispatch_unlocked(job) -> dict:
    if job.kind == "describe":
        from tools.worker.describe import run_describe

        return run_describe(job)
    if job.kind == "compile":
        from tools.worker.compile_job import run_compile

        return run_compile(job)
    if job.kind == "check":
        from tools.worker.check import run_check

        return run_check(job)
    if job.kind in ("time", "benchmark"):
        from tools.worker.timing import run_time

        return run_time(job, benchmark=job.kind == "benchmark")
    if job.kind == "selftest":
        return _selftest(job)
    raise ValueError(f"unknown job kind {job.kind}")


def _selftest(job) -> dict:
    what = job.options.get("what", "env")
    if what == "do_bench":
        from tools.worker.timing import run_do_bench

        return run_do_bench(job)
    if what == "env":
        import torch

        return {
            "cuda": bool(torch.cuda.is_available()),
            "env_keys": sorted(os.environ),
            "torch": torch.__version__,
        }
    if what == "fault":
        # Used by the sandbox tests to prove containment; never reached from a candidate.
        kind = job.options.get("fault")
        if kind == "loop":
            while True:
                pass
        if kind == "segfault":
            import ctypes

            ctypes.string_at(0)
        if kind == "exit":
            os._exit(3)
        if kind == "stdout":
            chunk = "x" * 65536 + "\n"
            for _ in range(2000):
                sys.stdout.write(chunk)
            return {"printed": 2000 * len(chunk)}
        if kind == "forge":
            return {"note": "not forged"}
        raise ValueError(f"unknown fault {kind}")
    raise ValueError(f"unknown selftest {what}")


if __name__ == "__main__":
    sys.exit(main())
