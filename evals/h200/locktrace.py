"""Where a GPU run's wall time went, from the per-GPU lock's trace and the host's CPU load.

    python -m evals.h200.locktrace sample OUT_FILE [--every S]   # CPU load, until killed
    python -m evals.h200.locktrace report TRACE [--cpu CPU_FILE] [--since T] [--until T]

`EGG_GPU_TRACE=1` makes every worker append its holds of the GPU lock and of memory shares to
`<lock>.trace` (tools/worker/gpulock.py `trace_hold`: "<what> <pid> <asked> <got> <released>").
`report` sweeps those intervals and says, for the run's window, which share of the wall time the
GPU was
  - timing: held exclusively (one job timing, nothing else on the GPU);
  - draining: a writer waited for the shared holders to finish (they run, nobody else may start);
  - shared: held shared only (compiles' recording calls, checks, set-ups), no writer waiting;
  - idle: neither held nor asked for (the tasks' CPU work, the agent, start-up);
with the holds' counts and medians, the mean number of shared holders, the mean memory shares
held, a table per named step of the holds (<mode>:<step> in the trace, e.g. shared:check.trial:
held seconds, and for shared steps the seconds they were held while a timer waited for them),
and, with `--cpu`, the host's CPU load in each state. A tool loop bound by the exclusive
lock shows timing + draining near 100%; one bound by the CPU shows a saturated CPU while idle.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

from tools.worker.laps import cpu_times


def sample(path: str, every: float) -> None:
    """Append "<epoch> <busy fraction>" of all CPUs every `every` seconds (from /proc/stat)."""
    last = cpu_times()
    if last is None:
        return
    while True:
        time.sleep(every)
        now = cpu_times()
        if now is None:
            return
        total, idle = now[0] - last[0], now[1] - last[1]
        last = now
        if total > 0:
            with open(path, "a") as f:
                f.write(f"{time.time():.2f} {1.0 - idle / total:.3f}\n")


def read_trace(path: str, bad: list[str] | None = None) -> list[tuple[str, int, float, float, float]]:
    """The trace's holds; lines that do not parse go to `bad` (the report counts them)."""
    holds = []
    for line in Path(path).read_text().splitlines():
        parts = line.split()
        try:
            if len(parts) != 5:
                raise ValueError(line)
            holds.append((parts[0], int(parts[1]), float(parts[2]), float(parts[3]), float(parts[4])))
        except ValueError:
            if bad is not None:
                bad.append(line)
    return holds


def read_cpu(path: str | None) -> list[tuple[float, float]]:
    if not path or not os.path.exists(path):
        return []
    out = []
    for line in Path(path).read_text().splitlines():
        try:
            t, b = line.split()[:2]
            out.append((float(t), float(b)))
        except ValueError:
            continue
    return out


STATES = ("timing", "draining", "shared", "handoff", "idle")


def mode(what: str) -> str:
    """The hold's kind without its step: "shared:check.trial" -> "shared"."""
    return what.split(":", 1)[0]


def step(what: str) -> str:
    """The step a lock hold names ("shared:check.trial" -> "check.trial"), "-" where none."""
    return what.split(":", 1)[1] if ":" in what else "-"


def sweep(holds, since: float | None = None, until: float | None = None) -> dict:
    """Seconds per state and the means over the window (see the module docstring)."""
    holds = [(mode(h[0]), *h[1:]) for h in holds]
    lock = [h for h in holds if h[0] in ("exclusive", "shared")]
    if not lock:
        return {}
    t0 = min(h[2] for h in lock) if since is None else since
    t1 = max(h[4] for h in lock) if until is None else until
    events: list[tuple[float, str, int]] = []
    for what, _pid, asked, got, rel in holds:
        if what == "exclusive":
            events += [(asked, "xwait", 1), (got, "xwait", -1), (got, "x", 1), (rel, "x", -1)]
        elif what == "shared":
            events += [(got, "s", 1), (rel, "s", -1)]
        elif what.startswith("mem"):
            u = int(what[3:] or 0)
            events += [(got, "mem", u), (rel, "mem", -u)]
    events.sort(key=lambda e: (e[0], e[2]))  # releases before acquisitions at the same instant
    count = {"x": 0, "xwait": 0, "s": 0, "mem": 0}
    secs = dict.fromkeys(STATES, 0.0)
    shared_area = mem_area = 0.0
    spans: list[tuple[float, float, str]] = []
    prev = t0
    for t, kind, d in events + [(t1, "end", 0)]:
        a, b = max(prev, t0), min(t, t1)
        if b > a:
            if count["x"] > 0:
                state = "timing"
            elif count["xwait"] > 0:
                state = "draining" if count["s"] > 0 else "handoff"
            else:
                state = "shared" if count["s"] > 0 else "idle"
            secs[state] += b - a
            shared_area += count["s"] * (b - a)
            mem_area += count["mem"] * (b - a)
            spans.append((a, b, state))
        prev = max(prev, t)
        if kind in count:
            count[kind] += d
    wall = max(t1 - t0, 1e-9)
    return {
        "window": (t0, t1),
        "wall": wall,
        "secs": secs,
        "shared_mean": shared_area / wall,
        "mem_mean": mem_area / wall,
        "spans": spans,
    }


