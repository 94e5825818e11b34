"""The `evaluate` job (GPU): compile, check and time one candidate in one fresh process.

The same three steps as the `compile`, `check` and `time` jobs, in that order, each run only when
the one before passed; one process per candidate saves two interpreter start-ups, two CUDA
context creations and two JIT compilations of the candidate's kernels.
"""

from __future__ import annotations

from typing import Any

from tools.worker.gpulock import gpu_lock


def run_evaluate(job) -> dict[str, Any]:
    from tools.worker.check import run_check
    from tools.worker.compile_job import run_compile
    from tools.worker.timing import run_time

    out: dict[str, Any] = {}
    with gpu_lock(exclusive=False):
        out["compile"] = run_compile(job)
        if not out["compile"].get("ok"):
            return out
        out["check"] = run_check(job)
    if not out["check"].get("accepted") or job.device != "cuda":
        return out
    with gpu_lock(exclusive=True):
        out["time"] = run_time(job, benchmark=False)
    return out
