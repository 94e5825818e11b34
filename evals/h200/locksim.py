"""Replay a GPU-lock trace against this checkout's lock, on the CPU: how long the holds wait.

    python -m evals.h200.locksim LOCKTRACE.txt [--speed 4]

A trace (EGG_GPU_TRACE=1, tools/worker/gpulock.py) lists every hold of a suite run: its worker
process, mode and step, when it was asked for, got and released. Here each process of the trace
becomes a thread that sleeps through its CPU work (the gap between one release and its next ask),
takes tools.worker.gpulock.gpu_lock in the same mode and holds it for the same time, all of it
scaled down by --speed; each thread starts at its process's first ask. Nothing runs on a GPU:
what is compared is the lock's policy, on the demand of a real run. Printed: waits per mode
(median, sum, in trace seconds), the replay's span, and the waits per step of the lock.
Run it in two checkouts (`git worktree`) to compare two lock policies on the same trace.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import threading
import time
from collections import defaultdict
from pathlib import Path


def read_trace(path: Path) -> dict[str, list[tuple[str, float, float, float]]]:
    """pid -> [(what, asked, got, released)] of GPU-lock holds (memory shares left out)."""
    by_pid: dict[str, list[tuple[str, float, float, float]]] = defaultdict(list)
    for line in path.read_text().splitlines():
        parts = line.split()
        if len(parts) != 5 or not parts[0].startswith(("shared", "exclusive")):
            continue
        what, pid, asked, got, released = parts[0], parts[1], *map(float, parts[2:])
        by_pid[pid].append((what, asked, got, released))
    for holds in by_pid.values():
        holds.sort(key=lambda h: h[1])
    return dict(by_pid)


def replay(by_pid: dict[str, list[tuple[str, float, float, float]]], speed: float) -> dict[str, list]:
    from tools.worker.gpulock import gpu_lock

    t0 = min(h[1] for holds in by_pid.values() for h in holds)
    waits: dict[str, list[float]] = defaultdict(list)
    ends: list[float] = []
    lock = threading.Lock()
    start = time.monotonic() + 0.5

    def worker(holds: list[tuple[str, float, float, float]]) -> None:
        prev_release = None
        for what, asked, got, released in holds:
            # the CPU work before this hold: from the trace's first ask, or the gap since the last
            gap = (asked - t0) if prev_release is None else (asked - prev_release)
            if prev_release is None:
                delay = start + gap / speed - time.monotonic()
            else:
                delay = gap / speed
            if delay > 0:
                time.sleep(delay)
            mode, _, step = what.partition(":")
            a = time.monotonic()
            with gpu_lock(exclusive=mode == "exclusive", step=step or None):
                g = time.monotonic()
                time.sleep(max(0.0, released - got) / speed)
            with lock:
                waits[what].append((g - a) * speed)
            prev_release = released
        with lock:
            ends.append((time.monotonic() - start) * speed)

    threads = [threading.Thread(target=worker, args=(h,)) for h in by_pid.values()]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return {"waits": dict(waits), "span": max(ends)}  # type: ignore[dict-item]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("trace", type=Path)
    ap.add_argument("--speed", type=float, default=4.0, help="replay this many times faster than the run")
    args = ap.parse_args(argv)
    by_pid = read_trace(args.trace)
    with tempfile.TemporaryDirectory() as d:
        os.environ["EGG_GPU_LOCK"] = str(Path(d, "gpu.lock"))
        os.environ.pop("EGG_GPU_TRACE", None)
        out = replay(by_pid, args.speed)
    t0 = min(h[1] for holds in by_pid.values() for h in holds)
    t1 = max(h[3] for holds in by_pid.values() for h in holds)
    print(f"trace: {len(by_pid)} processes, {sum(map(len, by_pid.values()))} holds, span {t1 - t0:.1f} s")
    orig: dict[str, list[float]] = defaultdict(list)
    for holds in by_pid.values():
        for what, asked, got, _ in holds:
            orig[what.split(":")[0]].append(got - asked)
    for mode, ws in sorted(orig.items()):
        print(f"  {mode:9} waits in the run: median {statistics.median(ws):6.3f} s  sum {sum(ws):8.1f} s")
    print(f"replay span {out['span']:.1f} s (trace seconds, at speed {args.speed:g})")
    by_mode: dict[str, list[float]] = defaultdict(list)
    for what, ws in sorted(out["waits"].items()):
        by_mode[what.split(":")[0]] += ws
    for mode, ws in sorted(by_mode.items()):
        print(f"  {mode:9} waits: n {len(ws):4}  median {statistics.median(ws):6.3f} s  sum {sum(ws):8.1f} s")
    for what, ws in sorted(out["waits"].items()):
        print(f"    {what:34} n {len(ws):4}  median {statistics.median(ws):6.3f} s  sum {sum(ws):8.1f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