def cpu_by_state(spans, cpu: list[tuple[float, float]]) -> dict[str, float]:
    """Mean CPU busy fraction over the samples falling in each state's spans."""
    acc: dict[str, list[float]] = {}
    j = 0
    for a, b, state in spans:
        while j < len(cpu) and cpu[j][0] < a:
            j += 1
        k = j
        while k < len(cpu) and cpu[k][0] < b:
            acc.setdefault(state, []).append(cpu[k][1])
            k += 1
    return {s: statistics.fmean(v) for s, v in acc.items() if v}


def _hold_stats(holds, kind: str, t0: float, t1: float) -> str:
    sel = [
        h
        for h in holds
        if (mode(h[0]) == kind or (kind == "mem" and h[0].startswith("mem"))) and t0 <= h[3] <= t1
    ]
    if not sel:
        return f"{kind:9s} holds 0"
    held = [h[4] - h[3] for h in sel]
    waited = [h[3] - h[2] for h in sel]
    return (
        f"{kind:9s} holds {len(sel):5d}  held median {statistics.median(held):6.3f} s, sum {sum(held):8.1f} s"
        f"  | waited median {statistics.median(waited):6.3f} s, sum {sum(waited):8.1f} s"
    )


def by_step(holds, spans, t0: float, t1: float) -> list[tuple[str, int, float, float, float]]:
    """Per named step of the lock's holds in the window, most held first: (mode:step, holds,
    median held s, held s, s held while a timer waited): the last is what a shared step made
    timers wait for (its overlap with the draining spans), the next thing to shorten."""
    drains = [(a, b) for a, b, st in spans if st == "draining"]
    rows: dict[str, list[float]] = {}
    blocked: dict[str, float] = {}
    for what, _pid, _asked, got, rel in holds:
        if mode(what) not in ("exclusive", "shared") or not t0 <= got <= t1:
            continue
        key = f"{mode(what)}:{step(what)}"
        rows.setdefault(key, []).append(rel - got)
        if mode(what) == "shared":
            over = sum(max(0.0, min(rel, b) - max(got, a)) for a, b in drains if a < rel and b > got)
            blocked[key] = blocked.get(key, 0.0) + over
    out = [(k, len(v), statistics.median(v), sum(v), blocked.get(k, 0.0)) for k, v in rows.items()]
    return sorted(out, key=lambda r: -r[3])


def report(trace: str, cpu_file: str | None, since: float | None, until: float | None) -> str:
    bad: list[str] = []
    holds = read_trace(trace, bad)
    res = sweep(holds, since, until)
    if not res:
        return f"{trace}: no lock holds traced"
    t0, t1 = res["window"]
    lines = [
        f"window {time.strftime('%H:%M:%S', time.gmtime(t0))}-{time.strftime('%H:%M:%S', time.gmtime(t1))} UTC,"
        f" {res['wall']:.1f} s"
    ]
    cpu = [c for c in read_cpu(cpu_file) if t0 <= c[0] <= t1]
    by_state = cpu_by_state(res["spans"], cpu) if cpu else {}
    for s in STATES:
        sec = res["secs"][s]
        extra = f"   CPU busy {by_state[s]:.0%}" if s in by_state else ""
        lines.append(f"  {s:9s} {sec:8.1f} s  {sec / res['wall']:6.1%}{extra}")
    lines.append(
        f"  mean shared holders {res['shared_mean']:.2f}, mean memory shares held {res['mem_mean']:.1f}"
    )
    if cpu:
        lines.append(
            f"  CPU busy over the window: mean {statistics.fmean(c[1] for c in cpu):.0%} ({len(cpu)} samples)"
        )
    for kind in ("exclusive", "shared", "mem"):
        lines.append("  " + _hold_stats(holds, kind, t0, t1))
    steps = by_step(holds, res["spans"], t0, t1)
    if any(k.split(":", 1)[1] != "-" for k, *_ in steps):
        lines.append("  per step (held s, and for shared steps the s held while a timer waited):")
        for k, n, med, tot, blk in steps:
            lines.append(
                f"    {k:32s} holds {n:5d}  median {med:6.3f} s  sum {tot:8.1f} s  during drains {blk:7.1f} s"
            )
    if bad:
        lines.append(f"  {len(bad)} line(s) of the trace did not parse and were left out")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m evals.h200.locktrace")
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("sample")
    s.add_argument("out")
    s.add_argument("--every", type=float, default=2.0)
    r = sub.add_parser("report")
    r.add_argument("trace")
    r.add_argument("--cpu")
    r.add_argument("--since", type=float)
    r.add_argument("--until", type=float)
    a = ap.parse_args(argv)
    if a.cmd == "sample":
        sample(a.out, a.every)
        return 0
    print(report(a.trace, a.cpu, a.since, a.until))
    return 0


if __name__ == "__main__":
    sys.exit(main())
