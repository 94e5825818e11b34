"""Shared helpers for the eval tests (not named conftest: tests/conftest.py owns that module name)."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
SMOKE = REPO / "evals" / "suites" / "smoke"
FAKE_CMD = [sys.executable, str(HERE / "fake_optimize.py")]


def copy_tasks(dst: Path, names: dict[str, str]) -> Path:
    """Copy a smoke task to dst/<new stem>.py for each {new stem: smoke stem}."""
    dst.mkdir(parents=True, exist_ok=True)
    for new, old in names.items():
        shutil.copy(SMOKE / f"{old}.py", dst / f"{new}.py")
    return dst


def invocations(log: Path) -> list[tuple[str, str]]:
    if not log.exists():
        return []
    return [tuple(line.split(" ", 1)) for line in log.read_text().splitlines()]  # type: ignore[misc]
