"""A stand-in for `egg optimize` used by the eval runner tests.

Parses the optimize CLI contract, then behaves according to the task's file stem:
FAKE_OPT_MODES="stem=mode,..." with mode one of ok | nokernel | badinput | crash | hang |
noreport | lie | orphan; stems containing "degenerate" get a checker degenerate note; stems containing "sort" default to nokernel, others to ok.
Modes overrun / overrun_nokernel ignore --run-seconds (a job that ran past the budget) and sleep
until SIGTERM, then write a report as `egg optimize` does when an eval's time box ends (its wrap-up):
verified with the stage's timing, or no kernel.
FAKE_OPT_SLEEP: seconds to sleep before finishing (for resume/interrupt tests);
FAKE_OPT_SLEEPS="stem=seconds,..." per task. With --run-seconds shorter than the sleep, the run
stops at its budget as optimize does (report "halt"): mode ok still verifies (a kernel was found
before the budget ended), mode late has none yet (exit 1).
FAKE_OPT_TIMING=1: write GPU-like timing (deterministic per task, with p20/p80) instead of
timing=null, and log one `tool.evaluate` line with job phases as the real optimize does on a GPU.
FAKE_OPT_LOG: file to which each invocation appends "<stem> <CUDA_VISIBLE_DEVICES>".
--shapes ragged: the report says so, with sizes_used {"N": 11}.
It never imports torch: the runner tests must stay fast.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import time
from pathlib import Path


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("task")
    ap.add_argument("--out", required=True)
    ap.add_argument("--thread-id", required=True)
    ap.add_argument("--device", required=True, choices=["cpu", "cuda"])
    ap.add_argument("--model", required=True)
    ap.add_argument("--policy", required=True, choices=["strict", "mixed"])
    ap.add_argument("--stages")
    ap.add_argument("--seeds", type=int)
    ap.add_argument("--run-seconds", type=float)
    ap.add_argument("--shapes", choices=["as-written", "ragged"], default="as-written")
    a = ap.parse_args()
    stem = Path(a.task).stem
    modes = dict(kv.split("=", 1) for kv in os.environ.get("FAKE_OPT_MODES", "").split(",") if "=" in kv)
    mode = modes.get(stem, "nokernel" if "sort" in stem else "ok")
    if log := os.environ.get("FAKE_OPT_LOG"):
        with open(log, "a") as f:
            f.write(f"{stem} {os.environ.get('CUDA_VISIBLE_DEVICES', '<unset>')}\n")
    sleeps = dict(kv.split("=", 1) for kv in os.environ.get("FAKE_OPT_SLEEPS", "").split(",") if "=" in kv)
    sleep_s = float(sleeps.get(stem, os.environ.get("FAKE_OPT_SLEEP", "0")))
    halt = None
    overrun = mode.startswith("overrun")
    if overrun:
        import signal

        class Term(Exception):
            pass

        def on_term(signum, frame):
            raise Term()

        signal.signal(signal.SIGTERM, on_term)
        try:
            time.sleep(3600)
        except Term:
            halt = "stopped before the final benchmark (SIGTERM: an eval's time box ended)"
            mode = "ok" if mode == "overrun" else "nokernel"
    elif a.run_seconds is not None and sleep_s > a.run_seconds:
        sleep_s = a.run_seconds
        halt = f"run wall-time budget of {a.run_seconds:g} s exhausted"
    if not overrun:
        time.sleep(sleep_s)
    if mode == "late":
        mode = "nokernel" if halt else "ok"
    if mode == "orphan":  # leave a sandbox-worker-like child running, then finish normally
        import subprocess

        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
        Path(a.out).mkdir(parents=True, exist_ok=True)
        (Path(a.out) / "orphan.pid").write_text(str(child.pid))
        mode = "ok"
    if mode == "hang":
        time.sleep(3600)
    if mode == "crash":
        print("Traceback (most recent call last):\nRuntimeError: fake optimize blew up", file=sys.stderr)
        return 3
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    if mode == "noreport":
        return 0
    verified = mode in ("ok", "lie")
    h = int(hashlib.sha1(stem.encode()).hexdigest()[:8], 16)
    timing = None
    s_e = s_c = None
    stages_run = (a.stages or "algorithm,mapping,tiling,memory").split(",")
    stages = []
    if verified and os.environ.get("FAKE_OPT_TIMING") == "1":
        eager = 1.0 + (h % 100) / 10.0
        cand = eager / (0.6 + (h % 23) / 10.0)
        comp = eager * 0.8
        timing = {"measured": True, "candidate_ms": cand, "eager_ms": eager, "compile_ms": comp,
                  "candidate_p20_ms": cand * 0.97, "candidate_p80_ms": cand * 1.05}  # fmt: skip
        s_e, s_c = eager / cand, comp / cand
        print("12:00:00 [info     ] tool.evaluate                  check=1.5 check.run=1.2 compile=0.5 "
              f"imports=2.0 memory_units=2 task={stem} wait_exclusive=0.25 wait_memory=0.5 wall_s=5.0")  # fmt: skip
    cur = None
    for i, st in enumerate(stages_run):
        ex = None if s_e is None else s_e ** ((i + 1) / len(stages_run))
        stages.append({"stage": st, "outcome": "improved" if verified else "failed", "changed": "fake",
                       "why": "fake", "speedup_entry": cur, "speedup_exit": ex, "attempts": 2,
                       "verified_attempts": 1 if verified else 0})  # fmt: skip
        cur = ex
    usage = {"calls": 1, "input_tokens": 100, "output_tokens": 50, "seconds": 0.1}
    degenerate = ["output is constant"] if mode == "ok" and "degenerate" in stem else []
    report = {
        "verified": verified, "thread_id": a.thread_id, "task": a.task, "device": a.device,
        "model": {"code": a.model, "profiler": a.model, "debugger": a.model}, "policy": a.policy, "family": "fakefam",
        "sizes_used": {"N": 11} if a.shapes == "ragged" else {}, "shapes": a.shapes, "shapes_requested": a.shapes,
        "dtype": "float32",
        "stages": stages, "timing": timing, "speedup_vs_eager": s_e, "speedup_vs_compile": s_c,
        "roofline_fraction": 0.5 if timing else None, "bottleneck": "memory",
        "usage": {"by_stage_role": {"algorithm/code": usage}, "total": usage},
        "check": {"accepted": verified, "degenerate": degenerate} if verified else None,
        "failure": None if verified else ("bad input: fake" if mode == "badinput" else halt or "no verified kernel: fake"),
        "halt": halt,
        "wall_s": 0.01, "env": {"gpu": None, "torch": "fake", "triton": "fake"},
    }  # fmt: skip
    (out / "report.json").write_text(json.dumps(report))
    if mode == "ok":
        (out / "model_new.py").write_text("# fake\n")
    return {"ok": 0, "lie": 0, "nokernel": 1, "badinput": 2}[mode]


if __name__ == "__main__":
    sys.exit(main())
