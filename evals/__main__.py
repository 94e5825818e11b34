"""Standalone entry: `python -m evals PATH... --out DIR [...]` (same as `egg eval`), and
`python -m evals report DIR [--html]` to rebuild report.md/metrics.json/plots from results.jsonl."""

from __future__ import annotations

import argparse
import shlex
import sys


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["report"]:
        ap = argparse.ArgumentParser(prog="python -m evals report")
        ap.add_argument("out")
        ap.add_argument("--html", action="store_true")
        a = ap.parse_args(argv[1:])
        from evals.report import write_report

        print(write_report(a.out, html=a.html)["report_md"])
        return 0
    ap = argparse.ArgumentParser(prog="python -m evals", description="Run egg optimize over task files.")
    ap.add_argument("paths", nargs="+")
    ap.add_argument("--out", required=True)
    ap.add_argument("--resume", action="store_true")
    ap.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--gpus", help="comma-separated GPU indices, e.g. 0,1")
    ap.add_argument("--model", default="expert")
    ap.add_argument("--stages", help="comma-separated, e.g. algorithm,mapping")
    ap.add_argument("--policy", default="mixed", choices=["strict", "mixed"])
    ap.add_argument("--backend", default="local", choices=["local", "ray"])
    ap.add_argument("--ray-address")
    ap.add_argument("--html", action="store_true")
    ap.add_argument(
        "--shapes",
        default="as-written",
        choices=["as-written", "ragged"],
        help="ragged: int size constants >= 8 changed to smaller non-power-of-two values",
    )
    ap.add_argument("--task-timeout", type=float, default=3600.0, help="seconds per task")
    ap.add_argument("--optimize-cmd", help="override the optimize command (shell-quoted)")
    ap.add_argument("--extra", default="", help="extra args passed to optimize (shell-quoted)")
    a = ap.parse_args(argv)
    from evals.runner import eval_command

    return eval_command(
        a.paths,
        out=a.out,
        resume=a.resume,
        device=a.device,
        workers=a.workers,
        gpus=[int(g) for g in a.gpus.split(",")] if a.gpus else None,
        model=a.model,
        stages=a.stages.split(",") if a.stages else None,
        policy=a.policy,
        backend=a.backend,
        ray_address=a.ray_address,
        html=a.html,
        extra_args=shlex.split(a.extra),
        optimize_cmd=shlex.split(a.optimize_cmd) if a.optimize_cmd else None,
        task_timeout_s=a.task_timeout,
        shapes=a.shapes,
    )


if __name__ == "__main__":
    sys.exit(main())
