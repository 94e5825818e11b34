"""`egg eval` command line: every documented option is there, bad input exits 2 in one line."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from eval_helpers import REPO, SMOKE

OPTIONS = ["--resume", "--device", "--workers", "--gpus", "--model", "--stages", "--policy", "--backend", "--html",
           "--out", "--ray-address", "--time-box"]  # fmt: skip


def _egg_eval(*args: str) -> subprocess.CompletedProcess[str]:
    # Wide, plain output so option names are never wrapped or split by rich's box drawing.
    env = {**os.environ, "COLUMNS": "200", "NO_COLOR": "1", "TERM": "dumb", "PYTHONPATH": str(REPO)}
    return subprocess.run(
        [sys.executable, "-m", "graph.cli", "eval", *args], cwd=REPO, env=env, capture_output=True, text=True,
        timeout=60,
    )  # fmt: skip


def test_help_lists_every_option() -> None:
    res = _egg_eval("--help")
    assert res.returncode == 0, res.stderr
    missing = [o for o in OPTIONS if o not in res.stdout]
    assert not missing, f"egg eval --help lacks {missing}:\n{res.stdout}"


@pytest.mark.parametrize(
    ("args", "expect"),
    [
        (["{tmp}/no-such-suite", "--out", "{tmp}/o"], "no such file or directory"),
        (["{smoke}", "--out", "{tmp}/o", "--device", "tpu"], "--device must be auto, cpu or cuda"),
        (["{smoke}", "--out", "{tmp}/o", "--backend", "spark"], "--backend must be local or ray"),
        (["{smoke}", "--out", "{tmp}/o", "--policy", "loose"], "--policy must be strict or mixed"),
        (["{smoke}", "--out", "{tmp}/o", "--workers", "0"], "--workers must be >= 1"),
        (["{smoke}", "--out", "{tmp}/o", "--gpus", "a,b"], "--gpus must be comma-separated integers"),
        (["{smoke}", "--out", "{tmp}/o", "--device", "cpu", "--gpus", "0"], "--gpus given with --device cpu"),
        (["{smoke}", "--out", "{tmp}/o", "--stages", "tiling"], "the algorithm stage cannot be skipped"),
        (["{smoke}", "--out", "{tmp}/o", "--stages", "algorithm,fusion"], "unknown stage(s) ['fusion']"),
        (["{smoke}", "--out", "{tmp}/o", "--model", "gpt-4o"], "unknown model 'gpt-4o'"),
        (["{smoke}", "--out", "{tmp}/o", "--ray-address", "auto"], "--ray-address needs --backend ray"),
        (["{smoke}", "--out", "{tmp}/o", "--time-box", "45"], "--time-box 45 leaves no time to run a task"),
        (["{repo}/evals/metrics.py", "--out", "{tmp}/o"], "not a KernelBench-format task"),
        (["{smoke}", "--out", "{tmp}/o", "--no-such-flag"], "No such option: --no-such-flag"),
        (["{smoke}"], "Missing option '--out'"),
    ],
)
def test_bad_input_exits_2_without_traceback(tmp_path: Path, args: list[str], expect: str) -> None:
    argv = [a.format(tmp=tmp_path, smoke=SMOKE, repo=REPO) for a in args]
    res = _egg_eval(*argv)
    assert res.returncode == 2, (res.returncode, res.stdout, res.stderr)
    err = res.stderr
    assert "Traceback" not in err + res.stdout
    assert expect in err, err
    # Our own messages are exactly one line; click's usage errors keep its usage header + box.
    if not expect[0].isupper():
        assert len(err.strip().splitlines()) == 1, err
    # Nothing ran: no output directory or results for a rejected invocation.
    assert not (tmp_path / "o" / "results.jsonl").exists()


def test_existing_results_need_resume(tmp_path: Path) -> None:
    out = tmp_path / "o"
    out.mkdir()
    (out / "results.jsonl").write_text('{"task": "smoke__s01_elementwise_chain", "verified": true}\n')
    res = _egg_eval(str(SMOKE), "--out", str(out), "--device", "cpu")
    assert res.returncode == 2 and "pass --resume" in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1 and "Traceback" not in res.stderr
