"""`egg optimize` end to end against the fake OpenAI-compatible server (real HTTP, CPU interpreter).

    OPENAI_BASE_URL=http://127.0.0.1:PORT/v1 OPENAI_API_KEY=test \
        python -m graph.cli optimize TASK --model openai:fake --device cpu --out DIR
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from llm_helpers import DATA, KERNEL_REPLY, KERNEL_SOURCE, FakeOpenAI

ROOT = Path(__file__).resolve().parents[2]
TASK = DATA / "scale_tanh.py"


def _egg(srv: FakeOpenAI, tmp: Path, *args: str, timeout: int = 600) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "OPENAI_BASE_URL": srv.base_url,
        "OPENAI_API_KEY": "test",
        "EGG_HOME": str(tmp / "home"),
    }
    env.pop("TRITON_INTERPRET", None)
    return subprocess.run(
        [sys.executable, "-m", "graph.cli", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def _optimize(srv: FakeOpenAI, tmp: Path, *extra: str) -> tuple[subprocess.CompletedProcess[str], dict]:
    out = tmp / "out"
    p = _egg(
        srv,
        tmp,
        "optimize",
        str(TASK),
        "--model",
        "openai:fake",
        "--device",
        "cpu",
        "--out",
        str(out),
        "--thread-id",
        "t1",
        *extra,
    )
    report = json.loads((out / "report.json").read_text()) if (out / "report.json").exists() else {}
    return p, report


@pytest.mark.slow
def test_cli_correct_kernel_reply_exits_0_with_the_verified_kernel(tmp_path: Path) -> None:
    with FakeOpenAI("fixed", reply=KERNEL_REPLY) as srv:
        p, report = _optimize(srv, tmp_path, "--seeds", "1", "--stages", "algorithm")
        assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
        assert report["verified"] is True and report["model"]["code"] == "openai:fake"
        assert (tmp_path / "out" / "model_new.py").read_text() == KERNEL_SOURCE
        assert report["usage"]["by_stage_role"]["algorithm/code"]["input_tokens"] > 0
        assert len(srv.requests) >= 1
    rec = tmp_path / "home" / "threads" / "t1" / "llm.jsonl"
    assert rec.exists() and "Bearer" not in rec.read_text()


def test_cli_always_refusing_model_exits_1_without_traceback(tmp_path: Path) -> None:
    with FakeOpenAI("refuse") as srv:
        p, report = _optimize(srv, tmp_path, "--seeds", "2")
    out = p.stdout + p.stderr
    assert p.returncode == 1, out[-3000:]
    assert "Traceback" not in out
    assert "no verified kernel" in out and report["verified"] is False
    assert "model_format" in (report["failure"] or "") or "usable" in (report["failure"] or "")
    assert not (tmp_path / "out" / "model_new.py").exists()


def test_cli_always_500_exits_1_naming_the_endpoint(tmp_path: Path) -> None:
    with FakeOpenAI("error500") as srv:
        p, report = _optimize(srv, tmp_path, "--seeds", "1")
        url = srv.base_url
    out = p.stdout + p.stderr
    assert p.returncode == 1, out[-3000:]
    assert "Traceback" not in out
    assert "last status 500" in (report["failure"] or "") and url in (report["failure"] or "")


@pytest.mark.slow
def test_cli_full_run_then_offline_replay_reproduces_decisions(tmp_path: Path) -> None:
    """All four stages (the tiling stage sweeps EGG_TUNABLES), then `egg replay --llm recorded` with the
    server stopped: the replayed stage sends byte-identical requests and reaches the same decision."""
    with FakeOpenAI("fixed", reply=KERNEL_REPLY) as srv:
        p, report = _optimize(srv, tmp_path, "--seeds", "2")
        assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    assert [d["stage"] for d in report["stages"]] == ["algorithm", "mapping", "tiling", "memory"]
    replay_out = tmp_path / "replay"
    with FakeOpenAI("error500") as dead:  # any network use during replay would now fail loudly
        p2 = _egg(dead, tmp_path, "replay", "t1", "--llm", "recorded", "--out", str(replay_out))
        assert dead.requests == []
    assert p2.returncode == 0, p2.stdout[-3000:] + p2.stderr[-3000:]
    # The re-run renders the very requests that were recorded: every reply is matched by hash.
    assert "replay request mismatch" not in p2.stdout + p2.stderr
    replayed = json.loads((replay_out / "report.json").read_text())
    key = lambda d: (d["stage"], d["outcome"], d["changed"])  # noqa: E731
    assert [key(d) for d in replayed["stages"]] == [key(d) for d in report["stages"]]
    assert (replay_out / "model_new.py").read_text() == KERNEL_SOURCE
