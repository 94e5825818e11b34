"""Worker entry point (the judge): read one Job, run it, write one JobResult to the result file.

This process never imports candidate code: a job that involves a candidate forks a confined
runner (tools/worker/judge.py, runner.py, confine.py) before this process touches CUDA. The job
file is deleted before any task code runs; the result is wrapped with a nonce that arrives on
stdin (never in the environment, which /proc shows), and this process dies with its parent.
"""

from __future__ import annotations

import json
import os
import sys
import time
import traceback
from pathlib import Path

from tools.sandbox import WAIT_NOTE


def _write(path: Path, nonce: str, result: dict) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"nonce": nonce, "result": result}, default=str))
    tmp.replace(path)


def main() -> int:
    job_path, result_path = Path(sys.argv[1]), Path(sys.argv[2])
    parent = int(sys.argv[3]) if len(sys.argv) > 3 else None
    from tools.worker.confine import set_death_signal

    set_death_signal()
    if parent is not None and os.getppid() != parent:
        return 1  # the agent died before the death signal was armed
    nonce = sys.stdin.readline().strip()
    sys.argv = sys.argv[:1]
    run(job_path, result_path, nonce)
    return 0


def run(job_path: Path, result_path: Path, nonce: str) -> None:
    """Run one job and write its result; never returns (the cold entry point and the warm
    server's forked children both end here)."""
    raw = job_path.read_text()
    job_path.unlink()

    from tools.protocol import Job

    job = Job.model_validate_json(raw)
    from tools.worker.gpulock import note_waits_to

    # beside the result: the agent reads how long this job waited for the GPU (tools/sandbox.py)
    note_waits_to(str(result_path.parent / WAIT_NOTE))
    t0 = time.monotonic()
    base = {"kind": job.kind}
    try:
        from tools.worker.common import BadTask, InfraFault, is_oom

        try:
            payload = _dispatch(job)
            result = {**base, "ok": True, "payload": payload}
        except BadTask as e:
            result = {**base, "ok": False, "error_kind": "bad_task", "error": str(e)}
        except InfraFault as e:
            result = {**base, "ok": False, "error_kind": e.kind, "error": str(e)[:600]}
    except Exception as e:
        tb = traceback.format_exc()
        sys.stderr.write(tb)
        from tools.worker.common import is_oom

        result = {
            **base,
            "ok": False,
            # this process's own GPU work ran out of memory: the machine was full, not the task bad
            "error_kind": "oom" if is_oom(e) else "internal",
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
    notes: list[str] = []
    if job.device != "cuda" and job.candidate_source:
        from tools.autotune import pin_first

        # The interpreter's autotuner needs a GPU driver to time configs: the first one runs.
        source, notes = pin_first(job.candidate_source)
        if notes:
            job = job.model_copy(update={"candidate_source": source})
    payload = _dispatch_job(job)
    for report in (payload, payload.get("check")) if notes else ():
        if isinstance(report, dict) and "accepted" in report:
            report["degenerate"] = [*(report.get("degenerate") or []), *notes]
    return payload


def _dispatch_job(job) -> dict:
    if job.kind == "evaluate":
        from tools.worker.evaluate import run_evaluate

        return run_evaluate(job)
    runner = None
    if job.candidate_source is not None and job.kind in ("compile", "check", "time", "benchmark"):
        from tools.worker.check import static_rejection
        from tools.worker.compile_job import run_compile, syntax_failure

        if syntax_failure(job.candidate_source) is not None or static_rejection(job, 0.0) is not None:
            # never run: the rules' findings are the result
            if job.kind == "compile":
                return run_compile(job)
            from tools.worker.check import run_check

            rejected = run_check(job)
            if job.kind == "check":
                return rejected
            return {"measured": False, "reason": "; ".join(rejected["reasons"])[:1200]}
        from tools.worker.judge import RunnerProcess

        # forked now, before this process touches CUDA (a forked CUDA context is unusable)
        runner = RunnerProcess(job, timeout_s=float(job.options.get("runner_timeout_s", 280)))
    try:
        if job.device != "cuda":
            return _dispatch_unlocked(job, runner)
        from tools.worker.gpulock import gpu_lock
        from tools.worker.gpumem import (
            ensure_cuda_context,
            gpu_memory,
            job_units,
            preload_for_reference,
            share_cpu_threads,
        )

        share_cpu_threads()
        with gpu_memory(job_units(job)):
            if job.kind in ("check", "describe"):
                ensure_cuda_context()  # before any GPU lock: its GPU steps hold the lock
                preload_for_reference(job.task_source, dict(job.size_overrides))  # so is this
            if job.kind in ("time", "benchmark"):
                from tools.worker.timing import run_time

                # Shared lock for the set-up, exclusive to time; torch.compile's warm-up holds
                # it only where Inductor benchmarks configs (timing.compile_warmup_lock).
                return run_time(job, benchmark=job.kind == "benchmark", runner=runner, staged_lock=True)
            if job.kind in ("compile", "check"):
                return _dispatch_unlocked(job, runner)  # these take the shared lock around each GPU step
            with gpu_lock(exclusive=False, step=f"job.{job.kind}"):
                return _dispatch_unlocked(job, runner)
    finally:
        if runner is not None:
            runner.close()


def _dispatch_unlocked(job, runner=None) -> dict:
    if job.kind == "describe":
        from tools.worker.describe import run_describe

        return run_describe(job)
    if job.kind == "compile":
        from tools.worker.compile_job import run_compile

        return run_compile(job, runner)
    if job.kind == "check":
        from tools.worker.check import run_check

        return run_check(job, runner)
    if job.kind in ("time", "benchmark"):
        from tools.worker.timing import run_time

        return run_time(job, benchmark=job.kind == "benchmark", runner=runner)
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
    if what == "confinement":
        return _probe_confinement(job)
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


def _probe_confinement(job) -> dict:
    """What a runner sees from inside its confinement (the sandbox tests' probe)."""
    from tools.worker.confine import Confinement, confine

    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        info: dict = {}
        try:
            import socket

            from tools.worker.judge import _repo_root, confinement_for

            applied = confine(confinement_for(job, 60))
            info["isolation"] = applied.as_dict()
            info["visible_pids"] = sum(1 for d in os.listdir("/proc") if d.isdigit())
            try:
                socket.create_connection(("1.1.1.1", 53), timeout=2).close()
                info["network"] = "reachable"
            except OSError:
                info["network"] = "unreachable"
            info["repo_writable"] = os.access(_repo_root(), os.W_OK)
            status = open("/proc/self/status").read()
            info["cap_eff"] = next(ln.split()[1] for ln in status.splitlines() if ln.startswith("CapEff"))
            info["env_keys"] = sorted(os.environ)
            if job.device == "cuda":
                import torch

                x = torch.ones(1 << 20, device="cuda")
                info["cuda_sum"] = float(x.sum())
        except BaseException as e:  # noqa: BLE001
            info["error"] = repr(e)
        os.write(w, json.dumps(info).encode())
        os._exit(0)
    os.close(w)
    data = b""
    while chunk := os.read(r, 65536):
        data += chunk
    os.waitpid(pid, 0)
    del Confinement
    return json.loads(data)


if __name__ == "__main__":
    sys.exit(main())
