"""The `egg` command line: optimize, check, threads, show, replay, eval.

Exit codes are a contract: 0 success (a verified kernel / an accepted candidate), 1 the run ended
without one (the report says why), 2 bad input (one line, no traceback).
"""

from __future__ import annotations

import json
import os
import sys
import time
import traceback
import uuid
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

app = typer.Typer(
    add_completion=False, no_args_is_help=True, help="EGG: expert-guided PyTorch -> Triton kernel generation."
)
# Piped output (scripts, CI logs) gets wide tables rather than rich's 80-column default, so
# thread and checkpoint ids are never cut.
out_console = Console(width=None if sys.stdout.isatty() else 160)
err_console = Console(stderr=True, width=None if sys.stderr.isatty() else 160)


class BadInput(Exception):
    """Bad command-line input: printed as one line, exit 2."""


def _home(home: str | None) -> Path:
    return Path(home or os.environ.get("EGG_HOME") or ".egg")


def detect_device() -> str:
    """cuda when a CUDA GPU is usable by torch, else cpu; asked of a sandbox worker, as `egg check`
    does (this process never imports torch)."""
    from tools.check_cmd import cuda_available

    return "cuda" if cuda_available() else "cpu"


def _resolve_device(device: str) -> str:
    if device not in ("auto", "cpu", "cuda"):
        raise BadInput(f"--device must be auto, cpu or cuda, not {device!r}")
    return detect_device() if device == "auto" else device


def _settings(**kw: Any):
    from graph.context import Context

    try:
        return Context.resolve(**kw)
    except (ValueError, TypeError) as e:
        raise BadInput(str(e)) from None


def _fail_bad_input(msg: str) -> None:
    err_console.print(f"[bold red]error:[/] {msg}", highlight=False)
    raise typer.Exit(2)


def _open_graph(
    home: Path,
    *,
    llm_mode: str = "live",
    base_url: str | None = None,
    api_key: str | None = None,
    timeout_s: float | None = None,
):
    from graph.main import build_graph, default_deps
    from graph.persistence import open_checkpointer

    saver = open_checkpointer(home)
    deps = default_deps(llm_mode=llm_mode, base_url=base_url, api_key=api_key, timeout_s=timeout_s)
    return build_graph(deps).compile(checkpointer=saver, name="egg"), saver


def _describe_update(ns: tuple[str, ...], node: str, upd: Any) -> str | None:
    """One progress line for a node's update, or None for nodes not worth a line."""
    if not isinstance(upd, dict):
        return None
    where = "/".join([p.split(":")[0] for p in ns] + [node])
    cur = upd.get("current")
    if node == "prepare":
        if upd.get("status") == "bad_input":
            return f"prepare: bad input: {upd.get('failure')}"
        desc = upd.get("desc")
        sizes = desc.sizes_used if desc else {}
        return f"prepare: loaded {upd['task'].name}, {len(desc.op_graph) if desc else 0} ops, sizes {sizes}"
    if node == "code" and cur is not None:
        return f"{where}: wrote {cur.candidate.id} ({cur.candidate.mode}: {cur.candidate.origin})"
    if node in ("compile", "check", "time") and cur is not None:
        if node == "compile":
            c = cur.compile
            return f"{where}: {'ok' if c.ok else 'FAILED ' + str(c.error_kind) + (' line ' + str(c.error_line) if c.error_line else '')}"
        if node == "check":
            c = cur.check
            return f"{where}: {'verified' if c.accepted else 'rejected: ' + '; '.join(c.reasons)[:160]}"
        t = cur.timing
        return (
            f"{where}: {t.candidate_ms:.4f} ms (eager {t.eager_ms:.4f} ms)"
            if t.measured
            else f"{where}: not timed ({t.reason})"
        )
    if node == "boundary" and upd.get("decisions"):
        d = upd["decisions"][-1]
        return f"[bold]{d.stage}[/]: {d.outcome} - {d.changed} ({d.why[:200]})"
    if node == "finalize":
        return f"finalize: {upd.get('status')}"
    return None


def run_graph(compiled, inputs: dict | None, config: dict, context, *, quiet: bool = False) -> dict:
    for ns, chunk in compiled.stream(inputs, config, context=context, stream_mode="updates", subgraphs=True):
        if quiet:
            continue
        for node, upd in chunk.items():
            line = _describe_update(ns, node, upd)
            if line:
                out_console.print(line, highlight=False)
    # The thread's newest state (a replay's config names its starting checkpoint, not the result).
    return compiled.get_state({"configurable": {"thread_id": config["configurable"]["thread_id"]}}).values


