"""Time every algorithm the expert offers for a task, side by side with eager and torch.compile,
without the agent loop: where a task loses, which seed is closest, and by how much.

    python -m evals.h200.probe TASK.py [TASK.py ...] --out DIR [--seeds 8] [--budget S]

Each task is described at its own size on the GPU, the expert writes its seeds, and each seed
goes through the toolbox's sandboxed evaluate job (compile, the full check, timing against eager
and torch.compile in the same job). Nothing here runs candidate code in this process. A table
per task is printed, and every row goes to DIR/probe.jsonl (one JSON object per seed).
A seed that fails its check is listed with the reason, never timed.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from graph.records import TaskSpec
from nodes.expert import ExpertCode
from nodes.models import CodeRequest, StageBrief
from tools.toolbox import Toolbox

STAGE = StageBrief(name="algorithm", objective="probe: every seed", may_change=[], must_keep=[])


def seeds(task: TaskSpec, desc, n: int) -> list:
    code = ExpertCode()
    out, seen = [], set()
    for i in range(n):
        r = code.write(CodeRequest(mode="seed", stage=STAGE, task=task, desc=desc, seed_index=i, n_seeds=n))
        if r.source is None or r.source in seen:
            continue
        seen.add(r.source)
        out.append(r)
    return out


def describe(r) -> str:
    """The groups' algorithms of a partitioned seed."""
    algos = {k: v for k, v in (r.params or {}).items() if k.endswith(".algorithm")}
    return " ".join(f"{k.split('.')[0]}={v}" for k, v in sorted(algos.items()))


def why(ev) -> str:
    if not ev.compile.ok:
        return f"compile: {ev.compile.error}"[:300]
    return "; ".join(ev.check.reasons if ev.check else ["not checked"])[:300]


def ratio_of(base: float | None, ms: float | None) -> str:
    return f"{base / ms:.2f}x" if base and ms else "-"


def fmt(x: float | None, spec: str = ".3f") -> str:
    return "-" if x is None else format(x, spec)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("tasks", nargs="+")
    ap.add_argument("--out", required=True)
    ap.add_argument("--seeds", type=int, default=8)
    ap.add_argument(
        "--parallel", type=int, default=4, help="seeds evaluated at once (timing stays exclusive)"
    )
    ap.add_argument(
        "--benchmark",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="time the fastest seed again with eager and torch.compile beside it",
    )
    ap.add_argument("--device", default="cuda", help="cpu runs the same path untimed (a dry run)")
    ap.add_argument("--budget", type=float, default=1e9, help="stop starting tasks after S seconds")
    a = ap.parse_args(argv)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    tb = Toolbox(timeout_s=600)
    t0 = time.monotonic()
    for path in a.tasks:
        if time.monotonic() - t0 > a.budget:
            print(f"budget spent: {path} not probed", flush=True)
            continue
        p = Path(path)
        task = TaskSpec(path=str(p), name=p.stem, source=p.read_text(), device=a.device)
        desc = tb.describe(task, shrink=a.device == "cpu")
        print(f"\n## {p.stem}  inputs {[i.shape for i in desc.inputs]}", flush=True)
        replies = seeds(task, desc, a.seeds)
        with ThreadPoolExecutor(max_workers=a.parallel) as ex:
            evals = list(ex.map(tb.evaluate, [task] * len(replies), [r.source for r in replies]))
        for r, ev in zip(replies, evals, strict=True):
            tm = ev.timing
            row = {
                "task": p.stem,
                "algorithm": r.algorithm,
                "accepted": ev.verified,
                "reason": None if ev.verified else why(ev),
                "candidate_ms": tm.candidate_ms if tm else None,
                "eager_ms": tm.eager_ms if tm else None,
                "compile_ms": tm.compile_ms if tm else None,
                "launches": tm.candidate_launches if tm else None,
            }
            with (out / "probe.jsonl").open("a") as f:
                f.write(json.dumps(row) + "\n")
            ratio = (
                f"{tm.compile_ms / tm.candidate_ms:.2f}x compile"
                if tm and tm.candidate_ms and tm.compile_ms
                else (row["reason"] or "not timed")
            )
            print(
                f"  {r.algorithm:38s} {fmt(row['candidate_ms'])} ms  eager {fmt(row['eager_ms'])}  "
                f"compile {fmt(row['compile_ms'])}  {ratio}  {describe(r)}",
                flush=True,
            )
        timed = [
            (ev.timing.candidate_ms, r)
            for r, ev in zip(replies, evals, strict=True)
            if ev.timing and ev.timing.candidate_ms
        ]
        if timed and a.benchmark:
            # the fastest seed through the final protocol: eager and torch.compile in the same job
            best = min(timed, key=lambda x: x[0])[1]
            tm = tb.benchmark(task, best.source)
            row = {
                "task": p.stem,
                "algorithm": best.algorithm,
                "benchmark": True,
                "params": best.params,
                "candidate_ms": tm.candidate_ms,
                "eager_ms": tm.eager_ms,
                "compile_ms": tm.compile_ms,
                # how the median was taken: where it differs from the seed's own timing above
                "wall_ms": tm.wall_ms,
                "timed_by": tm.timed_by,
                "cudagraph_ms": tm.cudagraph_ms,
                "host_cpu_busy": tm.host_cpu_busy,
            }
            with (out / "probe.jsonl").open("a") as f:
                f.write(json.dumps(row) + "\n")
            print(
                f"  benchmark of the fastest: {fmt(tm.candidate_ms)} ms, eager {fmt(tm.eager_ms)} ({ratio_of(tm.eager_ms, tm.candidate_ms)}), "
                f"compile {fmt(tm.compile_ms)} ({ratio_of(tm.compile_ms, tm.candidate_ms)}); judge's clock "
                f"{fmt(tm.wall_ms)} ms, CUDA-graph replay {fmt(tm.cudagraph_ms)} ms, timed by "
                f"{tm.timed_by or 'events'}, host CPUs busy {fmt(tm.host_cpu_busy, '.2f')}",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
