"""Eval metrics over results.jsonl rows: pure functions, no I/O.

Honesty rules: a row's speedup is used only when the row is verified AND the speedup was
measured (not None); rows without timing (CPU runs) count as verified but their speedups are
reported as "not measured" (None), never as 0 or 1. fast_p follows KernelBench: the fraction
of ALL tasks that are correct AND have speedup > p. fast_0 is therefore the correctness rate on
every device (a kernel that ran has a positive speedup, timed or not).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping
from typing import Any

# a final benchmark this far from its stage's timing of the same kernel is flagged
from graph.records import IRREPRODUCIBLE

Row = Mapping[str, Any]

P_VALUES: tuple[float, ...] = (0.0, 1.0, 1.2, 1.5, 2.0)
# vs_best: against the faster of eager and torch.compile timed in the same run (graph/records.py)
SPEEDUP_KEYS = {
    "vs_eager": "speedup_vs_eager",
    "vs_compile": "speedup_vs_compile",
    "vs_best": "speedup_vs_best",
}
# Below this the eager reference is launch-bound: a ratio of two launch overheads says
# little about the kernel, so such tasks are flagged rather than silently averaged in.
LAUNCH_BOUND_MS = 0.02
# Above this a speedup over eager PyTorch almost always means skipped work or a degenerate task.
IMPLAUSIBLE_SPEEDUP = 50.0


def _num(x: Any) -> float | None:
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return None
    x = float(x)
    return x if math.isfinite(x) else None


def geomean(xs: Iterable[float]) -> float | None:
    vals = list(xs)
    if not vals:
        return None
    if any(v <= 0 for v in vals):
        raise ValueError("geomean needs positive values")
    return math.exp(sum(math.log(v) for v in vals) / len(vals))


def measured_speedups(rows: Iterable[Row], which: str = "vs_eager") -> list[float]:
    """Speedups of verified rows that were actually measured."""
    key = SPEEDUP_KEYS[which]
    out = []
    for r in rows:
        s = _num(r.get(key))
        if r.get("verified") is True and s is not None and s > 0:
            out.append(s)
    return out


def fast_p(rows: list[Row], p: float, which: str = "vs_eager") -> float | None:
    """Fraction of all tasks that are verified and faster than p x (KernelBench fast_p).

    p = 0 is the correctness rate, measured or not. For p > 0: None (not measured) when some
    task is verified but no verified task has a measured speedup: we cannot tell how many are
    fast. With no verified task the answer is 0. A mix of measured and unmeasured verified rows
    gives a lower bound (unmeasured rows are not counted as fast); summarize() reports how many
    rows that concerns.
    """
    if not rows:
        return None
    verified = [r for r in rows if r.get("verified") is True]
    if p <= 0 or not verified:
        return len(verified) / len(rows)
    spd = measured_speedups(verified, which)
    if not spd:
        return None
    return sum(1 for s in spd if s > p) / len(rows)


def _stats(xs: list[float]) -> dict[str, Any]:
    if not xs:
        return {"n": 0, "geomean": None, "median": None, "mean": None, "min": None, "max": None}
    return {
        "n": len(xs),
        "geomean": geomean(xs),
        "median": statistics.median(xs),
        "mean": statistics.fmean(xs),
        "min": min(xs),
        "max": max(xs),
    }


def _pct(k: int, n: int) -> float | None:
    return 100.0 * k / n if n else None


def summarize(rows: list[Row]) -> dict[str, Any]:
    """Headline metrics for one set of rows (all tasks, one family, one level, ...)."""
    n = len(rows)
    verified = [r for r in rows if r.get("verified") is True]
    compiled_known = [r for r in rows if isinstance(r.get("compiled"), bool)]
    compiled = sum(1 for r in compiled_known if r["compiled"])
    failures: dict[str, int] = {}
    for r in rows:
        if r.get("verified") is not True:
            kind = str(r.get("failure_kind") or "unknown")
            failures[kind] = failures.get(kind, 0) + 1
    out: dict[str, Any] = {
        "tasks": n,
        "compiled": {"count": compiled, "pct": _pct(compiled, n), "unknown": n - len(compiled_known)},
        "verified": {"count": len(verified), "pct": _pct(len(verified), n)},
        "failed": n - len(verified),
        "failures_by_kind": dict(sorted(failures.items())),
        "fast_p": {},
        "speedup": {},
        "measured": {},
        "unmeasured_verified": {},
    }
    for which in SPEEDUP_KEYS:
        spd = measured_speedups(verified, which)
        out["fast_p"][which] = {pkey(p): fast_p(rows, p, which) for p in P_VALUES}
        out["speedup"][which] = _stats(spd)
        out["measured"][which] = len(spd)
        out["unmeasured_verified"][which] = len(verified) - len(spd)
    roof = [x for r in verified if (x := _num(r.get("roofline_fraction"))) is not None]
    out["roofline_fraction"] = {"n": len(roof), "median": statistics.median(roof) if roof else None}
    # per bottleneck (issue 13 asks memory-bound kernels for a median of 80% of the bandwidth roof)
    by: dict[str, list[tuple[float, str]]] = {}
    for r in verified:
        if (x := _num(r.get("roofline_fraction"))) is not None and r.get("bottleneck"):
            by.setdefault(str(r["bottleneck"]), []).append((x, str(r.get("task"))))
    out["roofline_by_bottleneck"] = {
        b: {
            "n": len(v),
            "median": statistics.median(x for x, _ in v),
            "below_0.8": [t for x, t in sorted(v) if x < 0.8],
        }
        for b, v in sorted(by.items())
    }
    out["tokens"] = {
        "input": sum(int((r.get("tokens") or {}).get("input") or 0) for r in rows),
        "output": sum(int((r.get("tokens") or {}).get("output") or 0) for r in rows),
    }
    walls = [x for r in rows if (x := _num(r.get("wall_s"))) is not None]
    out["wall_s"] = {"total": sum(walls), "median": statistics.median(walls) if walls else None}
    return out


def phase_totals(rows: Iterable[Row]) -> dict[str, dict[str, Any]]:
    """Seconds per phase over tasks: {phase: {"total", "median", "tasks"}}, largest total first.

    A row's `phases` maps a phase (describe, compile, check, time, wait_memory, ...) to its seconds in that
    task; the median is over the tasks that report the phase (`tasks` says how many)."""
    per: dict[str, list[float]] = {}
    for r in rows:
        for name, sec in (r.get("phases") or {}).items():
            if (x := _num(sec)) is not None:
                per.setdefault(str(name), []).append(x)
    out = {k: {"total": sum(v), "median": statistics.median(v), "tasks": len(v)} for k, v in per.items()}
    return dict(sorted(out.items(), key=lambda kv: -kv[1]["total"]))


def pkey(p: float) -> str:
    return f"{p:g}" if p != int(p) else f"{p:.1f}"


def group_by(rows: list[Row], field: str) -> dict[str, list[Row]]:
    groups: dict[str, list[Row]] = {}
    for r in rows:
        groups.setdefault(str(r.get(field) or "unknown"), []).append(r)
    return dict(sorted(groups.items()))


def stage_order(rows: Iterable[Row]) -> list[str]:
    order: list[str] = []
    for r in rows:
        for s in r.get("stages") or []:
            name = s.get("stage")
            if name and name not in order:
                order.append(name)
    return order


def stage_ablation(rows: list[Row]) -> dict[str, Any]:
    """Speedup vs eager after each stage, and what each stage decided.

    The speedup after a stage is its speedup_exit; a stage without one (failed/skipped)
    carries the previous value forward, since the best kernel is unchanged. Geomeans are
    over verified tasks that have a value after every stage, so each column averages the
    same tasks and the waterfall is comparable stage to stage.
    """
    order = stage_order(rows)
    outcomes = {s: {} for s in order}
    for r in rows:
        for s in r.get("stages") or []:
            name = s.get("stage")
            if name in outcomes:
                oc = str(s.get("outcome") or "unknown")
                outcomes[name][oc] = outcomes[name].get(oc, 0) + 1
    series: list[list[float]] = []
    for r in rows:
        if r.get("verified") is not True:
            continue
        by_stage = {s.get("stage"): s for s in r.get("stages") or []}
        entry = None
        first = by_stage.get(order[0]) if order else None
        if first is not None:
            entry = _num(first.get("speedup_entry"))
        vals: list[float] = []
        cur = entry
        for name in order:
            s = by_stage.get(name)
            ex = _num(s.get("speedup_exit")) if s else None
            if ex is not None and ex > 0:
                cur = ex
            if cur is None:
                break
            vals.append(cur)
        if len(vals) == len(order) and vals:
            series.append(vals)
    stages = []
    for i, name in enumerate(order):
        col = [v[i] for v in series]
        stages.append(
            {"stage": name, "geomean_after": geomean(col), "n": len(col), "outcomes": outcomes[name]}
        )
    return {"stages": stages, "tasks_with_all_stages_measured": len(series)}


def degenerate_flags(row: Row) -> list[str]:
    """Why a row's numbers should not be read at face value (empty when fine)."""
    flags = [str(f) for f in row.get("degenerate") or []]
    eager = _num(row.get("eager_ms"))
    if eager is not None and eager < LAUNCH_BOUND_MS:
        flags.append(f"launch-bound: eager {eager * 1000:.1f} us < {LAUNCH_BOUND_MS * 1000:.0f} us")
    final, stage = _num(row.get("candidate_ms")), _num(row.get("stage_ms"))
    if final and stage and abs(final / stage - 1.0) > IRREPRODUCIBLE:
        flags.append(
            f"final benchmark {final:.3f} ms against the stage's {stage:.3f} ms for the same kernel "
            f"({final / stage - 1.0:+.0%}): its time did not reproduce in another process "
            + (
                f"(host-bound there: its kernels replay as a CUDA graph in {_num(row.get('cudagraph_ms')):.3f} ms)"
                if final > stage and host_bound(row) is not None
                else "(a library's algorithm choice?)"
            )
        )
    spd = _num(row.get("speedup_vs_eager"))
    if row.get("verified") is True and spd is not None and spd > IMPLAUSIBLE_SPEEDUP:
        flags.append(f"implausible speedup {spd:.1f}x > {IMPLAUSIBLE_SPEEDUP:g}x (skipped work?)")
    return flags


