"""results.jsonl: one row per task run, appended durably (the runner writes it, reports read it)."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import Any


class ResultsFile:
    """Append-only results.jsonl; every row is durable (fsync) before the next task is counted."""

    def __init__(self, path: Path):
        self.path = path
        self._lock = threading.Lock()

    def load(self) -> list[dict[str, Any]]:
        """Complete rows; a torn last line (killed mid-write) is dropped from the file too."""
        if not self.path.exists():
            return []
        data = self.path.read_bytes()
        rows: list[dict[str, Any]] = []
        good = 0
        for line in data.splitlines(keepends=True):
            if not line.endswith(b"\n"):
                break
            try:
                row = json.loads(line)
            except ValueError:
                break
            if isinstance(row, dict) and "task" in row:
                rows.append(row)
            good += len(line)
        if good != len(data):
            with open(self.path, "r+b") as f:
                f.truncate(good)
                f.flush()
                os.fsync(f.fileno())
        return rows

    def append(self, row: dict[str, Any]) -> None:
        line = json.dumps(row, sort_keys=True) + "\n"
        with self._lock, open(self.path, "a", encoding="utf-8") as f:
            f.write(line)
            f.flush()
            os.fsync(f.fileno())
