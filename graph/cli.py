"""The `egg` command line: optimize, check, threads, show, resume, replay, eval.

Exit codes are a contract: 0 success (a verified kernel / an accepted candidate), 1 the run ended
without one (the report says why), 2 bad input (one line, no traceback).

Every message is printed literally: the consoles interpret no markup, so text such as
`[rand_like]` or `[verified]` in a reason reaches the terminal as written.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import threading
import time
import traceback
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

app = typer.Typer(no_args_is_help=True, help="EGG: expert-guided PyTorch -> Triton kernel generation.")
# Piped output (scripts, CI logs) gets wide tables rather than rich's 80-column default, so
# thread and checkpoint ids are never cut. No markup, no highlighting: messages print as written.
_CONSOLE_KW: dict[str, Any] = {"markup": False, "highlight": False, "emoji": False}
out_console = Console(width=None if sys.stdout.isatty() else 160, **_CONSOLE_KW)
err_console = Console(stderr=True, width=None if sys.stderr.isatty() else 160, **_CONSOLE_KW)


class BadInput(Exception):
    """Bad command-line input: printed as one line, exit 2."""


def _version() -> str:
    from importlib import metadata

    try:
        return metadata.version("egg-kernels")
    except metadata.PackageNotFoundError:  # run from a checkout that was never installed
        return "unknown"


def _print_version(value: bool) -> None:
    if value:
        out_console.print(f"egg {_version()}")
        raise typer.Exit(0)


@app.callback()
def _main(
    version: Annotated[
        bool,
        typer.Option("--version", callback=_print_version, is_eager=True, help="print the version and exit"),
    ] = False,
) -> None:
    """EGG: expert-guided PyTorch -> Triton kernel generation."""
    # Every command logs to stderr only (stdout carries results, e.g. `egg check --json`);
    # commands that run the graph raise the level to info.
    _configure_logs(json_logs=False, quiet=True)


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


def _error_line(msg: str) -> Text:
    line = Text("error: ", style="bold red")
    line.append(msg)
    return line


def _fail_bad_input(msg: str) -> NoReturn:
    err_console.print(_error_line(msg), soft_wrap=True)  # one line, however long: scripts read it
    raise typer.Exit(2)


def _open_graph(
    home: Path,
    *,
    checkpoint_url: str | None = None,
    llm_mode: str = "live",
    base_url: str | None = None,
    api_key: str | None = None,
    timeout_s: float | None = None,
):
    from graph.main import build_graph, default_deps
    from graph.persistence import open_checkpointer

    saver = open_checkpointer(home, checkpoint_url)
    deps = default_deps(llm_mode=llm_mode, base_url=base_url, api_key=api_key, timeout_s=timeout_s)
    return build_graph(deps).compile(checkpointer=saver, name="egg"), saver


def _open_store(home: Path, checkpoint_url: str | None):
    """The compiled graph over the store, or a one-line exit 2 when the store cannot be opened."""
    from graph.persistence import redact, store_url

    try:
        return _open_graph(home, checkpoint_url=checkpoint_url)
    except Exception as e:
        _fail_bad_input(
            f"cannot open the checkpoint store {redact(store_url(home, checkpoint_url))}: "
            f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
        )


def _describe_update(ns: tuple[str, ...], node: str, upd: Any) -> str | None:
    """One progress line for a node's update, or None for nodes not worth a line."""
    if not isinstance(upd, dict):
        return None
    where = "/".join([p.split(":")[0] for p in ns] + [node])
    cur = upd.get("current")
    if node == "prepare":
        if upd.get("status") == "bad_input":
            return None  # the command says it once, on stderr
        desc = upd.get("desc")
        sizes = desc.sizes_used if desc else {}
        aten = " (captured at the ATen level)" if desc and desc.capture_path == "aten" else ""
        shapes = f" ({desc.shapes})" if desc and desc.shapes != "as-written" else ""
        note = f"; {desc.shapes_note}" if desc and desc.shapes_note else ""
        return (
            f"prepare: loaded {upd['task'].name}, {len(desc.op_graph) if desc else 0} ops{aten}, "
            f"sizes {sizes}{shapes}{note}"
        )
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
    if node == "evaluate" and cur is not None:  # a GPU's one job: compile, check, time
        c, k, t = cur.compile, cur.check, cur.timing
        if not c.ok:
            return f"{where}: compile FAILED {c.error_kind}" + (
                f" line {c.error_line}" if c.error_line else ""
            )
        if k is None or not k.accepted:
            return f"{where}: compiled; rejected: {'; '.join(k.reasons if k else ['not checked'])[:160]}"
        if t is not None and t.measured:
            return f"{where}: verified, {t.candidate_ms:.4f} ms (eager {t.eager_ms:.4f} ms)"
        return f"{where}: verified, not timed ({t.reason if t else 'no timing'})"
    if node == "boundary" and upd.get("decisions"):
        d = upd["decisions"][-1]
        return f"{d.stage}: {d.outcome} - {d.changed} ({d.why[:200]})"
    if node == "finalize" and upd.get("status") != "bad_input":
        return f"finalize: {upd.get('status')}"
    return None