def _write_outputs(values: dict, out: Path, thread: str, wall_s: float) -> dict:
    from graph.report import build_report

    out.mkdir(parents=True, exist_ok=True)
    report = build_report(values, thread_id=thread, wall_s=round(wall_s, 2))
    best = values.get("best")
    target = out / "model_new.py"
    if report["verified"] and best is not None:
        target.write_text(best.candidate.source)
    elif target.exists():
        target.unlink()  # never leave an earlier run's kernel beside a report that has none
    (out / "report.json").write_text(json.dumps(report, indent=2, default=str))
    return report


def _print_summary(report: dict, out: Path) -> None:
    table = Table(title=f"EGG result: {report['task']} ({report['device']})", show_header=True)
    for col in ("stage", "outcome", "changed", "speedup in", "speedup out"):
        table.add_column(col)
    fmt = lambda x: f"{x:.2f}x" if isinstance(x, (int, float)) else "-"
    for d in report["stages"]:
        table.add_row(
            d["stage"], d["outcome"], d["changed"][:60], fmt(d["speedup_entry"]), fmt(d["speedup_exit"])
        )
    out_console.print(table)
    if report["verified"]:
        t = report["timing"]
        if t:
            out_console.print(
                f"verified: candidate {t['candidate_ms']:.4f} ms | eager {t['eager_ms']:.4f} ms | "
                f"torch.compile {t['compile_ms'] if t['compile_ms'] is None else format(t['compile_ms'], '.4f')} ms | "
                f"speedup vs eager {fmt(report['speedup_vs_eager'])}, vs compile {fmt(report['speedup_vs_compile'])}",
                highlight=False,
            )
        else:
            out_console.print(
                f"verified on {report['device']}; timing: {report['timing_note']}", highlight=False
            )
        out_console.print(f"kernel: {out / 'model_new.py'}  report: {out / 'report.json'}", highlight=False)
    else:
        out_console.print(f"[bold red]no verified kernel[/]: {report['failure']}", highlight=False)
        out_console.print(f"report: {out / 'report.json'}", highlight=False)


def _exit_code(report: dict) -> int:
    if report["status"] == "bad_input":
        return 2
    return 0 if report["verified"] else 1


def _configure_logs(json_logs: bool, quiet: bool) -> None:
    from graph.logs import configure_logging

    configure_logging(json_logs=json_logs, level="warning" if quiet else "info")


ModelOpt = Annotated[
    str | None, typer.Option("--model", help="model for every role: expert or openai:<model>")
]


