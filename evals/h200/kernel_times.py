"""Where a task's GPU time goes, kernel by kernel: eager, torch.compile and the expert's first seeds
side by side, from the PyTorch profiler (CUDA kernel time per call).

    python -m evals.h200.kernel_times TASK.py [TASK.py ...] --out DIR [--seeds 3] [--pick 0,2] [--train]

For each task the expert writes its first seeds (as `evals.h200.probe` does); each seed file is
written under DIR and profiled in a child process of its own (generated code never runs in this
one), with the reference's weights. A table per variant lists the kernels taking the most time
per forward. It says where to look; verdicts and timings that count come from the toolbox's
evaluate job (probe.py, egg optimize), not from here.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

CALLS = 20


def profile_one(
    task_path: str, cand_path: str | None, mode: str, train: bool = False
) -> tuple[list[tuple[str, float, int]], float]:
    """(kernel name, ms per forward, launches per forward), largest first, and the median of CUDA
    events around single forwards (ms; host cost included, no L2 flush): run in a child. The
    models are in eval mode, as the toolbox's check and timing run them, unless `train`."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    from evals.h200.convlayout import load
    from tools.worker.runner import copy_weights

    task = load(task_path)
    torch.manual_seed(0)
    ref = task.Model(*task.get_init_inputs()).cuda()
    xs = [t.cuda() if isinstance(t, torch.Tensor) else t for t in task.get_inputs()]
    if mode == "candidate":
        cand_mod = load(cand_path)
        model = cand_mod.ModelNew(*task.get_init_inputs()).cuda()
        copy_weights(ref, model)
    elif mode == "compile":
        model = torch.compile(ref)
    else:
        model = ref
    if not train:
        ref.eval()
        if mode == "candidate":
            model.eval()
    with torch.no_grad():
        for _ in range(3):
            model(*xs)
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(CALLS):
                model(*xs)
            torch.cuda.synchronize()
    rows = []
    for ev in prof.key_averages():
        t = getattr(ev, "device_time_total", None) or getattr(ev, "cuda_time_total", 0)
        if t and ev.count:
            rows.append((ev.key, t / 1000.0 / CALLS, max(1, ev.count // CALLS)))
    rows.sort(key=lambda r: -r[1])
    with torch.no_grad():
        times = []
        for _ in range(CALLS):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            model(*xs)
            b.record()
            b.synchronize()
            times.append(a.elapsed_time(b))
    return rows, sorted(times)[len(times) // 2]


def show(label: str, rows: list[tuple[str, float, int]], events_ms: float, top: int = 10) -> None:
    total = sum(r[1] for r in rows)
    print(
        f"  {label}: {total:.3f} ms of kernels per forward, {sum(r[2] for r in rows)} launches, "
        f"events median {events_ms:.3f} ms"
    )
    for name, ms, n in rows[:top]:
        print(f"    {ms:8.3f} ms  x{n:<3d} {name[:110]}")


def child(task_path: str, cand: str | None, mode: str, train: bool = False) -> list | str:
    cmd = [sys.executable, "-m", "evals.h200.kernel_times", "--child", mode, task_path, cand or "-"]
    cmd += ["--train"] if train else []
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    if p.returncode != 0:
        lines = (p.stderr or p.stdout).strip().splitlines()
        return lines[-1] if lines else f"failed (exit {p.returncode})"
    return json.loads(p.stdout.strip().splitlines()[-1])


def report(label: str, rows: list | str) -> None:
    """A child's kernel table, or the line it failed with."""
    if isinstance(rows, list):
        show(label, [tuple(r) for r in rows[0]], rows[1])
    else:
        print(f"  {label}: {rows}")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "--child":
        mode, task_path, cand = argv[1], argv[2], argv[3]
        train = "--train" in argv[4:]
        print(json.dumps(profile_one(task_path, None if cand == "-" else cand, mode, train)))
        return 0
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("tasks", nargs="+")
    ap.add_argument("--out", required=True)
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument(
        "--baselines",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="profile eager and torch.compile too",
    )
    ap.add_argument(
        "--train",
        action="store_true",
        help="models in training mode (default: eval mode, as the check and the timing run them)",
    )
    ap.add_argument(
        "--pick", default="", help="comma-separated seed indices to profile (default: every seed)"
    )
    a = ap.parse_args(argv)
    from evals.h200.probe import describe, seeds
    from graph.records import TaskSpec
    from tools.toolbox import Toolbox

    tb = Toolbox(timeout_s=600)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    for path in a.tasks:
        p = Path(path)
        task = TaskSpec(path=str(p), name=p.stem, source=p.read_text(), device="cuda")
        desc = tb.describe(task, shrink=False)
        print(f"\n## {p.stem}", flush=True)
        for mode in ("eager", "compile") if a.baselines else ():
            rows = child(str(p), None, mode, a.train)
            report(mode, rows)
        pick = {int(i) for i in a.pick.split(",") if i.strip()}
        for i, r in enumerate(seeds(task, desc, a.seeds)):
            if pick and i not in pick:
                continue
            f = out / f"{p.stem}.seed{i}.py"
            f.write_text(r.source)
            rows = child(str(p), str(f), "candidate", a.train)
            label = f"seed {i} {r.algorithm} {describe(r)}"
            report(label, rows)
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