def run_graph(
    compiled, inputs: dict | None, config: dict, context, *, quiet: bool = False, header: str | None = None
) -> dict:
    """Stream a run (or its continuation, with inputs None) and print a line per step.

    `header` is printed before the first progress line, so a task rejected by `prepare` prints
    nothing here. Checkpoints are written before each next step starts (durability "sync"): a
    killed run resumes from the last step it finished.
    """
    pending_header = header
    # "tasks" mode: each finished node with everything it wrote ("updates" mode would show only
    # the channels of a stage's output schema, none of its private steps).
    for ns, event in compiled.stream(
        inputs, config, context=context, stream_mode="tasks", subgraphs=True, durability="sync"
    ):
        if quiet or "result" not in event or event.get("error"):
            continue
        result = event["result"]
        line = _describe_update(ns, event["name"], result if isinstance(result, dict) else dict(result or []))
        if line:
            if pending_header:
                out_console.print(pending_header)
                pending_header = None
            out_console.print(line)
    # The thread's newest state (a replay's config names its starting checkpoint, not the result).
    return compiled.get_state({"configurable": {"thread_id": config["configurable"]["thread_id"]}}).values


def _run_config(thread: str, **extra: Any) -> dict[str, Any]:
    from graph.persistence import OWNER_KEY, current_owner

    return {
        "configurable": {"thread_id": thread, OWNER_KEY: current_owner(), **extra},
        "recursion_limit": 500,
    }


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
                f"speedup vs eager {fmt(report['speedup_vs_eager'])}, vs compile {fmt(report['speedup_vs_compile'])}, "
                f"vs the faster of the two {fmt(report.get('speedup_vs_best'))}"
            )
        else:
            out_console.print(f"verified on {report['device']}; timing: {report['timing_note']}")
        out_console.print(f"kernel: {out / 'model_new.py'}  report: {out / 'report.json'}")
    else:
        line = Text("no verified kernel", style="bold red")
        line.append(f": {report['failure']}")
        out_console.print(line)
        out_console.print(f"report: {out / 'report.json'}")


def _exit_code(report: dict) -> int:
    if report["status"] == "bad_input":
        return 2
    return 0 if report["verified"] else 1


def _configure_logs(json_logs: bool, quiet: bool) -> None:
    from graph.logs import configure_logging

    configure_logging(json_logs=json_logs, level="warning" if quiet else "info")


def _finish_run(
    values: dict, out_dir: Path, egg_home: Path, thread: str, wall_s: float, **extra: Any
) -> NoReturn:
    """Write the run's outputs, say what came of it, exit with the contract's code."""
    report = _write_outputs(values, out_dir, thread, wall_s)
    if extra:
        report.update(extra)
        (out_dir / "report.json").write_text(json.dumps(report, indent=2, default=str))
    (egg_home / "threads" / thread).mkdir(parents=True, exist_ok=True)
    (egg_home / "threads" / thread / "report.json").write_text(json.dumps(report, indent=2, default=str))
    if report["status"] == "bad_input":
        _fail_bad_input(report["failure"])
    _print_summary(report, out_dir)
    raise typer.Exit(_exit_code(report))


