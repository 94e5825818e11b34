"""Per-candidate-job seconds of one or more `egg eval` runs on a GPU, side by side.

    python -m evals.h200.jobphases RUN_DIR[@HH:MM:SS-HH:MM:SS] [RUN_DIR[@...] ...]

Reads every `tool.evaluate` line of RUN_DIR/tasks/*/optimize.log (one line per candidate job:
its wall time, its steps and their parts, its waits for the GPU lock and memory) and prints, per
key, the median over jobs and the sum, one column pair per run; then the tasks the runs share
with their wall seconds and attempts per stage, so a change of the tool loop can be judged on
the same work. Results rows hold the same keys summed per task (evals/phases.py).
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

from evals.phases import _KV_RE

KEYS = (
    "wall_s",
    "compile",
    "load",
    "compile.precompile",
    "compile.precompile_runner",
    "compile.record",
    "compile.record.to_device",
    "compile.record.inputs",
    "compile.record.forward",
    "compile.compile_specs",
    "check",
    "check.trials",
    "check.second_shape_precompile",
    "check.second_shape",
    "check.runner.call",
    "check.runner.build.cpu",
    "check.runner.build.to_device",
    "check.judge.reference",
    "check.judge.compare",
    "lock_waits",
    "wait_exclusive",
    "wait_memory",
    "time",
    "time.load",
    "time.setup",
    "time.first_call",
    "time.wait_exclusive",
    "time.bench_candidate",
    "time.wall_check",
    "cuda_init",
    "imports",
    "runner_start",
    "startup_and_exit",
)


def split_window(arg: str) -> tuple[Path, tuple[str, str] | None]:
    """RUN_DIR or RUN_DIR@HH:MM:SS-HH:MM:SS: a run's folder and the window of log lines to read.
    A resumed step's folder holds every call's task logs; the window picks one call's jobs."""
    path, sep, window = arg.rpartition("@")
    if not sep or "-" not in window:
        return Path(arg), None
    lo, hi = window.split("-", 1)
    return Path(path), (lo, hi)


def jobs(run: Path, window: tuple[str, str] | None = None) -> list[dict[str, float]]:
    rows = []
    for log in sorted(run.glob("tasks/*/optimize.log")):
        for line in log.read_text(errors="replace").splitlines():
            if "tool.evaluate" not in line:
                continue
            if window is not None and not window[0] <= line[:8] <= window[1]:
                continue
            kv = {k: v.strip("'\"") for k, v in _KV_RE.findall(line)}
            row = {}
            for k in KEYS:
                try:
                    row[k] = float(kv.get(k, 0) or 0)
                except ValueError:
                    row[k] = 0.0
            rows.append(row)
    return rows


# Per-task memory readings of the tool.evaluate lines (tools/worker/evaluate.py `gpu`): shares
# asked, the measured peak (the judge's and the runner's, summed), and the two parts.
MEMORY_KEYS = ("memory_units", "peak_gib", "judge_peak_gib", "runner_peak_gib")


def memory_by_task(run: Path) -> dict[str, dict[str, float]]:
    """Per task: its evaluate jobs, their median memory wait, the median and largest shares they
    were admitted with, and the largest peaks (GiB) they measured: where admission waits come
    from and which copies make a large request (judge and runner parts, where logged)."""
    out: dict[str, dict[str, float]] = {}
    for log in sorted(run.glob("tasks/*/optimize.log")):
        waits: list[float] = []
        seen: dict[str, list[float]] = {k: [] for k in MEMORY_KEYS}
        for line in log.read_text(errors="replace").splitlines():
            if "tool.evaluate" not in line:
                continue
            kv = dict(_KV_RE.findall(line))
            for k, bucket in [("wait_memory", waits), *seen.items()]:
                try:
                    bucket.append(float(kv[k].strip("'\"")))
                except (KeyError, ValueError):
                    pass
        if waits or seen["memory_units"]:
            units = seen["memory_units"] or [0.0]
            out[log.parent.name] = {
                "jobs": float(max(len(waits), len(seen["memory_units"]))),
                "wait_memory": statistics.median(waits or [0.0]),
                "units_median": statistics.median(units),
                "units_max": max(units),
                **{k: max(v) for k, v in seen.items() if k != "memory_units" and v},
            }
    return out


