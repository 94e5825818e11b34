"""Checkpoint storage: one SQLite file under the run-data directory, with the record types allowed."""

from __future__ import annotations

import inspect
import sqlite3
from pathlib import Path

from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from langgraph.checkpoint.sqlite import SqliteSaver
from pydantic import BaseModel

import graph.records as records


def serde() -> JsonPlusSerializer:
    """A serializer that knows our frozen records (so checkpoints load without warnings, and
    LangGraph's strict mode does not block them)."""
    allowed = [
        (records.__name__, name)
        for name, obj in vars(records).items()
        if inspect.isclass(obj) and issubclass(obj, BaseModel) and obj.__module__ == records.__name__
    ]
    return JsonPlusSerializer(allowed_msgpack_modules=allowed)


def checkpoint_path(home: str | Path) -> Path:
    return Path(home) / "checkpoints.sqlite"


def open_checkpointer(home: str | Path) -> SqliteSaver:
    path = checkpoint_path(home)
    path.parent.mkdir(parents=True, exist_ok=True)
    # Several egg processes (egg eval --workers N) share this file: wait for a writer's lock instead
    # of failing with "database is locked", and let readers proceed beside the writer (WAL).
    conn = sqlite3.connect(str(path), check_same_thread=False, timeout=120.0)
    conn.execute("PRAGMA journal_mode=WAL")
    saver = SqliteSaver(conn, serde=serde())
    saver.setup()
    return saver


def thread_ids(saver: SqliteSaver) -> list[str]:
    cur = saver.conn.execute(
        "SELECT thread_id, MAX(checkpoint_id) FROM checkpoints WHERE checkpoint_ns = '' GROUP BY thread_id "
        "ORDER BY MAX(checkpoint_id) DESC"
    )
    return [row[0] for row in cur.fetchall()]