ModelOpt = Annotated[
    str | None, typer.Option("--model", help="model for every role: expert or openai:<model>")
]
HomeOpt = Annotated[str | None, typer.Option(help="run-data directory (else $EGG_HOME, else ./.egg)")]
StoreOpt = Annotated[
    str | None,
    typer.Option(
        "--checkpoint-url",
        envvar="EGG_CHECKPOINT_URL",
        show_envvar=True,
        help="checkpoint store: postgresql://USER@HOST/DB, or sqlite:///PATH (default: "
        "$EGG_HOME/checkpoints.sqlite)",
    ),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="print JSON instead of a table")]


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
    home: HomeOpt = None,
    checkpoint_url: StoreOpt = None,
    size: Annotated[
        list[str] | None,
        typer.Option(
            "--size",
            metavar="NAME=VALUE",
            help="run the task with a module-level int size constant set to VALUE (repeatable, "
            "e.g. --size batch_size=24 --size dim=1000); on CPU the shrinking starts from these",
        ),
    ] = None,
    shapes: Annotated[
        str,
        typer.Option(
            help="as-written, or ragged: int size constants >= 8 changed to smaller non-power-of-two "
            "values (the checker's second-shape rule; the first set the task runs with, else as written)"
        ),
    ] = "as-written",
    json_logs: Annotated[bool, typer.Option("--json-logs", help="log JSON lines to stderr")] = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q")] = False,
) -> None:
    """Optimize one task: write DIR/model_new.py (when verified) and DIR/report.json."""
    from nodes.lifecycle import one_line, task_from_path
    from tools.errors import BadTaskError

    _configure_logs(json_logs, quiet)
    path = Path(task)
    egg_home = _home(home)
    thread = thread_id or f"{path.stem}-{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:4]}"
    out_dir = Path(out) if out else egg_home / "runs" / thread
    try:
        # The task file first: a file that cannot be a task is bad input whatever the options say,
        # and gets a report (an eval's row quotes its reason).
        try:
            if path.exists() and path.suffix != ".py":
                raise BadTaskError(f"task must be a .py file in KernelBench format: {task}")
            spec = task_from_path(str(path.resolve()))
        except BadTaskError as e:
            _write_outputs(
                {"status": "bad_input", "failure": one_line(str(e)), "task_path": task}, out_dir, thread, 0.0
            )
            raise BadInput(one_line(str(e))) from None
        spec = spec.model_copy(
            update={"size_overrides": _size_overrides(size or [], spec.source), "shapes": _shapes(shapes)}
        )
        dev = _resolve_device(device)
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
    spec = spec.model_copy(update={"device": dev})
    header = (
        f"EGG optimize {spec.name} on {dev} (thread {thread}, models {settings.code_model}/"
        f"{settings.profiler_model}/{settings.debugger_model})"
    )
    t0 = time.time()
    try:
        compiled, saver = _open_graph(
            egg_home,
            checkpoint_url=checkpoint_url,
            base_url=base_url,
            api_key=api_key,
            timeout_s=settings.job_timeout_s,
        )
    except Exception as e:
        _infra_failure(egg_home, thread, e)
        raise typer.Exit(1) from None
    from graph.persistence import thread_exists

    if thread_exists(saver, thread):
        # Running a new task into an existing thread would merge its checkpointed state (usage,
        # decisions) into this run's result.
        _fail_bad_input(
            f"thread {thread!r} already exists in the checkpoint store: pick another --thread-id, "
            f"continue it with `egg resume {thread}`, or re-run it with `egg replay {thread}`"
        )

    # Taken by whichever of the run's own end and a wrap-up comes first; that one writes the
    # outputs (one per call: an embedding caller may run several in one process).
    end = threading.Lock()

    def _wrap_up() -> None:
        # Asked to stop now (an eval's time box ended): the best kernel verified so far, with the
        # timing of the stage that chose it, rather than nothing.
        if not end.acquire(blocking=False):
            return  # the run is ending on its own and writes its outputs
        try:
            values = wrap_up_values(compiled.get_state(_run_config(thread)).values)
        except Exception as e:
            _infra_failure(egg_home, thread, e)
            sys.stderr.flush()
            os._exit(1)
        _write_wrap_up(values, out_dir, egg_home, thread, time.time() - t0)

    try:
        with _wrap_up_on_sigterm(_wrap_up):
            values = run_graph(
                compiled,
                {"task": spec, "out_dir": str(out_dir.resolve())},
                _run_config(thread),
                settings,
                quiet=quiet,
                header=header,
            )
    except Exception as e:  # an infrastructure fault: one line here, the traceback in the thread's log
        end.acquire()
        _infra_failure(egg_home, thread, e)
        raise typer.Exit(1) from None
    end.acquire()  # held from here on: a wrap-up started now leaves the outputs to this
    _finish_run(values, out_dir, egg_home, thread, time.time() - t0)


