"""`egg eval` end to end with the REAL `egg optimize` (built-in expert model, CPU interpreter).

Three smoke tasks: one the expert cannot do (sorted first, so it finishes first and gives the
interrupt test an early row), an elementwise chain and a softmax. Each run uses
`--stages algorithm` and one seed so the whole module stays within about three minutes on
two cores. Run with `-s` to see the full vs resumed timings.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from eval_helpers import REPO, copy_tasks

from evals.runner import eval_command

pytestmark = pytest.mark.slow

LEVEL = "realcpu"
SUBSET = {
    "a_sort_rows": "s05_sort_rows",
    "b_elementwise_chain": "s01_elementwise_chain",
    "c_softmax": "s02_softmax",
}
IDS = [f"{LEVEL}__{stem}" for stem in SUBSET]
UNSUPPORTED = f"{LEVEL}__a_sort_rows"
SEEDS = ["--seeds", "1"]
STAGES = ["algorithm"]


@pytest.fixture(scope="module")
def suite(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return copy_tasks(tmp_path_factory.mktemp("suite") / LEVEL, SUBSET)


@pytest.fixture(scope="module")
def egg_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Checkpoints of every optimize run go to a temporary EGG_HOME, never the checkout's."""
    home = tmp_path_factory.mktemp("egg_home")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("EGG_HOME", str(home))
        mp.delenv("EGG_SEEDS", raising=False)
        mp.setenv("RAY_AUTH_MODE", "disabled")
        yield home


@pytest.fixture(scope="module")
def full_run(suite: Path, egg_home: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, float]:
    out = tmp_path_factory.mktemp("full")
    t0 = time.monotonic()
    rc = eval_command([str(suite)], out=str(out), device="cpu", workers=2, stages=STAGES, extra_args=SEEDS)
    elapsed = time.monotonic() - t0
    assert rc == 0
    return out, elapsed


def _rows(out: Path) -> list[dict[str, Any]]:
    path = out / "results.jsonl"
    if not path.exists():
        return []
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


def _by_task(out: Path) -> dict[str, dict[str, Any]]:
    rows = _rows(out)
    by = {r["task"]: r for r in rows}
    assert len(by) == len(rows), f"duplicate rows in {out}/results.jsonl"
    return by


def _outcome(out: Path) -> dict[str, tuple[bool, str | None, str | None]]:
    return {t: (r["verified"], r["failure_kind"], r["failure"]) for t, r in _by_task(out).items()}


def test_full_run_writes_rows_report_and_kernels(full_run: tuple[Path, float]) -> None:
    out, elapsed = full_run
    print(f"\n[real eval] full run, 3 tasks, --workers 2: {elapsed:.1f}s")
    rows = _by_task(out)
    assert sorted(rows) == IDS
    for tid, r in rows.items():
        tdir = out / "tasks" / tid
        assert r["device"] == "cpu" and r["backend"] == "local" and r["exit_code"] is not None
        # CPU has no timing: no row may claim a speedup or a measured time.
        assert r["timing_measured"] is False
        for k in (
            "speedup_vs_eager",
            "speedup_vs_compile",
            "speedup_vs_best",
            "candidate_ms",
            "eager_ms",
            "compile_ms",
        ):
            assert r[k] is None, (tid, k, r[k])
        assert [s["stage"] for s in r["stages"] if s["outcome"] != "skipped"] == ["algorithm"]
        if tid == UNSUPPORTED:
            assert not r["verified"] and r["exit_code"] == 1 and r["failure_kind"] == "no_kernel"
            assert "unsupported" in r["failure"] and "sort" in r["failure"]
            assert not (tdir / "model_new.py").exists()
        else:
            assert r["verified"] and r["exit_code"] == 0 and r["failure"] is None, r["failure"]
            src = (tdir / "model_new.py").read_text()
            assert "class ModelNew" in src and "@triton.jit" in src
            assert r["timing_note"] and "not measured" in r["timing_note"]

    metrics = json.loads((out / "metrics.json").read_text())
    overall = metrics["overall"]
    assert metrics["complete"] is True
    assert overall["tasks"] == 3 and overall["failed"] == 1
    assert overall["measured"] == {"vs_eager": 0, "vs_compile": 0, "vs_best": 0}
    # fast_0 is the correctness rate; above 0 no measurement means no fast_p, not a made-up 0% or 100%.
    for base in ("vs_eager", "vs_compile", "vs_best"):
        fp = overall["fast_p"][base]
        assert fp["0.0"] == pytest.approx(2 / 3) and {v for k, v in fp.items() if k != "0.0"} == {None}, fp
        assert overall["speedup"][base]["geomean"] is None and overall["speedup"][base]["n"] == 0
    # Where each task's seconds went, from the report's usage (no GPU jobs on CPU).
    verified = [r for r in rows.values() if r["verified"]]
    for r in verified:
        assert r["phases_source"] == "usage+log" and r["phases"]["tools"] > 0, r["phases"]
    assert metrics["phases"]["tools"]["tasks"] >= len(verified)
    assert {r["dtype"] for r in verified} == {"float32"}

    md = (out / "report.md").read_text()
    assert "not measured" in md
    assert "| 3 |" in md and "2 (66.7%)" in md


def _eval_cli(suite: Path, out: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "graph.cli", "eval", str(suite), "--out", str(out), "--device", "cpu",
            "--stages", ",".join(STAGES), "--workers", "2", *extra]  # fmt: skip


