"""--backend ray on a local Ray instance gives the same rows as the local backend."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from eval_helpers import FAKE_CMD, SMOKE, invocations

from evals.runner import eval_command

pytest.importorskip("ray")

# Fields that legitimately differ between two runs of the same tasks.
VOLATILE = {"eval_id", "thread_id", "finished_at", "wall_s", "backend", "report_path"}


def _rows(out: Path) -> dict[str, dict]:
    rows = [json.loads(x) for x in (out / "results.jsonl").read_text().splitlines()]
    return {r["task"]: {k: v for k, v in r.items() if k not in VOLATILE} for r in rows}


def test_ray_matches_local(tmp_path: Path, fake_env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_OPT_TIMING", "1")
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")
    local, ray_out = tmp_path / "local", tmp_path / "ray"
    assert eval_command([str(SMOKE)], out=str(local), device="cpu", workers=2, optimize_cmd=FAKE_CMD) == 0
    assert eval_command([str(SMOKE)], out=str(ray_out), device="cpu", workers=2, backend="ray",
                        optimize_cmd=FAKE_CMD) == 0  # fmt: skip
    a, b = _rows(local), _rows(ray_out)
    assert len(a) == 5 and a == b
    # Ray tasks also ran with GPUs hidden (CPU device), one invocation per task per backend.
    inv = invocations(fake_env)
    assert len(inv) == 10 and {cvd for _, cvd in inv} == {""}
    assert json.loads((ray_out / "results.jsonl").read_text().splitlines()[0])["backend"] == "ray"
    assert (ray_out / "report.md").read_text().count("| smoke__") == 5


def test_ray_address_needs_ray_backend(tmp_path: Path) -> None:
    assert eval_command([str(SMOKE)], out=str(tmp_path), ray_address="auto", optimize_cmd=FAKE_CMD) == 2
