"""A real `langgraph dev` server (offline) serving the graph; one run driven through langgraph_sdk."""

import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# A short run: the algorithm stage with one seed, settings as the run's context (Studio's form).
SOFTMAX_RUN = {
    "input": {"task_path": str(ROOT / "examples" / "softmax.py")},
    "context": {"device": "cpu", "seeds": 1, "stages": ["algorithm"], "refine_budget": 0},
    "config": {"recursion_limit": 200},
}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("studio")
    port = _free_port()
    env = {**os.environ, "LANGGRAPH_CLI_NO_ANALYTICS": "1", "EGG_HOME": str(tmp_path / "egg")}
    log = open(tmp_path / "server.log", "w")
    cli = Path(sys.executable).parent / "langgraph"
    proc = subprocess.Popen(
        [
            str(cli),
            "dev",
            "--port",
            str(port),
            "--no-browser",
            "--no-reload",
            "--config",
            "langgraph.json",
            "--n-jobs-per-worker",
            "4",
        ],  # fmt: skip
        cwd=ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.time() + 120
    while time.time() < deadline:
        if proc.poll() is not None:
            raise AssertionError("langgraph dev exited:\n" + (tmp_path / "server.log").read_text()[-3000:])
        try:
            with urllib.request.urlopen(url + "/ok", timeout=2) as r:
                if r.status == 200:
                    break
        except OSError:
            time.sleep(0.5)
    else:
        raise AssertionError(
            "langgraph dev did not come up:\n" + (tmp_path / "server.log").read_text()[-3000:]
        )
    yield url
    os.killpg(proc.pid, 15)
    proc.wait(timeout=30)


def test_langgraph_dev_serves_the_schemas(server):
    """Studio builds its forms from these: the input form from the input schema, the settings form
    from the context schema."""
    from langgraph_sdk import get_sync_client

    client = get_sync_client(url=server)
    (assistant,) = client.assistants.search(graph_id="egg")
    schemas = client.assistants.get_schemas(assistant["assistant_id"])
    inp, out, ctx = schemas["input_schema"], schemas["output_schema"], schemas["context_schema"]
    assert inp and out and ctx, {k: bool(v) for k, v in schemas.items()}
    assert {"task", "task_path", "out_dir"} <= set(inp["properties"])
    assert {"status", "best", "decisions", "failure"} <= set(out["properties"])
    assert {"device", "seeds", "stages", "tune_width", "code_model"} <= set(ctx["properties"])


def test_langgraph_dev_runs_the_graph(server):
    from langgraph_sdk import get_sync_client

    client = get_sync_client(url=server)
    assistants = client.assistants.search(graph_id="egg")
    assert assistants, "graph `egg` is not registered"
    thread = client.threads.create()
    final = client.runs.wait(thread["thread_id"], "egg", **SOFTMAX_RUN)
    assert final["status"] == "verified", final.get("failure")
    assert final["settings"]["seeds"] == 1 and final["settings"]["stages"] == ["algorithm"]
    assert final["decisions"][0]["stage"] == "algorithm" and final["decisions"][0]["outcome"] == "improved"
    history = client.threads.get_history(thread["thread_id"], limit=50)
    nexts = [tuple(h["next"]) for h in history]
    assert ("algorithm",) in nexts and ("finalize",) in nexts


def test_langgraph_dev_runs_submitted_runs_concurrently(server):
    """Four runs submitted at once (four threads) run side by side: each one's first checkpoint is
    written before any of them has finished."""
    from datetime import datetime

    from langgraph_sdk import get_sync_client

    client = get_sync_client(url=server)
    runs = []
    for _ in range(4):
        thread = client.threads.create()
        run = client.runs.create(thread["thread_id"], "egg", **SOFTMAX_RUN)
        runs.append((thread["thread_id"], run["run_id"]))
    spans = []
    for tid, rid in runs:
        client.runs.join(tid, rid)
        assert client.runs.get(tid, rid)["status"] == "success"
        state = client.threads.get_state(tid)
        assert state["values"]["status"] == "verified", state["values"].get("failure")
        stamps = sorted(
            datetime.fromisoformat(h["created_at"]) for h in client.threads.get_history(tid, limit=100)
        )
        spans.append((stamps[0], stamps[-1]))
    latest_start = max(s for s, _ in spans)
    earliest_end = min(e for _, e in spans)
    assert latest_start < earliest_end, f"the runs did not overlap: {spans}"