@app.command()
def optimize(
    task: Annotated[str, typer.Argument(help="KernelBench-format task file")],
    model: ModelOpt = None,
    code_model: Annotated[str | None, typer.Option(help="model of the code role")] = None,
    profiler_model: Annotated[str | None, typer.Option(help="model of the profiler role")] = None,
    debugger_model: Annotated[str | None, typer.Option(help="model of the debugger role")] = None,
    device: Annotated[str, typer.Option(help="auto, cpu or cuda")] = "auto",
    out: Annotated[
        str | None, typer.Option(help="output directory (default: $EGG_HOME/runs/<thread>)")
    ] = None,
    seeds: Annotated[int | None, typer.Option(help="algorithm seeds explored in parallel")] = None,
    tune_budget: Annotated[int | None, typer.Option(help="attempts per tuning stage on a GPU")] = None,
    tune_width: Annotated[
        int | None, typer.Option(help="tuning variants evaluated in parallel per round (1: one at a time)")
    ] = None,
    thread_id: Annotated[str | None, typer.Option("--thread-id", help="checkpoint thread id")] = None,
    policy: Annotated[str | None, typer.Option(help="strict or mixed")] = None,
    stages: Annotated[str | None, typer.Option(help="comma-separated stages to run")] = None,
    tolerance: Annotated[
        float | None, typer.Option(help="widen the correctness tolerance (reported)")
    ] = None,
    base_url: Annotated[
        str | None, typer.Option(help="OpenAI-compatible base URL (else OPENAI_BASE_URL)")
    ] = None,
    api_key: Annotated[str | None, typer.Option(help="API key (else OPENAI_API_KEY)")] = None,
    run_tokens: Annotated[int | None, typer.Option(help="LLM token budget of the run")] = None,
    run_seconds: Annotated[float | None, typer.Option(help="wall-time budget of the run")] = None,
    job_timeout: Annotated[float | None, typer.Option(help="time limit of one sandbox job, seconds")] = None,
    home: Annotated[str | None, typer.Option(help="run-data directory (else $EGG_HOME, else ./.egg)")] = None,
    json_logs: Annotated[bool, typer.Option("--json-logs", help="log JSON lines to stderr")] = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q")] = False,
) -> None:
    """Optimize one task: write DIR/model_new.py (when verified) and DIR/report.json."""
    _configure_logs(json_logs, quiet)
    try:
        path = Path(task)
        if not path.is_file():
            raise BadInput(f"task file not found: {task}")
        if path.suffix != ".py":
            raise BadInput(f"task must be a .py file in KernelBench format: {task}")
        dev = _resolve_device(device)
        egg_home = _home(home)
        settings = _settings(
            code_model=code_model or model,
            profiler_model=profiler_model or model,
            debugger_model=debugger_model or model,
            device=dev,
            seeds=seeds,
            tune_budget=tune_budget,
            tune_width=tune_width,
            policy=policy,
            stages=stages,
            tolerance=tolerance,
            run_tokens=run_tokens,
            run_seconds=run_seconds,
            job_timeout_s=job_timeout,
            egg_home=str(egg_home),
        )
    except BadInput as e:
        _fail_bad_input(str(e))
    from nodes.lifecycle import task_from_path

    thread = thread_id or f"{path.stem}-{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:4]}"
    out_dir = Path(out) if out else egg_home / "runs" / thread
    spec = task_from_path(str(path.resolve()), device=dev)
    out_console.print(
        f"EGG optimize {spec.name} on {dev} (thread {thread}, models {settings.code_model}/"
        f"{settings.profiler_model}/{settings.debugger_model})",
        highlight=False,
    )
    t0 = time.time()
    try:
        compiled, saver = _open_graph(
            egg_home, base_url=base_url, api_key=api_key, timeout_s=settings.job_timeout_s
        )
    except Exception as e:
        _infra_failure(egg_home, thread, e)
        raise typer.Exit(1) from None
    from graph.persistence import thread_ids

    if thread in thread_ids(saver):
        # Running a new task into an existing thread would merge its checkpointed state (usage,
        # decisions) into this run's result.
        _fail_bad_input(
            f"thread {thread!r} already exists under {egg_home}: pick another --thread-id, "
            f"or re-run it with `egg replay {thread}`"
        )
    try:
        config = {"configurable": {"thread_id": thread}, "recursion_limit": 500}
        values = run_graph(compiled, {"task": spec, "out_dir": str(out_dir)}, config, settings, quiet=quiet)
    except Exception as e:  # an infrastructure fault: one line here, the traceback in the thread's log
        _infra_failure(egg_home, thread, e)
        raise typer.Exit(1) from None
    report = _write_outputs(values, out_dir, thread, time.time() - t0)
    (egg_home / "threads" / thread).mkdir(parents=True, exist_ok=True)
    (egg_home / "threads" / thread / "report.json").write_text(json.dumps(report, indent=2, default=str))
    if report["status"] == "bad_input":
        _fail_bad_input(report["failure"])
    _print_summary(report, out_dir)
    raise typer.Exit(_exit_code(report))


def _infra_failure(home: Path, thread: str, e: BaseException) -> None:
    d = home / "threads" / thread
    d.mkdir(parents=True, exist_ok=True)
    (d / "error.log").write_text("".join(traceback.format_exception(e)))
    err_console.print(
        f"[bold red]error:[/] {type(e).__name__}: {str(e)[:300]} (traceback: {d / 'error.log'})",
        highlight=False,
    )


@app.command()
def check(
    task: Annotated[str, typer.Argument(help="KernelBench-format task file")],
    candidate: Annotated[str, typer.Argument(help="candidate file defining ModelNew")],
    device: Annotated[str, typer.Option(help="auto, cpu or cuda")] = "auto",
    as_json: Annotated[bool, typer.Option("--json", help="print one JSON object")] = False,
    policy: Annotated[str, typer.Option(help="strict or mixed")] = "mixed",
    tolerance: Annotated[float | None, typer.Option(help="widen the tolerance (reported)")] = None,
) -> None:
    """Verify a candidate with the full protocol the graph uses."""
    from tools.check_cmd import check_command

    raise typer.Exit(
        check_command(task, candidate, device=device, as_json=as_json, policy=policy, tolerance=tolerance)
    )