@contextlib.contextmanager
def _wrap_up_on_sigterm(wrap_up: Callable[[], None]) -> Iterator[None]:
    """SIGTERM during the run starts `wrap_up` on a thread of its own. The handler must not raise
    into the main thread: LangGraph's executor would wait there for every node in flight (a GPU
    job can take minutes) before the exception got anywhere. The graph goes on meanwhile; the
    wrap-up writes the outputs and ends the process."""

    def _start(signum: int, frame: Any) -> None:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)  # a second SIGTERM ends the process
        threading.Thread(target=wrap_up, name="egg-wrap-up", daemon=True).start()

    if threading.current_thread() is not threading.main_thread():
        yield  # signal handlers belong to the main thread (an embedding caller keeps its own)
        return
    old = signal.signal(signal.SIGTERM, _start)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old)


WRAP_UP_HALT = "stopped before the final benchmark (SIGTERM: an eval's time box ended)"


def wrap_up_values(values: dict) -> dict:
    """The state of a run stopped mid-way, as a result: verified when its best kernel passed the
    full check and, on a GPU, its stage measured it (that timing, eager beside it, stands in for
    the final benchmark, which did not run and says so); otherwise no kernel."""
    out = dict(values)
    best = values.get("best")
    task = values.get("task")
    timing = best.timing if best is not None else None
    measured = timing is not None and timing.measured
    on_gpu = task is not None and task.device == "cuda"
    if (
        values.get("status") != "bad_input"
        and best is not None
        and best.check.accepted
        and (measured or not on_gpu)
    ):
        upd: dict[str, Any] = {
            "status": "verified",
            "final_profile": best.profile,
            "halt": WRAP_UP_HALT,
            "failure": None,
        }
        if timing is not None:
            by = f"stage ({timing.timed_by or 'events'}); {WRAP_UP_HALT}"
            upd["final"] = timing.model_copy(update={"timed_by": by}) if measured else timing
        out.update(upd)
    else:
        out.update(status="no_kernel", halt=WRAP_UP_HALT, failure=values.get("failure") or WRAP_UP_HALT)
    return out


def _write_wrap_up(values: dict, out_dir: Path, egg_home: Path, thread: str, wall_s: float) -> NoReturn:
    """Write the outputs and leave at once: the graph's worker threads may still be inside jobs
    that the caller is about to kill, and waiting for them is what the signal asked not to do."""
    try:
        _finish_run(values, out_dir, egg_home, thread, wall_s)
    except typer.Exit as e:
        code = e.exit_code
    else:  # pragma: no cover - _finish_run always exits
        code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def _size_overrides(args: list[str], source: str) -> dict[str, int]:
    """`--size NAME=VALUE` arguments, checked against the task's text (nothing of it runs here)."""
    from tools.sizes import parse_size_args

    try:
        return parse_size_args(args, source)
    except ValueError as e:
        raise BadInput(str(e)) from None


