"""The `egg` CLI on real subprocess tools (CPU, Triton interpreter) and the expert model."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def egg(*args: str, home: Path, timeout: int = 600) -> subprocess.CompletedProcess:
    env = {**os.environ, "EGG_HOME": str(home)}
    return subprocess.run(
        [sys.executable, "-m", "graph.cli", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_missing_task_is_bad_input_without_traceback(tmp_path):
    r = egg("optimize", str(tmp_path / "nope.py"), "--device", "cpu", home=tmp_path)
    assert r.returncode == 2
    assert "task file not found" in r.stderr and "Traceback" not in r.stderr + r.stdout


def test_task_without_model_is_bad_input(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("import torch\nN = 4\ndef get_inputs():\n    return [torch.randn(N)]\n")
    r = egg("optimize", str(bad), "--device", "cpu", "--out", str(tmp_path / "o"), home=tmp_path)
    assert r.returncode == 2, r.stdout + r.stderr
    assert "Model" in r.stderr and "Traceback" not in r.stderr + r.stdout


def test_bad_option_values_are_bad_input(tmp_path):
    r = egg(
        "optimize",
        str(ROOT / "examples" / "softmax.py"),
        "--device",
        "cpu",
        "--stages",
        "algorithm,bogus",
        home=tmp_path,
    )
    assert r.returncode == 2 and "unknown stage" in r.stderr
    r = egg("optimize", str(ROOT / "examples" / "softmax.py"), "--device", "tpu", home=tmp_path)
    assert r.returncode == 2
    for flag, value, msg in (
        ("--tune-width", "0", "tune_width must be >= 1"),
        ("--tune-budget", "-1", "tune_budget must be >= 0"),
    ):
        r = egg(
            "optimize", str(ROOT / "examples" / "softmax.py"), "--device", "cpu", flag, value, home=tmp_path
        )
        assert r.returncode == 2 and msg in r.stderr and "Traceback" not in r.stderr, r.stderr


@pytest.fixture(scope="module")
def cpu_run(tmp_path_factory):
    home = tmp_path_factory.mktemp("egg")
    out = home / "out"
    r = egg(
        "optimize",
        str(ROOT / "examples" / "softmax.py"),
        "--device",
        "cpu",
        "--seeds",
        "2",
        "--thread-id",
        "sm-cli",
        "--out",
        str(out),
        home=home,
    )
    return home, out, r


def test_optimize_cpu_end_to_end(cpu_run):
    home, out, r = cpu_run
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    report = json.loads((out / "report.json").read_text())
    assert report["verified"] is True and report["thread_id"] == "sm-cli"
    assert report["timing"] is None and "not measured" in report["timing_note"]
    assert report["speedup_vs_eager"] is None  # nothing is claimed without a GPU
    assert [s["stage"] for s in report["stages"]] == ["algorithm", "mapping", "tiling", "memory"]
    assert {"task", "device", "model", "usage", "speedup_vs_compile"} <= set(report)
    src = (out / "model_new.py").read_text()
    assert "@triton.jit" in src and "class ModelNew" in src


def test_threads_show_and_replay(cpu_run):
    home, out, r = cpu_run
    assert r.returncode == 0
    t = egg("threads", home=home)
    assert t.returncode == 0 and "sm-cli" in t.stdout
    s = egg("show", "sm-cli", home=home)
    assert s.returncode == 0 and "tiling" in s.stdout and "checkpoint id" in s.stdout
    rp = egg("replay", "sm-cli", "--out", str(home / "replay"), home=home)
    assert rp.returncode == 0, rp.stdout[-2000:] + rp.stderr[-2000:]
    first = json.loads((out / "report.json").read_text())
    again = json.loads((home / "replay" / "report.json").read_text())
    strip = lambda st: [{k: v for k, v in d.items()} for d in st]
    assert strip(again["stages"]) == strip(first["stages"])
    assert again["candidate_id"] == first["candidate_id"]
    missing = egg("show", "no-such-thread", home=home)
    assert missing.returncode == 2


def test_optimize_refuses_an_existing_thread_id(cpu_run):
    home, out, r = cpu_run
    assert r.returncode == 0
    again = egg(
        "optimize",
        str(ROOT / "examples" / "softmax.py"),
        "--device",
        "cpu",
        "--thread-id",
        "sm-cli",
        "--out",
        str(home / "again"),
        home=home,
    )
    assert again.returncode == 2 and "already exists" in again.stderr and "Traceback" not in again.stderr