@app.command()
def threads(home: Annotated[str | None, typer.Option(help="run-data directory")] = None) -> None:
    """List checkpointed runs."""
    from graph.persistence import checkpoint_path

    egg_home = _home(home)
    if not checkpoint_path(egg_home).exists():
        out_console.print(f"no runs under {egg_home}")
        return
    compiled, saver = _open_graph(egg_home)
    from graph.persistence import thread_ids

    table = Table(title=f"threads in {egg_home}")
    for col in ("thread", "task", "device", "status", "best speedup", "updated"):
        table.add_column(col)
    for tid in thread_ids(saver):
        snap = compiled.get_state({"configurable": {"thread_id": tid}})
        v = snap.values
        final = v.get("final")
        sp = final.speedup_vs_eager if final is not None else None
        status = v.get("status") or ("interrupted" if snap.next else "?")
        if snap.next:
            status = f"stopped before {','.join(snap.next)}"
        table.add_row(
            tid,
            v["task"].name if v.get("task") else "-",
            (v.get("settings") or {}).get("device", "-"),
            status,
            f"{sp:.2f}x" if sp else "-",
            str(snap.created_at or "-")[:19],
        )
    out_console.print(table)


def _history(compiled, tid: str) -> list:
    return list(compiled.get_state_history({"configurable": {"thread_id": tid}}))


@app.command()
def show(
    thread: Annotated[str, typer.Argument(help="thread id")],
    home: Annotated[str | None, typer.Option(help="run-data directory")] = None,
) -> None:
    """Print a thread's stage decisions and the checkpoint ids to replay from."""
    egg_home = _home(home)
    compiled, _ = _open_graph(egg_home)
    hist = _history(compiled, thread)
    if not hist:
        _fail_bad_input(f"no thread {thread!r} under {egg_home}")
    v = hist[0].values
    out_console.print(
        f"thread {thread}: task {v['task'].name if v.get('task') else '-'}, status {v.get('status')}, "
        f"failure {v.get('failure')}",
        highlight=False,
    )
    t = Table(title="stage decisions")
    for col in ("stage", "outcome", "changed", "why", "speedup out"):
        t.add_column(col)
    for d in v.get("decisions") or []:
        t.add_row(
            d.stage, d.outcome, d.changed, d.why[:120], f"{d.speedup_exit:.2f}x" if d.speedup_exit else "-"
        )
    out_console.print(t)
    c = Table(title="checkpoints (newest first)")
    for col in ("checkpoint id", "step", "next node"):
        c.add_column(col)
    for s in hist:
        c.add_row(
            s.config["configurable"]["checkpoint_id"],
            str(s.metadata.get("step")),
            ",".join(s.next) or "(end)",
        )
    out_console.print(c)


def default_replay_checkpoint(hist: list) -> Any:
    """The start of the stage that failed, else of the last stage that ran."""
    v = hist[0].values
    failed = [d.stage for d in v.get("decisions") or [] if d.outcome == "failed"]
    ran = [d.stage for d in v.get("decisions") or [] if d.outcome != "skipped"]
    target = failed[0] if failed else (ran[-1] if ran else "prepare")
    for s in hist:  # newest first: the latest time the run was about to enter that stage
        if s.next == (target,):
            return s
    raise BadInput(f"no checkpoint before stage {target!r} in this thread")