def _clock(line: str) -> int | None:
    """Seconds since midnight of a log line's leading HH:MM:SS, or None."""
    try:
        h, m, sec = (int(x) for x in line[:8].split(":"))
    except ValueError:
        return None
    return h * 3600 + m * 60 + sec


def final_seconds(run: Path) -> dict[str, int]:
    """Per task: seconds from its last stage decision to `finalize`, i.e. the final benchmark on
    the task's critical path (torch.compile's compile included unless it was prefetched)."""
    out = {}
    for log in sorted(run.glob("tasks/*/optimize.log")):
        last = end = None
        for line in log.read_text(errors="replace").splitlines():
            if "] stage.decision " in line:
                last = _clock(line)
            elif "] finalize " in line:
                end = _clock(line)
        if last is not None and end is not None:
            out[log.parent.name] = (end - last) % 86400
    return out


def rows(run: Path) -> dict[str, dict]:
    path = run / "results.jsonl"
    if not path.exists():
        return {}
    out = {}
    for line in path.read_text().splitlines():
        if line.strip():
            r = json.loads(line)
            out[r["name"]] = r
    return out


def main(argv: list[str]) -> int:
    given = [split_window(a) for a in argv]
    runs = [r for r, _ in given]
    if not runs:
        print(__doc__)
        return 2
    per = [jobs(r, w) for r, w in given]
    print("jobs: " + ", ".join(f"{r}: {len(j)}" for r, j in zip(runs, per, strict=True)))
    print(f"{'key':32s}" + "".join(f"{'median':>10s}{'sum':>9s}" for _ in runs))
    for k in KEYS:
        cells = ""
        for j in per:
            vals = [x[k] for x in j] or [0.0]
            cells += f"{statistics.median(vals):10.2f}{sum(vals):9.0f}"
        print(f"{k:32s}{cells}")
    results = [rows(r) for r in runs]
    shared = [n for n in results[0] if all(n in r for r in results[1:])]
    if len(runs) > 1 and shared:
        print(f"\ntasks in every run: {len(shared)}; wall s, attempts per stage, speedup vs eager / compile")
        for n in shared:
            cells = []
            for r in results:
                x = r[n]
                # attempts per stage, "+N" where N more were timed and screened out unchecked
                att = (
                    "["
                    + ", ".join(
                        f"{(s.get('attempts') or 0) - (s.get('screened_attempts') or 0)}"
                        + (f"+{s['screened_attempts']}" if s.get("screened_attempts") else "")
                        for s in x.get("stages") or []
                    )
                    + "]"
                )
                sc = x.get("speedup_vs_compile")
                cells.append(
                    f"{x.get('wall_s') or 0:6.0f} {att} {x.get('speedup_vs_eager') or 0:.2f}/{sc or 0:.2f}"
                )
            print(f"  {n:34s} " + " | ".join(cells))
        for r, run in zip(results, runs, strict=True):
            walls = [r[n].get("wall_s") or 0 for n in shared]
            print(f"  median wall of these tasks in {run}: {statistics.median(walls):.1f} s")
    for run in runs:
        mem = memory_by_task(run)
        if mem:
            print(
                f"\nmemory per task, {run}: jobs, median memory wait s, shares median/max, largest peak GiB"
            )
            for task, m in mem.items():
                parts = ""
                if "judge_peak_gib" in m or "runner_peak_gib" in m:
                    parts = f" (judge {m.get('judge_peak_gib', 0):.1f} + runner {m.get('runner_peak_gib', 0):.1f})"
                print(
                    f"  {task[:44]:44s} jobs {m['jobs']:3.0f}  wait {m['wait_memory']:6.1f}  "
                    f"shares {m['units_median']:.1f}/{m['units_max']:.0f}  peak {m.get('peak_gib', 0):.1f}{parts}"
                )
    for run in runs:
        fin = list(final_seconds(run).values())
        if fin:
            print(
                f"final benchmark after the last stage, {run}: median {statistics.median(fin):.0f} s, "
                f"sum {sum(fin)} s over {len(fin)} tasks"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
