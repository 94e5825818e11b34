"""Where a launched forward's host time goes: a candidate against its own CUDA-graph replay, its
host profile, and the cost of one Triton launch by the JIT path, by the compiled kernel's own
launcher and of one PyTorch op.

    python -m evals.h200.host_probe [TASK.py KERNEL.py|PARAMS.json ...] [--calls 300] [--load 0,16] [--out DIR]

For each (task, kernel file) pair: ModelNew (its `forward_eager` when the file replays a CUDA
graph) on the task's inputs, per call: the launched forward (CUDA events around each call,
synchronised), the same forward captured once and replayed, and the wall-clock time of issuing
the calls back to back (the host's rate; the GPU runs behind). Then cProfile's heaviest
functions over those calls. Without pairs only the launch micro-benchmark runs: a one-block
elementwise kernel issued many times through `kernel[grid](...)` (JITFunction.run: binding,
cache key, launch metadata), through the CompiledKernel the first launch returned
(`compiled[grid](...)`: the C launcher alone) and `torch.add(out=)`, each as microseconds of host
time per launch.

A PARAMS.json in place of a kernel file holds an expert candidate's parameters (a report.json's
`params`): the kernel is generated from them for the task at its own sizes (written to --out).
`--load 0,16` times each forward once per count of busy CPU processes running beside it (pure
Python loops, one a process), with the timing's own priority (tools/worker/timing.py
timing_priority): whether a launched forward's median follows the host's load.

Why the load: three of the suite's tasks (cx11, cx14, cx26; H100, 2026-12-08) had final
benchmarks 1.2-2.1x their stage's figure for the same kernel, whose CUDA-graph replay had not
moved; the final benchmarks ran while other tasks compiled their torch.compile baselines.

Why: the suite's squeeze-excite (cx19) took 0.267 ms launched against 0.0975 ms replayed (H200,
2026-12-06), its GRU cell (cx10) 2.17 ms against 1.06 ms, about 30 us of host time per kernel
group. Whether that is Triton's launch path or the generated forward's own Python decides the
fix (a cheaper launch for every candidate, or leaner forwards).
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import io
import json
import os
import pstats
import statistics
import sys
import time
from pathlib import Path
from typing import Any


def _per_launch_us(launch, n: int) -> float:
    """Host microseconds per launch: `n` launches issued back to back, the median of 5 rounds
    (the kernels are one block each, so the GPU keeps up and the host sets the pace)."""
    import torch

    rounds = []
    for _ in range(5):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(n):
            launch()
        t1 = time.perf_counter()
        torch.cuda.synchronize()
        rounds.append((t1 - t0) / n * 1e6)
    return statistics.median(rounds)


def launch_costs(n: int = 2000) -> dict[str, float]:
    import torch
    import triton
    import triton.language as tl

    @triton.jit
    def add(x_ptr, y_ptr, out_ptr, n_el, scale, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n_el
        x = tl.load(x_ptr + offs, mask=mask)
        y = tl.load(y_ptr + offs, mask=mask)
        tl.store(out_ptr + offs, x * scale + y, mask=mask)

    x, y, out = (torch.randn(1024, device="cuda") for _ in range(3))
    compiled = add[(1,)](x, y, out, 1024, 2.0, BLOCK=1024)
    torch.cuda.synchronize()
    # the compiled launcher takes every argument in order, constexprs included (it skips them)
    launcher = compiled[(1, 1, 1)]
    assert torch.allclose(out, x * 2.0 + y)
    return {
        "triton_jit_us": _per_launch_us(lambda: add[(1,)](x, y, out, 1024, 2.0, BLOCK=1024), n),
        "triton_compiled_us": _per_launch_us(lambda: launcher(x, y, out, 1024, 2.0, 1024), n),
        "torch_add_us": _per_launch_us(lambda: torch.add(x, y, alpha=2.0, out=out), n),
        "torch_empty_us": _per_launch_us(lambda: torch.empty(1024, device="cuda"), n),
    }


def kernel_from_params(task_path: str, params_path: str, out_dir: str | None) -> str:
    """The expert's kernel file for `params` (a candidate's parameters, e.g. a report.json's
    `params`) on the task at its own sizes, on the GPU's description; returns its path."""
    import torch

    from graph.records import TaskSpec
    from nodes.expert.code import plan_for
    from tools.toolbox import Toolbox

    src = Path(task_path).read_text()
    params = json.loads(Path(params_path).read_text())
    device = "cuda" if torch.cuda.is_available() else "cpu"
    spec = TaskSpec(path=task_path, name=Path(task_path).stem, source=src, device=device)
    desc = Toolbox().describe(spec, shrink=False)
    source = str(plan_for(desc).generate(desc, params))
    dest = Path(out_dir or ".", f"{Path(task_path).stem}.model_new.py")
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_text(source)
    return str(dest)


