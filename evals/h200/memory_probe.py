"""Where one candidate's GPU memory goes: its evaluate job, run alone, and the job's readings.

    python -m evals.h200.memory_probe TASK.py CANDIDATE.py [--size NAME=VALUE ...]

Runs the `evaluate` job (compile, check, time) of CANDIDATE.py on TASK.py on the GPU, as the
toolbox would, and prints the job's `gpu` readings: the shares it was admitted with and the ones
its measured peak asks for, the judge's and the runner's peaks, and the judge's peak per check
step (`judge_gib.inputs`, `judge_gib.reference`, `judge_gib.read_outputs`, `judge_gib.compare`)
with its live bytes while the runner computes (`judge_gib.live_at_call`). The memory admission
(tools/worker/gpumem.py) reserves the sum of the two processes' peaks; these say which copies make
that sum, so a smaller one can be measured rather than guessed.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from tools.protocol import Job
from tools.sandbox import run_job


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m evals.h200.memory_probe", description=__doc__.split("\n")[0])
    ap.add_argument("task", type=Path)
    ap.add_argument("candidate", type=Path)
    ap.add_argument("--size", action="append", default=[], metavar="NAME=VALUE")
    a = ap.parse_args(argv)
    sizes = {}
    for s in a.size:
        name, _, value = s.partition("=")
        sizes[name] = int(value)
    job = Job(
        kind="evaluate",
        task_path=str(a.task),
        task_source=a.task.read_text(),
        device="cuda",
        candidate_source=a.candidate.read_text(),
        size_overrides=sizes,
        options={},
    )
    res = run_job(job, timeout_s=600)
    if not res.ok:
        print(f"memory_probe: the job failed: {res.error}", file=sys.stderr)
        return 1
    payload = res.payload or {}
    check = payload.get("check") or {}
    print(f"{a.task.name}: check accepted={check.get('accepted')} reasons={check.get('reasons')}")
    print(json.dumps(payload.get("gpu") or {}, indent=1, sort_keys=True))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