OUTCOMES = ("verified", "unsupported", "bad_input", "failed")


def outcome(row: Row) -> str:
    """verified, unsupported (no family lowers an op: the run says which), bad_input (the task
    file), or failed (anything else: a kernel that never verified, a timeout, a crash)."""
    if row.get("verified") is True:
        return "verified"
    if row.get("failure_kind") == "bad_input":
        return "bad_input"
    if str(row.get("failure") or "").startswith("unsupported:"):
        return "unsupported"
    return "failed"


def outcomes(rows: list[Row]) -> dict[str, Any]:
    """Counts of each outcome per level (and in all), and the unsupported and failed tasks with
    their reasons: the table of what the expert covers."""
    per_level: dict[str, dict[str, int]] = {}
    for lvl, group in [*group_by(rows, "level").items(), ("all", rows)]:
        counts = dict.fromkeys(OUTCOMES, 0)
        for r in group:
            counts[outcome(r)] += 1
        per_level[lvl] = {"tasks": len(group), **counts}
    listed = {
        kind: [
            {"task": str(r.get("task")), "level": r.get("level"), "reason": str(r.get("failure") or "")}
            for r in rows
            if outcome(r) == kind
        ]
        for kind in ("unsupported", "bad_input", "failed")
    }
    return {"per_level": per_level, **listed}


