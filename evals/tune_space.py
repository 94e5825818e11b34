"""How many variants the expert's tuning stages can offer for a task: for the first seed of each
task, the mapping, tiling and memory variants it proposes until its space is exhausted, and how
many of them the default budget runs. CPU only, nothing is compiled or run (each task is
described once in the sandbox, as `egg` does on a GPU, then the expert is asked for variants).

    python -m evals.tune_space TASK.py [TASK.py ...] [--budget 6] [--full]

Issue 12 ("fewer, better candidates"): what a change to a family's tuning space does to the
number of jobs a suite runs, before any GPU time is spent on it.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from graph.context import Context
from graph.records import BestKernel, CheckReport, TaskSpec
from nodes.expert import ExpertCode
from nodes.models import CodeRequest, StageBrief

TUNE_STAGES = ("mapping", "tiling", "memory")


def _brief(name: str) -> StageBrief:
    return StageBrief(name=name, objective="count the variants", may_change=[], must_keep=[])


def variants(task: TaskSpec, desc, limit: int = 64) -> tuple[str, dict[str, int]]:
    """(the first seed's algorithm, variants per tuning stage around it) for a GPU description."""
    code = ExpertCode()
    seed = code.write(
        CodeRequest(mode="seed", stage=_brief("algorithm"), task=task, desc=desc, seed_index=0, n_seeds=1)
    )
    if seed.source is None:
        return f"no seed ({seed.note})", {}
    best = BestKernel(candidate=seed.candidate("seed0", "algorithm"), check=CheckReport(accepted=True))
    counts: dict[str, int] = {}
    for name in TUNE_STAGES:
        n = 0
        while n < limit:
            r = code.write(
                CodeRequest(
                    mode="tune",
                    stage=_brief(name),
                    task=task,
                    desc=desc,
                    best=best,
                    seed_index=n,
                    n_seeds=limit,
                )
            )
            if r.source is None:
                break
            n += 1
        counts[name] = n
    return str(seed.algorithm), counts


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("tasks", nargs="+")
    ap.add_argument("--budget", type=int, default=Context().tune_budget, help="attempts per tuning stage")
    ap.add_argument(
        "--full",
        action="store_true",
        help="describe at the task's own sizes, as a GPU run does (spaces that depend on a row's "
        "length or width count as there); default: the CPU's shrunk sizes, quicker",
    )
    a = ap.parse_args(argv)
    from tools.toolbox import Toolbox

    tb = Toolbox()
    total = run = 0
    for path in a.tasks:
        p = Path(path)
        task = TaskSpec(path=str(p), name=p.stem, source=p.read_text(), device="cpu")
        # the CPU's shrunk sizes or the task's own (--full), the choices of a GPU run (the
        # device decides spaces)
        desc = tb.describe(task, shrink=not a.full).model_copy(update={"device": "cuda"})
        algo, counts = variants(task, desc)
        n, m = sum(counts.values()), sum(min(v, a.budget) for v in counts.values())
        total, run = total + n, run + m
        stages = " ".join(f"{k} {v}" for k, v in counts.items())
        print(f"{p.stem:40s} {algo:32s} {stages}  ({m} within the budget)", flush=True)
    print(f"total: {total} variants offered, {run} within a budget of {a.budget} per stage")
    return 0


if __name__ == "__main__":
    sys.exit(main())
