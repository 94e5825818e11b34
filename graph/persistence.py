"""Checkpoint storage: an embedded SQLite file by default, or a shared PostgreSQL database.

`EGG_CHECKPOINT_URL` (or `--checkpoint-url`) picks the store:
- unset: `$EGG_HOME/checkpoints.sqlite`, one file that any number of egg processes on one machine
  share (WAL, a busy timeout, and retries with backoff when SQLite still says it is busy);
- `sqlite:///PATH`: that SQLite file;
- `postgresql://USER[:PASSWORD]@HOST[:PORT]/DB`: a PostgreSQL database through
  `langgraph-checkpoint-postgres`, which egg processes on several machines (an `egg eval` spread
  over Ray workers) can all reach.

Threads are found through the saver's own API (`list` with a metadata filter), never by reading
its tables. Each checkpoint's metadata carries the owner of the run that wrote it
(`egg_owner`: host, pid and process start), which is how `egg threads` tells a running thread
from one whose process is gone.
"""

from __future__ import annotations

import atexit
import inspect
import os
import random
import socket
import sqlite3
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlsplit, urlunsplit

from langgraph.checkpoint.base import BaseCheckpointSaver, CheckpointTuple
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from langgraph.checkpoint.sqlite import SqliteSaver
from pydantic import BaseModel

import graph.records as records

CHECKPOINT_URL_ENV = "EGG_CHECKPOINT_URL"
OWNER_KEY = "egg_owner"  # a `configurable` key: LangGraph copies it into every checkpoint's metadata

T = TypeVar("T")


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


def store_url(home: str | Path, url: str | None = None) -> str:
    """The store a command uses: an explicit URL, else `EGG_CHECKPOINT_URL`, else SQLite in the home."""
    url = url or os.environ.get(CHECKPOINT_URL_ENV) or ""
    return url or f"sqlite:///{checkpoint_path(home).resolve()}"


def is_postgres(url: str) -> bool:
    return urlsplit(url).scheme in ("postgres", "postgresql")