def _cli_env() -> dict[str, str]:
    # `egg eval` has no pass-through for optimize flags; optimize reads EGG_SEEDS itself.
    return {**os.environ, "EGG_SEEDS": "1", "PYTHONPATH": str(REPO)}


def _procs_mentioning(text: str) -> list[int]:
    """Live processes whose command line contains text (to catch orphaned optimize runs)."""
    pids = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit() or int(d.name) == os.getpid():
            continue
        try:
            cmd = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            state = next(
                (ln for ln in (d / "status").read_text().splitlines() if ln.startswith("State:")), ""
            )
        except OSError:
            continue
        if text in cmd and "zombie" not in state:
            pids.append(int(d.name))
    return pids


def _snapshot(out: Path, tid: str) -> dict[str, int]:
    tdir = out / "tasks" / tid
    return {f.name: f.stat().st_mtime_ns for f in tdir.iterdir() if f.is_file()}


def test_interrupt_then_resume_skips_finished_tasks(
    full_run: tuple[Path, float], suite: Path, egg_home: Path, tmp_path: Path
) -> None:
    out = tmp_path / "interrupted"
    # Ctrl-C's default action in the child, also when this test runs under a shell that started
    # it in the background (such a shell ignores SIGINT, the child would inherit that, and the
    # eval would run to its end instead of stopping).
    proc = subprocess.Popen(
        _eval_cli(suite, out), cwd=REPO, env=_cli_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 150
        while not _rows(out):
            assert proc.poll() is None, f"eval ended before any row: {proc.communicate()}"
            assert time.monotonic() < deadline, "no row within 150s"
            time.sleep(0.2)
        proc.send_signal(signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, (proc.returncode, stdout, stderr)
    assert "Traceback" not in stderr and "--resume" in stderr, stderr
    # The killed tasks' optimize processes (own sessions) must not outlive the eval.
    time.sleep(0.5)
    assert _procs_mentioning(str(out)) == []

    kept = _by_task(out)
    assert kept and set(kept) < set(IDS), f"interrupt left {sorted(kept)}: nothing to resume"
    unfinished = [t for t in IDS if t not in kept]
    kept_files = {t: _snapshot(out, t) for t in kept}
    # Report of a partial eval is written and says so.
    assert json.loads((out / "metrics.json").read_text())["complete"] is False
    killed_started = [t for t in unfinished if (out / "tasks" / t / "optimize.log").exists()]
    assert killed_started, "no task was in flight at the interrupt: the kill path went untested"

    t0 = time.monotonic()
    res = subprocess.run(
        _eval_cli(suite, out, "--resume"), cwd=REPO, env=_cli_env(), capture_output=True, text=True, timeout=240
    )  # fmt: skip
    resumed_s = time.monotonic() - t0
    assert res.returncode == 0, (res.stdout, res.stderr)
    assert f"resume: {len(kept)} task(s) already done" in res.stdout

    rows = _by_task(out)
    assert sorted(rows) == IDS  # one row per task, no duplicate for a finished task
    for t, old in kept.items():
        assert rows[t] == old, f"{t} row changed on resume"
        assert _snapshot(out, t) == kept_files[t], f"{t} outputs rewritten on resume (re-run)"
    eval_id = json.loads((out / "eval.json").read_text())["eval_id"]
    for t in unfinished:
        # A task killed mid-run is retried on a fresh checkpoint thread, its old log kept.
        want = f"{eval_id}-{t}-retry1" if t in killed_started else f"{eval_id}-{t}"
        assert rows[t]["thread_id"] == want
        assert (out / "tasks" / t / "optimize.attempt1.log").exists() == (t in killed_started)
    assert json.loads((out / "metrics.json").read_text())["complete"] is True
    # Same outcomes as the uninterrupted run, and a retried task's usage is its own run's only
    # (on a reused thread the killed run's LLM/tool calls would be added in).
    full_rows = _by_task(full_run[0])
    assert _outcome(out) == _outcome(full_run[0])
    for t in unfinished:
        assert rows[t]["tokens"] == full_rows[t]["tokens"], (t, rows[t]["tokens"], full_rows[t]["tokens"])

    full_s = full_run[1]
    print(
        f"\n[real eval] interrupted after {len(kept)} of {len(IDS)} task(s) ({', '.join(sorted(kept))}); "
        f"resumed run {resumed_s:.1f}s vs full run {full_s:.1f}s: saved {full_s - resumed_s:.1f}s "
        f"({100 * (full_s - resumed_s) / full_s:.0f}%); re-run: {', '.join(unfinished)}; the skipped "
        f"task(s) had taken {sum(r['wall_s'] for r in kept.values()):.1f}s of task wall time"
    )


def test_ray_backend_matches_local(full_run: tuple[Path, float], suite: Path, tmp_path: Path) -> None:
    pytest.importorskip("ray")
    out = tmp_path / "ray"
    t0 = time.monotonic()
    rc = eval_command(
        [str(suite)], out=str(out), device="cpu", workers=2, stages=STAGES, extra_args=SEEDS, backend="ray"
    )
    elapsed = time.monotonic() - t0
    assert rc == 0
    rows = _by_task(out)
    assert sorted(rows) == IDS and {r["backend"] for r in rows.values()} == {"ray"}
    assert _outcome(out) == _outcome(full_run[0])
    for t, r in rows.items():
        assert (out / "tasks" / t / "model_new.py").exists() == r["verified"]
        assert r["speedup_vs_eager"] is None and r["timing_measured"] is False
    print(f"\n[real eval] --backend ray (local instance), 3 tasks: {elapsed:.1f}s")