# A verified kernel slower than this fraction of eager needs a reason in the report.
SLOW_VS_EAGER = 0.9


def slow_reason(row: Row) -> str:
    """One line on why a kernel is where it is: its bottleneck and roofline fraction, algorithm
    and precision, and the profiler's note (whatever the row records)."""
    parts = []
    rf, bn = _num(row.get("roofline_fraction")), row.get("bottleneck")
    if rf is not None and bn and bn != "unknown":
        parts.append(f"{bn}-bound at {rf:.0%} of its roofline")
    elif rf is not None:
        parts.append(f"at {rf:.0%} of its roofline")
    if row.get("algorithm"):
        parts.append(
            f"algorithm {row['algorithm']}" + (f" ({row['precision']})" if row.get("precision") else "")
        )
    if row.get("profile_note"):
        parts.append(f"profiler: {row['profile_note']}")
    if row.get("timed_by") == "judge_wall":
        parts.append("timed by the judge's wall clock (launch-bound: its own median was not confirmed)")
    if stage_timed(row):
        parts.append("timed by its stage: the time box ended before the final benchmark")
    if (hb := host_bound(row)) is not None:
        parts.append(
            f"host-bound: launched {_num(row.get('candidate_ms')):.3f} ms, its kernels replayed as a "
            f"CUDA graph {_num(row.get('cudagraph_ms')):.3f} ms ({hb:.2f}x)"
        )
    return "; ".join(parts) or "no reason recorded (no profile in the row)"