@app.command()
def replay(
    thread: Annotated[str, typer.Argument(help="thread id")],
    checkpoint: Annotated[
        str | None, typer.Option(help="checkpoint id (default: start of the failed or last stage)")
    ] = None,
    llm: Annotated[
        str, typer.Option(help="live or recorded (serve the thread's recorded LLM replies, no network)")
    ] = "live",
    out: Annotated[str | None, typer.Option(help="output directory")] = None,
    home: Annotated[str | None, typer.Option(help="run-data directory")] = None,
    json_logs: Annotated[bool, typer.Option("--json-logs")] = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q")] = False,
) -> None:
    """Re-run a thread from a checkpoint with the settings it was started with; writes a new result."""
    from graph.context import Context

    _configure_logs(json_logs, quiet)
    egg_home = _home(home)
    if llm not in ("live", "recorded"):
        _fail_bad_input("--llm must be live or recorded")
    compiled, _ = _open_graph(egg_home, llm_mode=llm)
    hist = _history(compiled, thread)
    if not hist:
        _fail_bad_input(f"no thread {thread!r} under {egg_home}")
    try:
        if checkpoint:
            match = [s for s in hist if s.config["configurable"]["checkpoint_id"] == checkpoint]
            if not match:
                raise BadInput(f"no checkpoint {checkpoint!r} in thread {thread!r} (see `egg show {thread}`)")
            start = match[0]
        else:
            start = default_replay_checkpoint(hist)
    except BadInput as e:
        _fail_bad_input(str(e))
    settings = Context.from_dict(start.values.get("settings") or {})
    cid = start.config["configurable"]["checkpoint_id"]
    out_console.print(
        f"replaying {thread} from checkpoint {cid} (before {','.join(start.next)}), llm={llm}",
        highlight=False,
    )
    out_dir = Path(out) if out else egg_home / "threads" / thread / f"replay-{time.strftime('%Y%m%d-%H%M%S')}"
    t0 = time.time()
    try:
        values = run_graph(compiled, None, {**start.config, "recursion_limit": 500}, settings, quiet=quiet)
    except Exception as e:
        _infra_failure(egg_home, thread, e)
        raise typer.Exit(1) from None
    report = _write_outputs(values, out_dir, thread, time.time() - t0)
    report["replayed_from"] = cid
    (out_dir / "report.json").write_text(json.dumps(report, indent=2, default=str))
    _print_summary(report, out_dir)
    raise typer.Exit(_exit_code(report))


@app.command(name="eval")
def eval_(
    paths: Annotated[list[str], typer.Argument(help="task files or directories (recursive)")],
    out: Annotated[str, typer.Option(help="output directory")],
    resume: Annotated[
        bool, typer.Option("--resume", help="skip tasks that already have a final row")
    ] = False,
    device: Annotated[str, typer.Option(help="auto, cpu or cuda")] = "auto",
    workers: Annotated[
        int, typer.Option(help="parallel tasks: in all on CPU, per GPU on CUDA (timing stays exclusive)")
    ] = 1,
    gpus: Annotated[str | None, typer.Option(help="comma-separated GPU ids, one worker each")] = None,
    model: Annotated[str, typer.Option(help="model for every role")] = "expert",
    stages: Annotated[str | None, typer.Option(help="comma-separated stages")] = None,
    policy: Annotated[str, typer.Option(help="strict or mixed")] = "mixed",
    backend: Annotated[str, typer.Option(help="local or ray")] = "local",
    ray_address: Annotated[
        str | None, typer.Option(help="Ray cluster address (default: local instance)")
    ] = None,
    html: Annotated[bool, typer.Option("--html", help="also write report.html")] = False,
    seeds: Annotated[int | None, typer.Option(help="algorithm seeds per task (passed to optimize)")] = None,
    tune_budget: Annotated[
        int | None, typer.Option(help="tuning attempts per stage (passed to optimize)")
    ] = None,
    tune_width: Annotated[
        int | None, typer.Option(help="parallel tuning variants (passed to optimize)")
    ] = None,
) -> None:
    """Run optimize over a suite and write results.jsonl, report.md, metrics.json and plots."""
    from evals.runner import eval_command

    try:
        gpu_ids = [int(g) for g in gpus.split(",")] if gpus else None
    except ValueError:
        _fail_bad_input(f"--gpus must be comma-separated integers, not {gpus!r}")
    raise typer.Exit(
        eval_command(
            paths,
            out=out,
            resume=resume,
            device=device,
            workers=workers,
            gpus=gpu_ids,
            model=model,
            stages=stages.split(",") if stages else None,
            policy=policy,
            backend=backend,
            ray_address=ray_address,
            html=html,
            extra_args=[
                arg
                for flag, value in (
                    ("--seeds", seeds),
                    ("--tune-budget", tune_budget),
                    ("--tune-width", tune_width),
                )
                if value is not None
                for arg in (flag, str(value))
            ]
            or None,
        )
    )


def main() -> None:
    app()


if __name__ == "__main__":
    main()
