"""A Python script run in a child process of its own (fresh torch/Triton state, an environment of
its own, a real CUDA context where the test has one), answering with one JSON line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def script_json(
    script: str, *, stdin: str | None = None, env: dict[str, str] | None = None, timeout: float = 300
) -> Any:
    """`python -c script` at the repository root (importable there, plus `env`): the last line it
    prints, read as JSON; the test fails with the end of its stderr when it exits non-zero."""
    proc = subprocess.run(
        [sys.executable, "-c", script],
        input=stdin,
        env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})},
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])
