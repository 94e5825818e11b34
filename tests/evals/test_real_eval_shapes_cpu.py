"""`egg eval --shapes ragged` end to end with the REAL `egg optimize` (built-in expert model, CPU
interpreter): two small corpus tasks, `--stages algorithm --seeds 1`. Their sizes are under the
CPU shrinking budget, so ragged is the rule applied to the file's own sizes."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from eval_helpers import REPO

from tools.sizes import ragged_value

pytestmark = pytest.mark.slow

CORPUS = REPO / "tests" / "corpus" / "tasks"
# the files' sizes, and the ragged rule's: 32 -> 23, 256 -> 191; 16 -> 11, 96 -> 71
FILE = {"relu": {"BATCH": 32, "DIM": 256}, "softmax": {"BATCH": 16, "DIM": 96}}
WANT = {"relu": {"BATCH": 23, "DIM": 191}, "softmax": {"BATCH": 11, "DIM": 71}}


def test_eval_ragged_runs_every_task_at_ragged_sizes(tmp_path: Path) -> None:
    suite = tmp_path / "shapes"
    suite.mkdir()
    for stem in WANT:
        shutil.copy(CORPUS / f"{stem}.py", suite / f"{stem}.py")
    out = tmp_path / "ev"
    env = {**os.environ, "EGG_HOME": str(tmp_path / "home"), "PYTHONPATH": str(REPO)}
    env.pop("EGG_SEEDS", None)
    r = subprocess.run(
        [sys.executable, "-m", "graph.cli", "eval", str(suite), "--out", str(out), "--device", "cpu",
         "--stages", "algorithm", "--seeds", "1", "--workers", "2", "--shapes", "ragged", "--json"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    summary = json.loads(r.stdout)
    rows = {row["task"].split("__")[-1]: row for row in summary["rows"]}
    assert set(rows) == set(WANT)
    for stem, want in WANT.items():
        row = rows[stem]
        assert row["verified"], row
        assert row["shapes"] == "ragged" and row["shapes_used"] == "ragged"
        assert row["sizes_used"] == want
        assert want == {k: ragged_value(v) for k, v in FILE[stem].items()}
        rep = json.loads((out / "tasks" / f"shapes__{stem}" / "report.json").read_text())
        # every trial of the check at the ragged sizes (the second shape below them)
        trials = [t["sizes"] for t in rep["check"]["shapes_checked"] if t["trial"] != "second-shape"]
        assert trials and all(t == want for t in trials)
    manifest = json.loads((out / "eval.json").read_text())
    assert manifest["config"]["shapes"] == "ragged"
    assert {k.split("__")[-1]: v["sizes_used"] for k, v in manifest["tasks"].items()} == WANT
    md = (out / "report.md").read_text()
    assert "- shapes: ragged" in md and "not ragged" not in md
    # the same directory cannot be resumed at other sizes
    again = subprocess.run(
        [sys.executable, "-m", "graph.cli", "eval", str(suite), "--out", str(out), "--device", "cpu", "--resume"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert again.returncode == 2 and "--shapes" in again.stderr and "new --out" in again.stderr, again.stderr