# A launched forward slower than this multiple of its CUDA-graph replay (the same kernels, no
# host work between them) spends its time on the host: Python launch overhead, or a busy host.
HOST_BOUND = 1.15


def host_bound(row: Row) -> float | None:
    """The launched forward's median over its CUDA-graph replay, when above HOST_BOUND (both
    measured in the final benchmark's job), else None."""
    ms, cg = _num(row.get("candidate_ms")), _num(row.get("cudagraph_ms"))
    if ms is None or cg is None or cg <= 0 or not row.get("verified"):
        return None
    return ms / cg if ms > HOST_BOUND * cg else None


def host_bound_rows(rows: Iterable[Row]) -> list[dict[str, Any]]:
    """Verified kernels whose launched forward is host-bound (`host_bound`), slowest first: the
    figure the report quotes is the launched one; the replay shows what the GPU work takes."""
    out = []
    for r in rows:
        x = host_bound(r)
        if x is not None:
            out.append(
                {
                    "task": r.get("task"),
                    "candidate_ms": _num(r.get("candidate_ms")),
                    "cudagraph_ms": _num(r.get("cudagraph_ms")),
                    "stage_ms": _num(r.get("stage_ms")),
                    "ratio": round(x, 3),
                }
            )
    return sorted(out, key=lambda d: -d["ratio"])


def stage_timed(row: Row) -> bool:
    """A row whose figures come from the stage that chose its kernel, not from the final
    benchmark (a run wrapped up at the end of an eval's time box; graph/cli.py _wrap_up_on_sigterm)."""
    return str(row.get("timed_by") or "").startswith("stage")


def slow_vs_eager(rows: Iterable[Row]) -> list[dict[str, Any]]:
    """Verified, measured kernels below SLOW_VS_EAGER x of eager, each with its one-line reason."""
    out = []
    for r in rows:
        s = _num(r.get("speedup_vs_eager"))
        if (
            r.get("verified")
            and r.get("timing_measured") is not False
            and s is not None
            and s < SLOW_VS_EAGER
        ):
            out.append({"task": r.get("task"), "speedup_vs_eager": s, "reason": slow_reason(r)})
    return sorted(out, key=lambda x: x["speedup_vs_eager"])


def compile_outside_bar(rows: Iterable[Row]) -> list[dict[str, Any]]:
    """Tasks whose torch.compile output missed the bar our kernels must pass (the baseline's
    own check, tools/worker/timing.py compile_accuracy), with the ratio against it and why."""
    out = []
    for r in rows:
        if r.get("compile_within_bar") is False:
            out.append(
                {
                    "task": r.get("task"),
                    "speedup_vs_compile": _num(r.get("speedup_vs_compile")),
                    "reason": str(r.get("compile_check_note") or ""),
                }
            )
    return out


def compute_metrics(rows: list[Row]) -> dict[str, Any]:
    """Everything report.md and metrics.json show."""
    flagged = {str(r.get("task")): f for r in rows if (f := degenerate_flags(r))}
    clean = [r for r in rows if str(r.get("task")) not in flagged]
    return {
        "overall": summarize(rows),
        "overall_excluding_degenerate": summarize(clean),
        "per_family": {k: summarize(v) for k, v in group_by(rows, "family").items()},
        "per_level": {k: summarize(v) for k, v in group_by(rows, "level").items()},
        "per_kind": {k: summarize(v) for k, v in group_by(rows, "kind").items()},
        "outcomes": outcomes(rows),
        "stage_ablation": stage_ablation(rows),
        "phases": phase_totals(rows),
        "degenerate": [{"task": t, "flags": f} for t, f in flagged.items()],
        "slow_vs_eager": slow_vs_eager(rows),
        "compile_outside_bar": compile_outside_bar(rows),
        "stage_timed": [str(r.get("task")) for r in rows if r.get("verified") and stage_timed(r)],
        "host_bound": host_bound_rows(rows),
    }


def latest_rows(rows: Iterable[Row]) -> list[Row]:
    """One row per task (the last written wins), in first-seen order."""
    by_task: dict[str, Row] = {}
    for r in rows:
        by_task[str(r.get("task"))] = r
    return list(by_task.values())
