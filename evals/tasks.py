"""Task discovery for `egg eval`: which files to run, their ids, and their header metadata.

This module reads task files as text only; it never imports torch nor executes a task
(the agent process must not run user code: tasks run inside `egg optimize` subprocesses).
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path

_HEADER_RE = re.compile(r"^#\s*(family|kind)\s*:\s*(\S.*?)\s*$", re.IGNORECASE)
# A suite may name its level in the header ("# level: 2"); KernelBench puts it in the path.
_LEVEL_HEADER_RE = re.compile(r"^#\s*level\s*:\s*(\S+)\s*$", re.IGNORECASE)
_LEVEL_DIR_RE = re.compile(r"^level[_-]?(\d+)$", re.IGNORECASE)
_ID_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]+")
# KernelBench-format marker: a file is a task only if it defines the reference module.
_MODEL_RE = re.compile(r"^class\s+Model\s*\(", re.MULTILINE)
_HEADER_LINES = 12


class TaskDiscoveryError(Exception):
    """A path given to `egg eval` does not exist or holds no task (bad input, exit 2)."""


@dataclass(frozen=True)
class TaskEntry:
    id: str  # unique within one eval; used as the directory name under DIR/tasks/
    path: str  # absolute path
    name: str  # file stem
    level: str  # the level metrics group by (see task_level): "level1", "level2", ..., else the suite

    family: str | None  # from the "# family:" header comment, None when absent
    kind: str | None  # "single-op" | "fused-chain" from "# kind:", None when absent
    description: str | None  # first header comment line that is not family/kind


def parse_header(text: str) -> tuple[str | None, str | None, str | None]:
    """(family, kind, description) from the leading comment block of a task file."""
    family = kind = desc = None
    for line in text.splitlines()[:_HEADER_LINES]:
        s = line.strip()
        if not s:
            continue
        if not s.startswith("#"):
            break  # header comments end at the first code line
        m = _HEADER_RE.match(s)
        if m:
            if m.group(1).lower() == "family":
                family = m.group(2)
            else:
                kind = m.group(2)
        elif desc is None and not s.startswith("#!") and "coding" not in s:
            desc = s.lstrip("#").strip() or None
    return family, kind, desc


def task_level(path: Path, text: str) -> str:
    """The group a task's metrics are reported under.

    A "# level: N" header comment wins (a suite's own metadata); else the parent directory, with
    KernelBench's "level1" / "level_1" spelled "level1" (our suites: "egg", "smoke")."""
    for line in text.splitlines()[:_HEADER_LINES]:
        s = line.strip()
        if s and not s.startswith("#"):
            break
        if m := _LEVEL_HEADER_RE.match(s):
            v = m.group(1)
            return f"level{v}" if v.isdigit() else v
    m = _LEVEL_DIR_RE.match(path.parent.name)
    return f"level{int(m.group(1))}" if m else path.parent.name


def _is_task_file(p: Path) -> bool:
    if p.suffix != ".py" or p.name.startswith(("_", ".")):
        return False
    try:
        return bool(_MODEL_RE.search(p.read_text(encoding="utf-8", errors="replace")))
    except OSError:
        return False


def _task_id(level: str, stem: str) -> str:
    return _ID_UNSAFE.sub("_", f"{level}__{stem}" if level else stem)


def discover(paths: list[str]) -> list[TaskEntry]:
    """Expand files and directories (recursively) into task entries, in a stable order.

    Files named explicitly must be tasks; in directories, non-task .py files (helpers,
    __init__.py) are skipped. Duplicate files are listed once. Raises TaskDiscoveryError
    for a missing path, an explicit non-task file, or when nothing is found.
    """
    files: list[Path] = []
    for raw in paths:
        p = Path(raw).expanduser()
        if not p.exists():
            raise TaskDiscoveryError(f"no such file or directory: {raw}")
        if p.is_dir():
            files.extend(sorted(f for f in p.rglob("*.py") if _is_task_file(f)))
        elif _is_task_file(p):
            files.append(p)
        else:
            raise TaskDiscoveryError(f"not a KernelBench-format task (no `class Model`): {raw}")
    seen: set[Path] = set()
    entries: list[TaskEntry] = []
    used_ids: set[str] = set()
    for f in files:
        f = f.resolve()
        if f in seen:
            continue
        seen.add(f)
        text = f.read_text(encoding="utf-8", errors="replace")
        family, kind, desc = parse_header(text)
        # Ids keep the parent directory (stable across versions, so --resume finds old rows).
        tid = _task_id(f.parent.name, f.stem)
        if tid in used_ids:
            # Same level/stem from two trees: disambiguate by path so ids stay stable on resume.
            tid = f"{tid}_{hashlib.sha1(str(f).encode()).hexdigest()[:8]}"
        used_ids.add(tid)
        entries.append(TaskEntry(tid, str(f), f.stem, task_level(f, text), family, kind, desc))
    if not entries:
        raise TaskDiscoveryError(f"no KernelBench-format task files found under: {' '.join(paths)}")
    return entries