def _shapes(shapes: str) -> Any:
    from tools.sizes import SHAPES_MODES

    if shapes not in SHAPES_MODES:
        raise BadInput(f"--shapes must be {' or '.join(SHAPES_MODES)}, not {shapes!r}")
    return shapes


def _infra_failure(home: Path, thread: str, e: BaseException) -> None:
    d = home / "threads" / thread
    d.mkdir(parents=True, exist_ok=True)
    (d / "error.log").write_text("".join(traceback.format_exception(e)))
    err_console.print(
        _error_line(f"{type(e).__name__}: {str(e)[:300]} (traceback: {d / 'error.log'})"), soft_wrap=True
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


def _lease_s(settings: dict[str, Any]) -> float:
    """How long a run on another host may write no checkpoint before it is taken as gone: a step
    can hold one sandbox job (up to its time limit) between two checkpoints."""
    return max(600.0, 3 * float(settings.get("job_timeout_s") or 300.0))


def _thread_status(saver, snap) -> str:
    """verified / no_kernel / bad_input for a finished run; running or interrupted otherwise."""
    from graph.persistence import last_activity, liveness

    v = snap.values
    if not snap.next:
        return v.get("status") or "unknown"
    tid = snap.config["configurable"]["thread_id"]
    return liveness(last_activity(saver, tid), _lease_s(v.get("settings") or {}))


def _thread_row(saver, compiled, tid: str) -> dict[str, Any]:
    snap = compiled.get_state({"configurable": {"thread_id": tid}})
    v = snap.values
    final = v.get("final")
    sp = final.speedup_vs_eager if final is not None else None
    return {
        "thread": tid,
        "task": v["task"].name if v.get("task") else None,
        "device": (v.get("settings") or {}).get("device"),
        "status": _thread_status(saver, snap),
        "next": list(snap.next),
        "speedup_vs_eager": sp,
        "updated": snap.created_at,
        "out_dir": v.get("out_dir"),
    }


@app.command()
def threads(
    home: HomeOpt = None,
    checkpoint_url: StoreOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """List checkpointed runs (status: verified, no_kernel, bad_input, running or interrupted)."""
    from graph.persistence import checkpoint_path, is_postgres, store_url, thread_ids

    egg_home = _home(home)
    default_store = not checkpoint_url and not is_postgres(store_url(egg_home))
    if default_store and not checkpoint_path(egg_home).exists():
        rows: list[dict[str, Any]] = []  # nothing ran here yet: do not create an empty store
    else:
        compiled, saver = _open_store(egg_home, checkpoint_url)
        rows = [_thread_row(saver, compiled, tid) for tid in thread_ids(saver)]
    if as_json:
        print(json.dumps(rows, default=str))
        return
    if not rows:
        out_console.print(f"no runs under {egg_home}")
        return
    table = Table(title=f"threads in {egg_home}")
    for col in ("thread", "task", "device", "status", "best speedup", "updated"):
        table.add_column(col)
    for r in rows:
        status = (
            r["status"]
            if r["status"] not in ("running", "interrupted")
            else (f"{r['status']} (before {','.join(r['next'])})")
        )
        sp = r["speedup_vs_eager"]
        table.add_row(
            r["thread"], r["task"] or "-", r["device"] or "-", status, f"{sp:.2f}x" if sp else "-",
            str(r["updated"] or "-")[:19],
        )  # fmt: skip
    out_console.print(table)


def _history(compiled, tid: str) -> list:
    return list(compiled.get_state_history({"configurable": {"thread_id": tid}}))


@app.command()
def show(
    thread: Annotated[str, typer.Argument(help="thread id")],
    home: HomeOpt = None,
    checkpoint_url: StoreOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Print a thread's stage decisions and the checkpoint ids to replay from."""
    egg_home = _home(home)
    compiled, saver = _open_store(egg_home, checkpoint_url)
    hist = _history(compiled, thread)
    if not hist:
        _fail_bad_input(f"no thread {thread!r} in the checkpoint store")
    v = hist[0].values
    status = _thread_status(saver, hist[0])
    checkpoints = [
        {
            "checkpoint_id": s.config["configurable"]["checkpoint_id"],
            "step": s.metadata.get("step"),
            "next": list(s.next),
        }
        for s in hist
    ]
    if as_json:
        doc = {
            "thread": thread,
            "task": v["task"].name if v.get("task") else None,
            "status": status,
            "failure": v.get("failure"),
            "out_dir": v.get("out_dir"),
            "settings": v.get("settings"),
            "decisions": [d.model_dump(mode="json") for d in v.get("decisions") or []],
            "checkpoints": checkpoints,
        }
        print(json.dumps(doc, default=str))
        return
    out_console.print(
        f"thread {thread}: task {v['task'].name if v.get('task') else '-'}, status {status}, "
        f"failure {v.get('failure')}"
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
    for ck in checkpoints:
        c.add_row(ck["checkpoint_id"], str(ck["step"]), ",".join(ck["next"]) or "(end)")
    out_console.print(c)


@app.command()
def resume(
    thread: Annotated[str, typer.Argument(help="thread id of a run that was killed or stopped")],
    out: Annotated[str | None, typer.Option(help="output directory (default: the run's own --out)")] = None,
    llm: Annotated[
        str, typer.Option(help="live or recorded (serve the thread's recorded LLM replies, no network)")
    ] = "live",
    home: HomeOpt = None,
    checkpoint_url: StoreOpt = None,
    json_logs: Annotated[bool, typer.Option("--json-logs")] = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q")] = False,
) -> None:
    """Continue an interrupted run from its last checkpoint (inside the stage it was in), with the
    settings it was started with; writes to the run's output directory unless told otherwise."""
    from graph.context import Context

    _configure_logs(json_logs, quiet)
    egg_home = _home(home)
    if llm not in ("live", "recorded"):
        _fail_bad_input("--llm must be live or recorded")
    try:
        compiled, saver = _open_graph(egg_home, checkpoint_url=checkpoint_url, llm_mode=llm)
    except Exception as e:
        _infra_failure(egg_home, thread, e)
        raise typer.Exit(1) from None
    snap = compiled.get_state({"configurable": {"thread_id": thread}})
    if not snap.values and not snap.next:
        _fail_bad_input(f"no thread {thread!r} in the checkpoint store")
    v = snap.values
    if not snap.next:
        _fail_bad_input(
            f"thread {thread!r} has finished (status {v.get('status')}): nothing to resume; "
            f"`egg replay {thread}` runs it again"
        )
    if _thread_status(saver, snap) == "running":
        _fail_bad_input(f"thread {thread!r} is still running; resume it once its process is gone")
    if not v.get("settings"):
        _fail_bad_input(
            f"thread {thread!r} was interrupted before its settings were recorded: start it again with "
            "`egg optimize`"
        )
    settings = Context.from_dict(v["settings"])
    out_dir = Path(out) if out else Path(v.get("out_dir") or egg_home / "runs" / thread)
    cid = snap.config["configurable"]["checkpoint_id"]
    t0 = time.time()
    try:
        values = run_graph(
            compiled,
            None,
            _run_config(thread),
            settings,
            quiet=quiet,
            header=f"resuming {thread} from checkpoint {cid} (before {','.join(snap.next)})",
        )
    except Exception as e:
        _infra_failure(egg_home, thread, e)
        raise typer.Exit(1) from None
    _finish_run(values, out_dir, egg_home, thread, time.time() - t0, resumed_from=cid)


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
    home: HomeOpt = None,
    checkpoint_url: StoreOpt = None,
    json_logs: Annotated[bool, typer.Option("--json-logs")] = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q")] = False,
) -> None:
    """Re-run a thread from a checkpoint with the settings it was started with; writes a new result."""
    from graph.context import Context

    _configure_logs(json_logs, quiet)
    egg_home = _home(home)
    if llm not in ("live", "recorded"):
        _fail_bad_input("--llm must be live or recorded")
    compiled, _ = _open_graph(egg_home, checkpoint_url=checkpoint_url, llm_mode=llm)
    hist = _history(compiled, thread)
    if not hist:
        _fail_bad_input(f"no thread {thread!r} in the checkpoint store")
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
    out_console.print(f"replaying {thread} from checkpoint {cid} (before {','.join(start.next)}), llm={llm}")
    out_dir = Path(out) if out else egg_home / "threads" / thread / f"replay-{time.strftime('%Y%m%d-%H%M%S')}"
    t0 = time.time()
    config = _run_config(thread, checkpoint_id=cid, checkpoint_ns="")
    try:
        values = run_graph(compiled, None, config, settings, quiet=quiet)
    except Exception as e:
        _infra_failure(egg_home, thread, e)
        raise typer.Exit(1) from None
    report = _write_outputs(values, out_dir, thread, time.time() - t0)
    report["replayed_from"] = cid
    (out_dir / "report.json").write_text(json.dumps(report, indent=2, default=str))
    _print_summary(report, out_dir)
    raise typer.Exit(_exit_code(report))


def _eval_summary(out: str, code: int) -> dict[str, Any]:
    """`egg eval --json`: the eval's rows and metrics, as written to its output directory."""
    from evals.metrics import latest_rows

    out_dir = Path(out).expanduser().resolve()
    rows_path = out_dir / "results.jsonl"
    rows = (
        latest_rows([json.loads(ln) for ln in rows_path.read_text().splitlines() if ln.strip()])
        if rows_path.exists()
        else []
    )
    metrics_path = out_dir / "metrics.json"
    keys = (
        "task",
        "verified",
        "failure_kind",
        "failure",
        "speedup_vs_eager",
        "speedup_vs_compile",
        "wall_s",
        "thread_id",
        "shapes",
        "shapes_used",
        "sizes_used",
    )
    return {
        "exit_code": code,
        "out": str(out_dir),
        "tasks": len(rows),
        "verified": sum(1 for r in rows if r.get("verified")),
        "rows": [{k: r.get(k) for k in keys} for r in rows],
        "metrics": json.loads(metrics_path.read_text()) if metrics_path.exists() else None,
    }  # fmt: skip


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
    checkpoint_url: StoreOpt = None,
    time_box: Annotated[
        float | None,
        typer.Option(
            "--time-box",
            help="wall seconds for the whole eval: tasks start while enough is left and end with "
            "their best verified kernel before it ends (exit 3 with tasks left: rerun with --resume)",
        ),
    ] = None,
    shapes: Annotated[
        str,
        typer.Option(
            help="as-written, or ragged: every task with its int size constants >= 8 changed to smaller "
            "non-power-of-two values (passed to optimize; rows record the sizes used)"
        ),
    ] = "as-written",
    as_json: Annotated[
        bool, typer.Option("--json", help="print a JSON summary on stdout (progress goes to stderr)")
    ] = False,
) -> None:
    """Run optimize over a suite and write results.jsonl, report.md, metrics.json and plots."""
    import contextlib

    from evals.runner import eval_command
    from graph.persistence import CHECKPOINT_URL_ENV

    try:
        gpu_ids = [int(g) for g in gpus.split(",")] if gpus else None
    except ValueError:
        _fail_bad_input(f"--gpus must be comma-separated integers, not {gpus!r}")
    if checkpoint_url:
        # Every task's optimize process (and a Ray worker's) reads the store from the environment.
        os.environ[CHECKPOINT_URL_ENV] = checkpoint_url
    with contextlib.redirect_stdout(sys.stderr) if as_json else contextlib.nullcontext():
        code = eval_command(
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
            time_box_s=time_box,
            shapes=shapes,
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
    if as_json and code != 2:
        print(json.dumps(_eval_summary(out, code), default=str))
    raise typer.Exit(code)


def main() -> None:
    app(prog_name="egg")  # also under `python -m graph.cli`: completion scripts name `egg`


if __name__ == "__main__":
    main()
