"""Size constants read from a task's text (tools/sizes.py, no torch), `--size NAME=VALUE`, and the
ragged rule shared by the checker's second-shape trial and `--shapes ragged` (chosen in the
describe job, where the task's code runs)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tools.protocol import Job
from tools.sizes import int_constants, parse_size_args, ragged_value, second_shape_options

ROOT = Path(__file__).resolve().parents[2]
RELU = (ROOT / "tests" / "corpus" / "tasks" / "relu.py").read_text()

TASK = """
import torch
import torch.nn as nn

batch_size = 16
dim = 64
kernel = 3
shape = (32, 48)
M = 16 * 4


class Model(nn.Module):
    def forward(self, x):
        return x * 2


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
"""


def test_ragged_rule_is_the_checkers():
    from tools.worker import check

    assert check.second_shape_options is second_shape_options  # one rule, imported by the checker
    # v -> v - v//4 - 1, one less again on a power of two, constants < 8 left alone
    assert [ragged_value(v) for v in (8, 16, 32, 64, 100, 256, 4096)] == [5, 11, 23, 47, 74, 191, 3071]
    opts = second_shape_options({"B": 16, "D": 256, "K": 3})
    assert opts == [
        {"B": 11, "D": 191, "K": 3},  # all at once first
        {"B": 16, "D": 191, "K": 3},  # then one at a time, largest first
        {"B": 11, "D": 256, "K": 3},
    ]
    assert second_shape_options({"K": 3, "S": 7}) == []


def test_constants_are_read_without_torch():
    assert int_constants(TASK) == {
        "batch_size": 16, "dim": 64, "kernel": 3, "shape[0]": 32, "shape[1]": 48, "M": 64,
    }  # fmt: skip
    code = "import sys, tools.sizes, graph.cli, evals.runner; print([m for m in ('torch', 'triton') if m in sys.modules])"
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert r.stdout.strip() == "[]", r.stdout + r.stderr


def test_parse_size_args():
    assert parse_size_args([], TASK) == {}
    assert parse_size_args(["batch_size=24", " dim = 100 ", "shape[1]=40"], TASK) == {
        "batch_size": 24, "dim": 100, "shape[1]": 40,
    }  # fmt: skip
    assert parse_size_args(["dim=100", "dim=100"], TASK) == {"dim": 100}
    for arg, msg in (
        ("dim", "must be NAME=VALUE"),
        ("=5", "must be NAME=VALUE"),
        ("dim=", "must be NAME=VALUE"),
        ("nope=5", "'nope' is not a module-level int constant of the task"),
        ("Model=5", "is not a module-level int constant"),
        ("dim=1.5", "must be a positive integer, not '1.5'"),
        ("dim=abc", "must be a positive integer"),
        ("dim=0", "must be a positive integer, not 0"),
        ("dim=-3", "must be a positive integer, not -3"),
    ):
        with pytest.raises(ValueError, match=msg.replace("(", r"\(").replace("[", r"\[")):
            parse_size_args([arg], TASK)
    with pytest.raises(ValueError, match="its constants: M, batch_size, dim"):
        parse_size_args(["nope=5"], TASK)
    with pytest.raises(ValueError, match="given twice"):
        parse_size_args(["dim=100", "dim=90"], TASK)


def _describe(source: str, overrides: dict[str, int] | None = None, **options):
    from tools.worker.describe import run_describe

    job = Job(
        kind="describe", task_path="t.py", task_source=source, size_overrides=overrides or {}, options=options
    )
    return run_describe(job)


def test_ragged_describe_takes_the_first_set_the_task_runs_with():
    d = _describe(RELU, shrink=False, shapes="ragged")
    assert (
        d["sizes_used"] == {"BATCH": 23, "DIM": 191} and d["shapes"] == "ragged" and d["shapes_note"] is None
    )
    assert d["inputs"][0]["shape"] == [23, 191]
    # a task that rejects DIM changed (it must stay a multiple of 64): all at once fails, DIM
    # alone fails, BATCH alone runs
    picky = RELU.replace("return torch.relu(x)", "assert x.shape[1] % 64 == 0\n        return torch.relu(x)")
    d = _describe(picky, shrink=False, shapes="ragged")
    assert d["sizes_used"] == {"BATCH": 23, "DIM": 256} and d["shapes"] == "ragged"
    # as written without the option
    assert _describe(RELU, shrink=False)["sizes_used"] == {"BATCH": 32, "DIM": 256}


def test_ragged_describe_runs_as_written_when_no_set_runs():
    stiff = RELU.replace("return torch.relu(x)", "assert x.shape == (32, 256)\n        return torch.relu(x)")
    d = _describe(stiff, shrink=False, shapes="ragged")
    assert d["sizes_used"] == {"BATCH": 32, "DIM": 256} and d["shapes"] == "as-written"
    assert "none of the 3 ragged size set(s)" in d["shapes_note"]
    tiny = "import torch\nK = 3\nclass Model(torch.nn.Module):\n    def forward(self, x):\n        return x + 1\n"
    tiny += "def get_inputs():\n    return [torch.randn(K, K)]\ndef get_init_inputs():\n    return []\n"
    d = _describe(tiny, shrink=False, shapes="ragged")
    assert d["shapes"] == "as-written" and "no int size constant >= 8" in d["shapes_note"]


def test_user_sizes_then_shrink_then_ragged():
    # the user's sizes are where the CPU shrinking starts, and ragged applies to the shrunk sizes
    big = RELU.replace("BATCH = 32", "BATCH = 4").replace("DIM = 256", "DIM = 8")
    d = _describe(big, {"DIM": 1 << 20}, shrink=True)
    assert d["sizes_used"]["BATCH"] == 4 and 8 < d["sizes_used"]["DIM"] < 1 << 20, d["sizes_used"]
    shrunk = d["sizes_used"]["DIM"]
    d = _describe(big, {"DIM": 1 << 20}, shrink=True, shapes="ragged")
    assert d["sizes_used"] == {"BATCH": 4, "DIM": ragged_value(shrunk)} and d["shapes"] == "ragged"
    # user sizes that need no shrinking are used as given
    d = _describe(RELU, {"DIM": 100, "BATCH": 7}, shrink=True)
    assert d["sizes_used"] == {"BATCH": 7, "DIM": 100}


def test_toolbox_asks_the_worker_for_ragged_shapes(tmp_path, monkeypatch):
    from graph.records import TaskSpec
    from tools.protocol import JobResult
    from tools.toolbox import Toolbox

    jobs: list[Job] = []
    payload = {
        "name": "t", "source": RELU, "inputs": [], "outputs": [], "constants": {"BATCH": 32, "DIM": 256},
        "sizes_used": {"BATCH": 23, "DIM": 191}, "shapes": "ragged", "device": "cuda", "check_peak_bytes": 1e6,
    }  # fmt: skip

    def fake_run(job):
        jobs.append(job)
        return JobResult(kind=job.kind, ok=True, payload=payload)

    tb = Toolbox(egg_home=str(tmp_path))
    monkeypatch.setattr(tb, "_run", fake_run)
    task = TaskSpec(path="t.py", name="t", source=RELU, device="cuda", shapes="ragged")
    desc = tb.describe(task, shrink=False)
    assert jobs[0].options["shapes"] == "ragged" and desc.shapes == "ragged"
    assert desc.size_overrides() == {"BATCH": 23, "DIM": 191}
    # the memory estimate is kept for the sizes the run goes on with
    ran = task.model_copy(update={"size_overrides": desc.size_overrides()})
    assert tb._job("check", ran).options["peak_bytes"] == 1e6
    tb.describe(task.model_copy(update={"shapes": "as-written"}), shrink=False)
    assert "shapes" not in jobs[1].options