def redact(url: str) -> str:
    """The URL without its password, for messages and logs."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
    return urlunsplit(parts._replace(netloc=netloc))


def open_checkpointer(home: str | Path, url: str | None = None) -> BaseCheckpointSaver:
    """The checkpointer of the store `store_url(home, url)`, with its tables created."""
    url = store_url(home, url)
    if is_postgres(url):
        return _open_postgres(url)
    scheme = urlsplit(url).scheme
    if scheme != "sqlite":
        raise ValueError(
            f"unsupported checkpoint store {redact(url)!r}: use postgresql://... or sqlite:///PATH"
        )
    return _open_sqlite(Path(url[len("sqlite://") :]))


# ---------------------------------------------------------------------------------------------
# SQLite: one file shared by every egg process of a machine
# ---------------------------------------------------------------------------------------------

# SQLite answers "database is locked" even with a busy timeout in a few cases (a WAL file being
# recovered, a read transaction that must become a write one, the journal mode being set while
# another connection opens the file): such an operation is retried, with growing random waits.
_RETRY_WINDOW_S = 300.0


def _busy(e: sqlite3.OperationalError) -> bool:
    msg = str(e).lower()
    return "locked" in msg or "busy" in msg


def _retrying(conn: sqlite3.Connection, fn: Callable[[], T]) -> T:
    deadline = time.monotonic() + _RETRY_WINDOW_S
    delay = 0.02
    while True:
        try:
            return fn()
        except sqlite3.OperationalError as e:
            if not _busy(e) or time.monotonic() > deadline:
                raise
            if conn.in_transaction:
                conn.rollback()
            time.sleep(delay * (0.5 + random.random()))
            delay = min(delay * 2, 1.0)


class SharedSqliteSaver(SqliteSaver):
    """SqliteSaver for a file that several processes write at once: every operation is retried
    while SQLite reports the file busy (the saver's own lock keeps each attempt whole)."""

    def setup(self) -> None:
        _retrying(self.conn, super().setup)

    def get_tuple(self, config: Any) -> CheckpointTuple | None:
        return _retrying(self.conn, lambda: super(SharedSqliteSaver, self).get_tuple(config))

    def list(self, config: Any, **kw: Any) -> Iterator[CheckpointTuple]:
        # Read whole, so that a retry never repeats what a caller has already seen.
        yield from _retrying(self.conn, lambda: list(super(SharedSqliteSaver, self).list(config, **kw)))

    def put(self, config: Any, checkpoint: Any, metadata: Any, new_versions: Any) -> Any:
        return _retrying(
            self.conn, lambda: super(SharedSqliteSaver, self).put(config, checkpoint, metadata, new_versions)
        )

    def put_writes(self, config: Any, writes: Any, task_id: str, task_path: str = "") -> None:
        _retrying(
            self.conn, lambda: super(SharedSqliteSaver, self).put_writes(config, writes, task_id, task_path)
        )

    def delete_thread(self, thread_id: str) -> None:
        _retrying(self.conn, lambda: super(SharedSqliteSaver, self).delete_thread(thread_id))


def _open_sqlite(path: Path) -> SqliteSaver:
    path.parent.mkdir(parents=True, exist_ok=True)
    # timeout: wait for another process's write lock instead of failing at once; WAL: readers
    # proceed beside the writer.
    conn = sqlite3.connect(str(path), check_same_thread=False, timeout=60.0)
    _retrying(conn, lambda: conn.execute("PRAGMA journal_mode=WAL").fetchall())
    saver = SharedSqliteSaver(conn, serde=serde())
    saver.setup()
    return saver


# ---------------------------------------------------------------------------------------------
# PostgreSQL: one database shared by every egg process that can reach it
# ---------------------------------------------------------------------------------------------

_SETUP_LOCK = 0x45474753  # any fixed number: serialises the savers' table creation across processes


def _open_postgres(url: str) -> BaseCheckpointSaver:
    try:
        from langgraph.checkpoint.postgres import PostgresSaver
        from psycopg import Connection
        from psycopg.rows import dict_row
        from psycopg_pool import ConnectionPool
    except ImportError as e:  # pragma: no cover - a dependency of the package
        raise RuntimeError(f"a postgresql:// store needs langgraph-checkpoint-postgres: {e}") from None
    kwargs = {"autocommit": True, "prepare_threshold": 0, "row_factory": dict_row}
    # Several processes creating the tables at once race on the saver's migration table: one at a
    # time holds a database-wide advisory lock around setup. The others poll for it rather than
    # wait inside a statement: the migrations build indexes CONCURRENTLY, which waits for every
    # open transaction, a blocked lock request included (a deadlock).
    with Connection.connect(url, **kwargs) as conn:
        while not conn.execute("SELECT pg_try_advisory_lock(%s) AS ok", (_SETUP_LOCK,)).fetchone()["ok"]:
            time.sleep(0.05 + 0.2 * random.random())
        try:
            PostgresSaver(conn, serde=serde()).setup()
        finally:
            conn.execute("SELECT pg_advisory_unlock(%s)", (_SETUP_LOCK,))
    # A pool: the graph's parallel branches write from several threads at once.
    pool = ConnectionPool(url, min_size=1, max_size=4, kwargs=kwargs, open=True)
    atexit.register(pool.close)
    return PostgresSaver(pool, serde=serde())  # type: ignore[arg-type]


def close_checkpointer(saver: BaseCheckpointSaver) -> None:
    conn = getattr(saver, "conn", None)
    close = getattr(conn, "close", None)
    if close is not None:
        close()


# ---------------------------------------------------------------------------------------------
# Threads and their owners
# ---------------------------------------------------------------------------------------------


def thread_ids(saver: BaseCheckpointSaver) -> list[str]:
    """Every thread of the store, newest first: each run's first checkpoint is the one its input
    wrote (metadata source "input", top-level namespace)."""
    seen: dict[str, str] = {}
    for ck in saver.list(None, filter={"source": "input"}):
        conf = ck.config["configurable"]
        if conf.get("checkpoint_ns", ""):
            continue
        tid, cid = conf["thread_id"], conf["checkpoint_id"]
        if cid > seen.get(tid, ""):
            seen[tid] = cid
    return sorted(seen, key=lambda t: seen[t], reverse=True)


def thread_exists(saver: BaseCheckpointSaver, thread: str) -> bool:
    return saver.get_tuple({"configurable": {"thread_id": thread, "checkpoint_ns": ""}}) is not None


def _process_start(pid: int) -> str | None:
    """The process's start time in clock ticks since boot (tells a pid from its reuse), or None."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[19]


def current_owner() -> str:
    """`host:pid:start` of this process: recorded in every checkpoint the run writes."""
    pid = os.getpid()
    return f"{socket.gethostname()}:{pid}:{_process_start(pid) or '?'}"


def owner_alive(owner: str) -> bool | None:
    """Whether the owning process still runs: None when it runs on another host (unknowable here)."""
    host, _, rest = owner.partition(":")
    pid_text, _, start = rest.partition(":")
    if host != socket.gethostname() or not pid_text.isdigit():
        return None
    now = _process_start(int(pid_text))
    return now is not None and (start in ("", "?") or now == start)


@dataclass(frozen=True)
class Activity:
    owner: str | None  # host:pid:start of the process that wrote the newest checkpoint
    last_write: datetime | None  # when it was written (the run's heartbeat)


def last_activity(saver: BaseCheckpointSaver, thread: str) -> Activity:
    """The newest checkpoint of a thread in any namespace (a stage's steps write their own)."""
    for ck in saver.list({"configurable": {"thread_id": thread}}, limit=1):
        ts = ck.checkpoint.get("ts")
        when = datetime.fromisoformat(ts) if isinstance(ts, str) else None
        owner = ck.metadata.get(OWNER_KEY)
        return Activity(owner=owner if isinstance(owner, str) else None, last_write=when)
    return Activity(owner=None, last_write=None)


def liveness(activity: Activity, lease_s: float) -> str:
    """ "running" or "interrupted" for a thread that has not finished.

    On this host the owner's pid answers; for a run on another host (a shared PostgreSQL store)
    or one without an owner (the Python API), the newest checkpoint is the heartbeat: a run that
    wrote nothing for longer than `lease_s` is taken as gone.
    """
    alive = owner_alive(activity.owner) if activity.owner else None
    if alive is not None:
        return "running" if alive else "interrupted"
    if activity.last_write is None:
        return "interrupted"
    age = (datetime.now(timezone.utc) - activity.last_write).total_seconds()
    return "running" if age <= lease_s else "interrupted"
