"""Checkpoint stores: the embedded SQLite file and a shared PostgreSQL database, the same tests
against both. Threads are listed through the saver's API; owners tell running from interrupted;
any number of processes write one store at once."""

import json
import os
import socket
import subprocess
import sys
import time
import uuid
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from fakes import FakeToolbox, ScriptedCode, scripted_models

from graph.context import Context
from graph.main import build_graph
from graph.persistence import (
    OWNER_KEY,
    Activity,
    current_owner,
    last_activity,
    liveness,
    open_checkpointer,
    owner_alive,
    redact,
    thread_exists,
    thread_ids,
)
from graph.records import TaskSpec
from nodes.deps import Deps

ROOT = Path(__file__).resolve().parents[2]
TASK = TaskSpec(path="t.py", name="t", source="class Model: pass\n")
SCRIPT = {
    ("algorithm", "seed"): ["# s0 ms=0.9", "# s1 ms=0.5"],
    ("algorithm", "refine"): ["# r ms=0.40"],
    ("mapping", "tune"): ["# m1 G=2 ms=0.30"],
    ("tiling", "tune"): ["# t1 B=64 ms=0.35"],
    ("memory", "tune"): ["# w W=8 ms=0.299"],
}


def _graph(saver):
    code = ScriptedCode(SCRIPT)
    deps = Deps(toolbox=FakeToolbox(), model_factory=lambda s, t: scripted_models(code))
    return build_graph(deps).compile(checkpointer=saver)


def _run(g, thread: str, owner: str | None = None):
    cfg = {"configurable": {"thread_id": thread, OWNER_KEY: owner or current_owner()}, "recursion_limit": 300}
    ctx = Context(device="cuda", seeds=2, tune_budget=1, tune_width=1)
    return g.invoke({"task": TASK}, cfg, context=ctx), cfg, ctx


def test_threads_are_listed_through_the_saver_and_replay_works(store_url, tmp_path):
    saver = open_checkpointer(tmp_path / "home", store_url)
    g = _graph(saver)
    names = [f"t{i}-{uuid.uuid4().hex[:6]}" for i in range(3)]
    outs = [_run(g, n)[0] for n in names]
    assert all(o["status"] == "verified" for o in outs)
    assert thread_ids(saver) == names[::-1]  # newest first, one entry per thread
    assert thread_exists(saver, names[0]) and not thread_exists(saver, "no-such-thread")
    act = last_activity(saver, names[0])
    assert act.owner == current_owner() and act.last_write is not None
    assert (datetime.now(timezone.utc) - act.last_write).total_seconds() < 120
    # a second process's view of the same store (a fresh saver) sees the same threads
    again = open_checkpointer(tmp_path / "elsewhere", store_url)
    assert thread_ids(again) == names[::-1]
    # replay from the tiling stage reproduces the decisions, on either store
    cfg = {"configurable": {"thread_id": names[1]}}
    start = next(s for s in g.get_state_history(cfg) if s.next == ("tiling",))
    replayed = g.invoke(
        None, start.config, context=Context(device="cuda", seeds=2, tune_budget=1, tune_width=1)
    )
    assert [d.model_dump() for d in replayed["decisions"]] == [d.model_dump() for d in outs[1]["decisions"]]


def test_owner_and_heartbeat_tell_running_from_interrupted():
    me = current_owner()
    assert owner_alive(me) is True
    host, pid, start = me.split(":")
    assert owner_alive(f"{host}:{pid}:{int(start) + 1}") is False  # the pid, reused by another process
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    assert owner_alive(f"{host}:{dead.pid}:?") is False
    now = datetime.now(timezone.utc)
    assert liveness(Activity(owner=me, last_write=now - timedelta(days=3)), lease_s=60) == "running"
    assert liveness(Activity(owner=f"{host}:{dead.pid}:1", last_write=now), lease_s=60) == "interrupted"
    other = "another-host-" + socket.gethostname()
    assert owner_alive(f"{other}:1:1") is None
    assert liveness(Activity(owner=f"{other}:1:1", last_write=now), lease_s=60) == "running"
    assert (
        liveness(Activity(owner=f"{other}:1:1", last_write=now - timedelta(seconds=120)), 60) == "interrupted"
    )
    assert liveness(Activity(owner=None, last_write=None), lease_s=60) == "interrupted"


def test_a_password_never_reaches_a_message():
    assert redact("postgresql://egg:s3cret@db:5432/egg") == "postgresql://egg:***@db:5432/egg"
    assert redact("postgresql://egg@db/egg") == "postgresql://egg@db/egg"


@pytest.mark.slow
def test_sixteen_processes_write_one_store_at_once(store_url, tmp_path):
    n = 16
    start_at = time.time() + 8.0  # every writer has imported and waits: they open and write together
    procs = []
    for i in range(n):
        procs.append(
            subprocess.Popen(
                [
                    sys.executable,
                    str(ROOT / "tests" / "store_writer.py"),
                    store_url,
                    f"w{i:02d}",
                    str(start_at),
                ],
                cwd=ROOT,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
    results = [(p.communicate(timeout=600), p.returncode) for p in procs]
    for (out, err), rc in results:
        assert rc == 0 and out.strip() == "verified", err[-2000:]
        assert "locked" not in err.lower() and "Traceback" not in err, err[-2000:]
    # and the command line lists them through the same store
    env = {**os.environ, "EGG_CHECKPOINT_URL": store_url}
    r = subprocess.run(
        [sys.executable, "-m", "graph.cli", "threads", "--json", "--home", str(tmp_path / "h")],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr[-2000:]
    rows = json.loads(r.stdout)
    assert sorted(row["thread"] for row in rows) == [f"w{i:02d}" for i in range(n)]
    assert {row["status"] for row in rows} == {"verified"}
