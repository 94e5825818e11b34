"""The expert's fixed kernels are real files (nodes/expert/kernels/): each runs directly under
the Triton interpreter against PyTorch, and the generator copies exactly the functions named."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from nodes.expert.kernelfiles import KERNEL_DIR, kernel_source

HERE = Path(__file__).resolve().parent


@pytest.fixture(scope="module")
def results() -> dict[str, str]:
    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": str(HERE.parents[1])}
    r = subprocess.run(
        [sys.executable, str(HERE / "kernel_file_checks.py")],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize(
    "check",
    [
        "check_tanh",
        "check_softplus",
        "check_red_mul",
        "check_bcast",
        "check_xent",
        "check_rowloss_sum",
        "check_cat",
        "check_tri",
        "check_rnn",
        "check_random",
        "check_pad",
        "check_layout",
    ],
)
def test_kernel_file_runs_under_interpreter(results, check):
    assert results.get(check) == "ok", results.get(check)


def test_kernel_source_copies_named_functions_only():
    text = kernel_source("ew.py", "_ew_tanh")
    assert text.startswith("@triton.jit\ndef _ew_tanh(") and "_ew_softplus" not in text
    assert "import" not in text
    with pytest.raises(KeyError):
        kernel_source("ew.py", "no_such_helper")


def test_every_kernel_file_is_functions_and_imports_only():
    import ast

    for path in KERNEL_DIR.glob("*.py"):
        for node in ast.parse(path.read_text()).body:
            ok = isinstance(node, (ast.FunctionDef, ast.Import, ast.ImportFrom)) or (
                isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
            )
            assert ok, f"{path.name}: top-level {type(node).__name__} at line {node.lineno}"