def _spin(stop) -> None:
    """A busy CPU process (the probe's --load): pure Python arithmetic until told to stop."""
    x = 0
    while not stop.is_set():
        for i in range(10000):
            x = (x * 31 + i) % 1000003


@contextlib.contextmanager
def cpu_load(n: int):
    """`n` busy processes for the duration of the block (0: none)."""
    import multiprocessing as mp

    ctx = mp.get_context("spawn")
    stop = ctx.Event()
    procs = [ctx.Process(target=_spin, args=(stop,), daemon=True) for _ in range(n)]
    for p in procs:
        p.start()
    try:
        time.sleep(0.5 if n else 0.0)  # let them reach their loops
        yield procs
    finally:
        stop.set()
        for p in procs:
            p.join(5)
            if p.is_alive():
                p.kill()


def forward_costs(task_path: str, kernel_path: str, calls: int, profile: bool = True) -> dict[str, Any]:
    import torch

    from tools.worker.common import load_module, load_task

    task = load_task(Path(task_path).read_text(), {})
    kern = load_module(Path(kernel_path).read_text(), "probe_kernel")
    torch.manual_seed(0)
    model = kern.ModelNew(*task.init_args()).cuda().eval()
    inputs = task.inputs(0, "cuda")
    fwd = getattr(model, "forward_eager", model.forward)
    with torch.no_grad():
        for _ in range(10):
            fwd(*inputs)
        torch.cuda.synchronize()
        events = []
        for _ in range(calls):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            fwd(*inputs)
            b.record()
            events.append((a, b))
        torch.cuda.synchronize()
        launched = statistics.median(a.elapsed_time(b) for a, b in events)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(calls):
            fwd(*inputs)
        issue_ms = (time.perf_counter() - t0) / calls * 1e3
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            fwd(*inputs)
        torch.cuda.current_stream().wait_stream(stream)
        with torch.cuda.graph(graph):
            fwd(*inputs)
        torch.cuda.synchronize()
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        for _ in range(calls):
            graph.replay()
        b.record()
        torch.cuda.synchronize()
        replay = a.elapsed_time(b) / calls
        text = io.StringIO()
        if profile:
            prof = cProfile.Profile()
            prof.enable()
            for _ in range(calls):
                fwd(*inputs)
            prof.disable()
            torch.cuda.synchronize()
            pstats.Stats(prof, stream=text).sort_stats("tottime").print_stats(25)
    return {
        "task": task_path,
        "kernel": kernel_path,
        "launched_ms": launched,
        "host_issue_ms": issue_ms,
        "replay_ms": replay,
        "profile": text.getvalue(),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("pairs", nargs="*", help="TASK.py KERNEL.py (or PARAMS.json), repeated")
    ap.add_argument("--calls", type=int, default=300)
    ap.add_argument("--load", default="0", help="comma-separated counts of busy CPU processes")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    if len(args.pairs) % 2:
        ap.error("give task and kernel files in pairs")
    try:
        loads = [int(x) for x in args.load.split(",") if x.strip()]
    except ValueError:
        ap.error(f"--load takes comma-separated integers, not {args.load!r}")
    if not loads or min(loads) < 0:
        ap.error("--load needs counts >= 0")
    import torch
    import triton

    head = {
        "gpu": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "triton": triton.__version__,
        "python": sys.version.split()[0],
        "cpu": os.cpu_count(),
    }
    print(json.dumps(head))
    rows: list[dict[str, Any]] = [{"launch": launch_costs()}]
    print(json.dumps(rows[0]))
    from tools.worker.timing import timing_priority

    for task_path, kernel_path in zip(args.pairs[::2], args.pairs[1::2], strict=True):
        if kernel_path.endswith(".json"):
            kernel_path = kernel_from_params(task_path, kernel_path, args.out)
        for i, n in enumerate(loads):
            prio: dict[str, Any] = {}
            with cpu_load(n), timing_priority([os.getpid()], prio):
                row = forward_costs(task_path, kernel_path, args.calls, profile=i == 0)
            row.update(
                cpu_load=n, priority=prio.get("host_priority"), host_cpu_busy=prio.get("host_cpu_busy")
            )
            rows.append(row)
            print(
                f"{Path(task_path).stem} (busy processes {n}, {row['priority']}): launched "
                f"{row['launched_ms']:.4f} ms, host issue {row['host_issue_ms']:.4f} ms, replay "
                f"{row['replay_ms']:.4f} ms a call"
            )
            if row["profile"]:
                print(row["profile"])
    if args.out:
        Path(args.out).mkdir(parents=True, exist_ok=True)
        Path(args.out, "host_probe.json").write_text(json.dumps({**head, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
