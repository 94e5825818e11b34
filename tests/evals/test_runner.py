"""The eval runner against a fake optimize command (no torch, no model)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from eval_helpers import FAKE_CMD, REPO, SMOKE, copy_tasks, invocations

from evals.runner import ResultsFile, eval_command
from evals.tasks import TaskDiscoveryError, discover, parse_header


def rows_of(out: Path) -> list[dict]:
    return [json.loads(x) for x in (out / "results.jsonl").read_text().splitlines()]


def test_discover_smoke_and_headers(tmp_path: Path) -> None:
    tasks = discover([str(SMOKE)])
    assert len(tasks) == 5
    t = {x.name: x for x in tasks}["s02_softmax"]
    assert (t.id, t.level, t.family, t.kind) == ("smoke__s02_softmax", "smoke", "softmax", "single-op")
    (tmp_path / "helper.py").write_text("X = 1\n")
    (tmp_path / "__init__.py").write_text("")
    with pytest.raises(TaskDiscoveryError):
        discover([str(tmp_path)])  # a directory without tasks
    with pytest.raises(TaskDiscoveryError):
        discover([str(tmp_path / "helper.py")])
    with pytest.raises(TaskDiscoveryError):
        discover([str(tmp_path / "missing")])
    # A KernelBench file has no header: family/kind are unknown, not guessed.
    assert parse_header("import torch\n# family: x\n") == (None, None, None)


def test_smoke_suite_with_fake_optimize(
    tmp_path: Path, fake_env: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "ev"
    rc = eval_command([str(SMOKE)], out=str(out), workers=2, device="cpu", model="expert",
                      stages=["algorithm", "mapping"], policy="strict", optimize_cmd=FAKE_CMD)  # fmt: skip
    assert rc == 0
    rows = rows_of(out)
    assert len(rows) == 5
    by = {r["name"]: r for r in rows}
    ok = by["s02_softmax"]
    assert ok["verified"] and ok["exit_code"] == 0 and ok["failure"] is None
    assert (ok["family"], ok["kind"], ok["level"], ok["policy"]) == (
        "softmax",
        "single-op",
        "smoke",
        "strict",
    )
    assert ok["speedup_vs_eager"] is None and ok["timing_measured"] is False  # CPU: not measured
    assert [s["stage"] for s in ok["stages"]] == ["algorithm", "mapping"]
    assert ok["tokens"] == {"input": 100, "output": 50, "calls": 1}
    assert ok["thread_id"].startswith("eval-") and ok["thread_id"].endswith("-smoke__s02_softmax")
    bad = by["s05_sort_rows"]
    assert not bad["verified"] and bad["exit_code"] == 1 and bad["failure_kind"] == "no_kernel"
    assert "no verified kernel" in bad["failure"]
    # CPU runs hide every GPU from the task.
    assert {cvd for _, cvd in invocations(fake_env)} == {""}
    for f in ("report.md", "metrics.json", "eval.json"):
        assert (out / f).exists()
    m = json.loads((out / "metrics.json").read_text())
    assert m["overall"]["verified"]["count"] == 4
    assert m["overall"]["fast_p"]["vs_eager"]["0.0"] == pytest.approx(4 / 5)  # fast_0: correctness
    assert m["overall"]["fast_p"]["vs_eager"]["1.0"] is None  # not measured, not invented
    assert m["measured_on"].startswith("CPU") and m["plots"]["speedup_per_task.png"] is None
    assert "not measured" in (out / "report.md").read_text()
    printed = capsys.readouterr().out  # not a TTY: one line per finished task
    assert printed.count("] smoke__") == 5 and "[5/5]" in printed


def test_failure_modes_become_rows(tmp_path: Path, fake_env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    modes = {
        "t_crash": "crash",
        "t_hang": "hang",
        "t_noreport": "noreport",
        "t_lie": "lie",
        "t_bad": "badinput",
        "t_orphan": "orphan",
    }
    tasks = copy_tasks(
        tmp_path / "lvl",
        {**{k: "s02_softmax" for k in modes}, "t_ok": "s01_elementwise_chain", "t_degenerate": "s02_softmax"},
    )
    monkeypatch.setenv("FAKE_OPT_MODES", ",".join(f"{k}={v}" for k, v in modes.items()))
    out = tmp_path / "ev"
    t0 = time.monotonic()
    rc = eval_command(
        [str(tasks)], out=str(out), workers=2, device="cpu", optimize_cmd=FAKE_CMD, task_timeout_s=3
    )
    assert rc == 0
    assert time.monotonic() - t0 < 30
    by = {r["name"]: r for r in rows_of(out)}
    assert by["t_ok"]["verified"]
    assert by["t_crash"]["failure_kind"] == "crash" and "fake optimize blew up" in by["t_crash"]["failure"]
    assert by["t_crash"]["exit_code"] == 3
    assert by["t_hang"]["failure_kind"] == "timeout" and "timeout after 3s" in by["t_hang"]["failure"]
    assert by["t_noreport"]["failure_kind"] == "no_report"
    # Exit 0 and verified=true but no model_new.py: not counted as verified.
    assert not by["t_lie"]["verified"] and by["t_lie"]["failure_kind"] == "inconsistent"
    assert by["t_bad"]["failure_kind"] == "bad_input" and by["t_bad"]["exit_code"] == 2
    assert sum(r["verified"] for r in by.values()) == 3
    # A child left running by a finished optimize is killed with the task's process group.
    orphan = int((out / "tasks" / "lvl__t_orphan" / "orphan.pid").read_text())
    time.sleep(0.2)
    assert not _alive(orphan)
    # The checker's degenerate note reaches the row and the report's flagged list.
    assert by["t_degenerate"]["degenerate"] == ["output is constant"]
    m = json.loads((out / "metrics.json").read_text())
    assert [d["task"] for d in m["degenerate"]] == ["lvl__t_degenerate"]
    assert by["t_ok"]["models"] == {"code": "expert", "profiler": "expert", "debugger": "expert"}


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A killed child of the (exited) fake is reaped by init; a zombie counts as dead.
    stat = Path(f"/proc/{pid}/stat")
    return not (stat.exists() and stat.read_text().split(")")[-1].split()[0] == "Z")


def test_one_slot_per_gpu(tmp_path: Path, fake_env: Path) -> None:
    tasks = copy_tasks(tmp_path / "lvl", {f"t{i}": "s02_softmax" for i in range(4)})
    rc = eval_command(
        [str(tasks)], out=str(tmp_path / "ev"), device="cuda", gpus=[3, 5], optimize_cmd=FAKE_CMD
    )
    assert rc == 0
    inv = invocations(fake_env)
    assert len(inv) == 4
    assert {cvd for _, cvd in inv} <= {"3", "5"}  # each task sees exactly one GPU
    rows = rows_of(tmp_path / "ev")
    assert {r["gpu_index"] for r in rows} <= {3, 5} and all(r["device"] == "cuda" for r in rows)


def test_bad_invocations(tmp_path: Path, fake_env: Path) -> None:
    out = tmp_path / "ev"
    assert eval_command([str(tmp_path / "nope")], out=str(out), optimize_cmd=FAKE_CMD) == 2
    assert eval_command([str(SMOKE)], out=str(out), device="cpu", gpus=[0], optimize_cmd=FAKE_CMD) == 2
    assert eval_command([str(SMOKE)], out=str(out), policy="loose", optimize_cmd=FAKE_CMD) == 2
    assert (
        eval_command([str(SMOKE / "s02_softmax.py")], out=str(out), device="cpu", optimize_cmd=FAKE_CMD) == 0
    )
    # Results exist: refuse to mix runs without --resume, and refuse a resume with another model.
    assert eval_command([str(SMOKE)], out=str(out), device="cpu", optimize_cmd=FAKE_CMD) == 2
    assert (
        eval_command(
            [str(SMOKE)], out=str(out), device="cpu", resume=True, model="llm", optimize_cmd=FAKE_CMD
        )
        == 2
    )
    assert len(rows_of(out)) == 1


def test_timed_report_and_plots(tmp_path: Path, fake_env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_OPT_TIMING", "1")
    out = tmp_path / "ev"
    assert eval_command([str(SMOKE)], out=str(out), device="cpu", html=True, optimize_cmd=FAKE_CMD) == 0
    rows = rows_of(out)
    timed = [r for r in rows if r["verified"]]
    assert all(r["speedup_vs_eager"] == pytest.approx(r["eager_ms"] / r["candidate_ms"]) for r in timed)
    assert all(r["candidate_p20_ms"] < r["candidate_ms"] < r["candidate_p80_ms"] for r in timed)
    assert all(r["dtype"] == "float32" for r in timed)
    # Job phases from the log's tool.evaluate line, model/tool seconds from the report's usage.
    assert all(r["phases"] == {"check": 1.5, "compile": 0.5, "startup": 2.0, "wait_memory": 0.5, "wait_timing": 0.25,
                            "model": 0.1}
               for r in timed)  # fmt: skip
    for png in ("speedup_per_task.png", "fast_p.png", "per_family.png", "stage_waterfall.png"):
        data = (out / png).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 2000
    m = json.loads((out / "metrics.json").read_text())
    spd = [r["speedup_vs_eager"] for r in timed]
    assert m["overall"]["speedup"]["vs_eager"]["n"] == 4
    assert m["overall"]["fast_p"]["vs_eager"]["0.0"] == pytest.approx(4 / 5)
    assert m["overall"]["fast_p"]["vs_eager"]["1.0"] == pytest.approx(sum(s > 1 for s in spd) / 5)
    html = (out / "report.html").read_text()
    # The fake rows carry no GPU name: the roofline has no peak to draw against.
    assert m["plots"]["roofline.png"] is None and not (out / "roofline.png").exists()
    assert m["phases"]["startup"] == {"total": 8.0, "median": 2.0, "tasks": 4}
    assert "<table>" in html and html.count("data:image/png;base64,") == 4
    md = (out / "report.md").read_text()
    assert "![speedup_per_task.png](speedup_per_task.png)" in md
    assert "| startup | 8.0 | 2.0 | 4 |" in md


def test_torn_last_line_is_dropped(tmp_path: Path) -> None:
    p = tmp_path / "results.jsonl"
    p.write_text('{"task": "a", "verified": true}\n{"task": "b", "verif')
    rf = ResultsFile(p)
    assert [r["task"] for r in rf.load()] == ["a"]
    rf.append({"task": "c", "verified": False})
    assert [r["task"] for r in rf.load()] == ["a", "c"]


def _count_rows(out: Path) -> int:
    p = out / "results.jsonl"
    return len(p.read_text().splitlines()) if p.exists() else 0


def test_resume_after_interrupt(tmp_path: Path, fake_env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    sleep_s = 0.8
    n_tasks = 6
    tasks = copy_tasks(tmp_path / "lvl", {f"t{i}": "s02_softmax" for i in range(n_tasks)})
    out = tmp_path / "ev"
    monkeypatch.setenv("FAKE_OPT_SLEEP", str(sleep_s))
    code = (
        "import sys; from evals.runner import eval_command; "
        f"sys.exit(eval_command([{str(tasks)!r}], out={str(out)!r}, device='cpu', workers=1, "
        f"optimize_cmd={FAKE_CMD!r}))"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen([sys.executable, "-c", code], env=env, cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip
    deadline = time.monotonic() + 60
    while _count_rows(out) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err.decode()
    done_first = {r["task"] for r in rows_of(out)}
    assert 2 <= len(done_first) < n_tasks
    started_first = [stem for stem, _ in invocations(fake_env)]
    # Started by the runner (it opens the task's log before the optimize process can log its own
    # start), not finished: killed in flight.
    killed = {d.name for d in (out / "tasks").iterdir() if (d / "optimize.log").exists()} - done_first
    assert (out / "report.md").exists() and "Partial" in (out / "report.md").read_text()

    fake_env.unlink()
    t0 = time.monotonic()
    rc = eval_command([str(tasks)], out=str(out), device="cpu", workers=1, resume=True, optimize_cmd=FAKE_CMD)
    resumed_s = time.monotonic() - t0
    assert rc == 0
    rerun = [stem for stem, _ in invocations(fake_env)]
    rows = rows_of(out)
    assert sorted(r["task"] for r in rows) == sorted(f"lvl__t{i}" for i in range(n_tasks))  # one row each
    assert not {f"lvl__{s}" for s in rerun} & done_first  # completed tasks were not re-run
    assert len(rerun) == n_tasks - len(done_first)
    # Only the in-flight task was lost: it was started in the first run and reruns now.
    assert len(started_first) - len(done_first) <= 1 and len(killed) <= 1
    # Time saved: a full rerun would cost every task's wall time; the resume costs only the
    # remaining ones (per-task walls include this machine's load, so the comparison is fair).
    walls = {r["task"]: r["wall_s"] for r in rows}
    full_cost = sum(walls.values())
    saved = sum(walls[t] for t in done_first)
    assert resumed_s < full_cost - saved / 2, f"resume took {resumed_s:.1f}s; full {full_cost:.1f}s"
    print(f"resume: {resumed_s:.1f}s for {len(rerun)} task(s) vs ~{full_cost:.1f}s full; saved ~{saved:.1f}s")
    eval_ids = {r["eval_id"] for r in rows}
    assert len(eval_ids) == 1  # the eval id stays stable across the resume
    # The task killed mid-run gets a fresh checkpoint thread (re-running a LangGraph thread
    # would merge the killed run's state into the new one); its first log is kept.
    (eval_id,) = eval_ids
    for r in rows:
        retried = r["task"] in killed
        assert r["thread_id"] == f"{eval_id}-{r['task']}" + ("-retry1" if retried else "")
        assert (out / "tasks" / r["task"] / "optimize.attempt1.log").exists() == retried


def test_rich_progress_bar() -> None:
    import io

    from rich.console import Console

    from evals.runner import _RichProgress

    buf = io.StringIO()
    stages = {"lvl__a": "tiling"}
    p = _RichProgress(3, 1, console=Console(file=buf, force_terminal=True, width=160), stage_of=stages.get)
    p.started("lvl__a")
    time.sleep(1.3)  # the ticker refreshes the running tasks' stages
    assert "lvl__a [tiling]" in buf.getvalue()
    assert "running 1, queued 1" in buf.getvalue()
    p.finished({"task": "lvl__a", "verified": True})
    p.started("lvl__b")
    p.finished({"task": "lvl__b", "verified": False})
    p.close()
    text = buf.getvalue()
    assert "3/3" in text and "1 verified" in text and "1 failed" in text and "queued 0" in text


def test_plain_progress_prints_periodic_status_lines_without_markup() -> None:
    import io

    from evals.runner import _PlainProgress

    now = [100.0]
    buf = io.StringIO()
    # one task done by an earlier run (--resume), and it verified: counted from the first line
    p = _PlainProgress(5, 1, stream=buf, interval_s=30.0, clock=lambda: now[0], skipped_verified=1)
    p.started("a")
    p.started("b")
    now[0] += 10
    p.tick()  # before the interval: nothing
    now[0] += 25
    p.tick()
    p.finished({"task": "a", "verified": True, "wall_s": 35.0})
    now[0] += 31
    p.tick()
    p.close()
    lines = buf.getvalue().splitlines()
    assert lines[0] == "resume: 1 task(s) already done, 4 to run"
    assert lines[1] == ("eval: done 1/5 (1 verified, 0 failed), running 2, queued 2, elapsed 35s, ETA ?")
    # One task in 35 s, three left: ETA 1m45s at this run's rate.
    assert lines[2] == ("[2/5] a: verified, speedup not measured (35.0s); running 1, queued 2, ETA 1m45s")
    assert lines[3].startswith("eval: done 2/5 (2 verified, 0 failed), running 1, queued 2, elapsed 1m06s")
    text = buf.getvalue()
    assert "\x1b" not in text and "\r" not in text and "[/" not in text  # no escapes, no rich markup


def test_module_entry_and_report_rebuild(tmp_path: Path, fake_env: Path) -> None:
    out = tmp_path / "ev"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    cmd = [sys.executable, "-m", "evals", str(SMOKE), "--out", str(out), "--device", "cpu",
           "--optimize-cmd", " ".join(FAKE_CMD), "--stages", "algorithm"]  # fmt: skip
    r = subprocess.run(cmd, env=env, cwd=REPO, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "[5/5]" in r.stdout
    (out / "report.md").unlink()
    r = subprocess.run([sys.executable, "-m", "evals", "report", str(out), "--html"], env=env, cwd=REPO,
                       capture_output=True, text=True, timeout=120)  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert (out / "report.md").exists() and (out / "report.html").exists()
    assert all(len(row["stages"]) == 1 for row in rows_of(out))


def test_current_stage_from_log(tmp_path: Path) -> None:
    from evals.runner import current_stage

    log = tmp_path / "optimize.log"
    assert current_stage(log) is None
    log.write_text("08:12:47 [info] stage.start entry=None stage=algorithm\n" + "x" * 10000 + "\n"
                   "08:13:04 [info] compile ok=True stage=mapping\n")  # fmt: skip
    assert current_stage(log) == "mapping"


def test_resolve_devices(monkeypatch: pytest.MonkeyPatch) -> None:
    from evals.runner import EvalUsageError, detect_gpus, resolve_devices

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert detect_gpus() == []
    assert resolve_devices("auto", None) == ("cpu", [])
    with pytest.raises(EvalUsageError):
        resolve_devices("cuda", None)  # no GPU: refuse rather than silently run on CPU
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3")
    assert resolve_devices("auto", None) == ("cuda", [2, 3])
    assert resolve_devices("cuda", [1]) == ("cuda", [1])
    assert resolve_devices("cpu", None) == ("cpu", [])
    with pytest.raises(EvalUsageError):
        resolve_devices("cuda", [1, 1])
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-1234abcd")
    with pytest.raises(EvalUsageError):
        detect_gpus()


def test_time_box_ends_tasks_with_their_kernels_and_leaves_the_rest(
    tmp_path: Path, fake_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """--time-box: each task gets the rest of the box as its run budget; one cut short with a
    kernel keeps its row (budget and halt recorded), one cut short without a kernel and one never
    started get no row, the eval exits 3, and --resume runs exactly those two in full."""
    import evals.runner as runner

    monkeypatch.setattr(runner, "_BOX_MARGIN_MIN_S", 0.5)
    monkeypatch.setattr(runner, "_BOX_MARGIN_MAX_S", 0.5)
    tasks = copy_tasks(tmp_path / "lvl", {"a_ok": "s02_softmax", "b_cut": "s02_softmax",
                                          "c_late": "s02_softmax", "d_rest": "s02_softmax"})  # fmt: skip
    out = tmp_path / "ev"
    monkeypatch.setenv("FAKE_OPT_MODES", "c_late=late")
    monkeypatch.setenv("FAKE_OPT_SLEEPS", "a_ok=0.5,b_cut=30,c_late=30,d_rest=0.1")
    t0 = time.monotonic()
    rc = eval_command(
        [str(tasks)], out=str(out), device="cpu", workers=2, optimize_cmd=FAKE_CMD, time_box_s=7.0
    )
    took = time.monotonic() - t0
    assert rc == 3
    assert took < 7.0 + 3.0, f"the box was 7 s, the eval took {took:.1f} s"
    rows = {r["task"]: r for r in rows_of(out)}
    assert set(rows) == {"lvl__a_ok", "lvl__b_cut"}
    a, b = rows["lvl__a_ok"], rows["lvl__b_cut"]
    assert a["verified"] and a["halt"] is None and 5.5 < a["run_seconds"] <= 6.5
    # b ran to its budget (the box less the margin) and kept the kernel it had found
    assert b["verified"] and "wall-time budget" in b["halt"] and 5.5 < b["run_seconds"] <= 6.5
    # c started after a with what was left of the box and had no kernel when that ended; d never
    # started (less than the margin was left)
    started = [stem for stem, _ in invocations(fake_env)]
    assert sorted(started) == ["a_ok", "b_cut", "c_late"]
    assert "Partial" in (out / "report.md").read_text()

    fake_env.unlink()
    monkeypatch.setenv("FAKE_OPT_SLEEPS", "c_late=0.1,d_rest=0.1")
    rc = eval_command([str(tasks)], out=str(out), device="cpu", workers=1, optimize_cmd=FAKE_CMD, resume=True)
    assert rc == 0
    assert [stem for stem, _ in invocations(fake_env)] == ["c_late", "d_rest"]
    rows = {r["task"]: r for r in rows_of(out)}
    assert all(r["verified"] for r in rows.values()) and len(rows) == 4
    assert rows["lvl__c_late"]["run_seconds"] is None and rows["lvl__c_late"]["halt"] is None


def test_time_box_too_short_or_with_ray_is_bad_input(tmp_path: Path, fake_env: Path) -> None:
    tasks = copy_tasks(tmp_path / "lvl", {"a": "s02_softmax"})
    rc = eval_command(
        [str(tasks)], out=str(tmp_path / "o1"), device="cpu", optimize_cmd=FAKE_CMD, time_box_s=50.0
    )
    assert rc == 2
    rc = eval_command(
        [str(tasks)],
        out=str(tmp_path / "o2"),
        device="cpu",
        optimize_cmd=FAKE_CMD,
        time_box_s=600.0,
        backend="ray",
    )
    assert rc == 2
    assert not invocations(fake_env)


def test_shapes_ragged_is_passed_on_and_recorded(tmp_path: Path, fake_env: Path) -> None:
    from evals.runner import EvalConfig, build_command
    from evals.tasks import discover

    tasks = copy_tasks(tmp_path / "lvl", {"a": "s02_softmax", "b": "s01_elementwise_chain"})
    out = tmp_path / "ev"
    rc = eval_command([str(tasks)], out=str(out), device="cpu", shapes="ragged", optimize_cmd=FAKE_CMD)
    assert rc == 0
    rows = rows_of(out)
    assert {(r["shapes"], r["shapes_used"], json.dumps(r["sizes_used"])) for r in rows} == {
        ("ragged", "ragged", '{"N": 11}')
    }
    m = json.loads((out / "eval.json").read_text())
    assert m["config"]["shapes"] == "ragged"
    assert m["tasks"] == {r["task"]: {"sizes_used": {"N": 11}, "shapes_used": "ragged"} for r in rows}
    md = (out / "report.md").read_text()
    assert "- shapes: ragged (int size constants >= 8 changed" in md and "| shapes ragged" in md
    assert "shapes ragged" in json.loads((out / "metrics.json").read_text())["measured_on"]
    # the flag reaches optimize only when asked for
    cfg = EvalConfig(out=str(out), device="cpu", model="expert", policy="mixed", stages=None, extra_args=[],
                     optimize_cmd=["egg-opt"], backend="local", eval_id="e", task_timeout_s=1.0)  # fmt: skip
    task = discover([str(tasks)])[0]
    assert "--shapes" not in build_command(cfg, task)
    cfg.shapes = "ragged"
    assert build_command(cfg, task)[-2:] == ["--shapes", "ragged"]


def test_resume_refuses_another_shapes_mode(
    tmp_path: Path, fake_env: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tasks = copy_tasks(tmp_path / "lvl", {"a": "s02_softmax"})
    out = tmp_path / "ev"
    assert eval_command([str(tasks)], out=str(out), device="cpu", optimize_cmd=FAKE_CMD) == 0
    assert rows_of(out)[0]["shapes"] == "as-written"
    assert "- shapes: as-written" in (out / "report.md").read_text()
    capsys.readouterr()
    rc = eval_command(
        [str(tasks)], out=str(out), device="cpu", resume=True, shapes="ragged", optimize_cmd=FAKE_CMD
    )
    assert rc == 2
    err = capsys.readouterr().err
    assert "--shapes ragged" in err and "--shapes as-written" in err and "new --out" in err
    # a manifest without the key (written before it existed) ran as written
    m = json.loads((out / "eval.json").read_text())
    del m["config"]["shapes"]
    (out / "eval.json").write_text(json.dumps(m))
    results = out / "results.jsonl"
    results.write_text(
        "".join(json.dumps({k: v for k, v in r.items() if k != "shapes"}) + "\n" for r in rows_of(out))
    )
    assert eval_command([str(tasks)], out=str(out), device="cpu", resume=True, optimize_cmd=FAKE_CMD) == 0
    assert (
        eval_command(
            [str(tasks)], out=str(out), device="cpu", resume=True, shapes="ragged", optimize_cmd=FAKE_CMD
        )
        == 2
    )
    assert "has rows run with --shapes as-written" in capsys.readouterr().err
    # manifest check alone (no rows yet): another mode is refused too
    out2 = tmp_path / "ev2"
    out2.mkdir()
    (out2 / "eval.json").write_text(
        json.dumps({"eval_id": "e", "config": {**m["config"], "shapes": "ragged"}})
    )
    capsys.readouterr()
    assert eval_command([str(tasks)], out=str(out2), device="cpu", resume=True, optimize_cmd=FAKE_CMD) == 2
    assert "shapes: 'ragged' -> 'as-written'" in capsys.readouterr().err
    assert (
        eval_command(
            [str(tasks)], out=str(tmp_path / "ev3"), device="cpu", shapes="wide", optimize_cmd=FAKE_CMD
        )
        == 2
    )
    assert "--shapes must be as-written or ragged, not 'wide'" in capsys.readouterr().err


def test_time_box_end_wraps_up_runs_past_their_budget(
    tmp_path: Path, fake_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run still going when the box ends (its last job ran past the budget) is asked to wrap up
    (SIGTERM): one with a verified kernel keeps its row, written by the run itself, and one with
    none is left for --resume; neither holds the eval past the box."""
    import evals.runner as runner

    for name in ("_BOX_MARGIN_MIN_S", "_BOX_MARGIN_MAX_S"):
        monkeypatch.setattr(runner, name, 0.5)
    monkeypatch.setenv("FAKE_OPT_MODES", "a_over=overrun,b_none=overrun_nokernel")
    out, t0 = tmp_path / "ev", time.monotonic()
    tasks = copy_tasks(tmp_path / "lvl", {"a_over": "s02_softmax", "b_none": "s02_softmax"})
    rc = eval_command(
        [str(tasks)], out=str(out), device="cpu", workers=2, optimize_cmd=FAKE_CMD, time_box_s=4.0
    )
    assert rc == 3 and time.monotonic() - t0 < 4.0 + 3.0, "the eval outlasted its 4 s box"
    rows = {r["task"]: r for r in rows_of(out)}
    assert set(rows) == {"lvl__a_over"}
    a = rows["lvl__a_over"]
    assert a["verified"] and "time box ended" in a["halt"]
    assert (out / "tasks" / "lvl__a_over" / "model_new.py").exists()
