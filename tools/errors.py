"""Errors the toolbox raises. A kernel's own failure is never one of these: it is a report."""

from __future__ import annotations

from pathlib import Path


class BadTaskError(Exception):
    """The task file is not usable (missing names, forward fails, bad inputs): a one-line message."""


class ToolInfraError(Exception):
    """The tooling itself failed (worker could not start, result missing): not the kernel's fault."""


def read_task_source(path: str | Path) -> str:
    """A task file's text, read without running it; BadTaskError (one line) when it cannot be a
    task: missing, unreadable, NUL bytes, not UTF-8, a syntax error. What needs the task to run
    (`get_inputs()` returning None, an exit at import) is told by `describe`, in a sandbox worker."""
    p = Path(path)
    if not p.is_file():
        raise BadTaskError(f"task file not found: {path}")
    try:
        raw = p.read_bytes()
    except OSError as e:
        raise BadTaskError(f"cannot read the task file {path}: {e.strerror or e}") from None
    if b"\0" in raw:
        raise BadTaskError(f"the task file {path} contains NUL bytes: not a Python source file")
    try:
        source = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise BadTaskError(f"the task file {path} is not UTF-8 text (byte {e.start}: {e.reason})") from None
    try:
        compile(source, str(p), "exec", dont_inherit=True)  # parses only; nothing runs
    except SyntaxError as e:
        raise BadTaskError(f"syntax error in {path} line {e.lineno}: {e.msg}") from None
    return source
