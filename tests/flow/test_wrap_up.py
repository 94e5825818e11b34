"""What a run stopped by SIGTERM reports (graph.cli.wrap_up_values): its best kernel only when the
full check accepted it and, on a GPU, its stage measured it; the report says the final benchmark
did not run. The signal path itself runs in tests/flow/test_cli.py and tests/evals/test_runner.py."""

import os
from pathlib import Path

from graph.cli import WRAP_UP_HALT, wrap_up_values
from graph.records import BestKernel, Candidate, CheckReport, TaskSpec, TimingReport
from graph.report import build_report


def _values(device: str, accepted: bool = True, measured: bool | None = True) -> dict:
    timing = None
    if measured is not None:
        timing = TimingReport(
            measured=measured,
            candidate_ms=1.0 if measured else None,
            eager_ms=2.0 if measured else None,
            compile_ms=1.5 if measured else None,
            reason=None if measured else "not timed on cpu",
        )
    best = BestKernel(
        candidate=Candidate(id="k", source="src", stage="algorithm", origin="seed:0"),
        check=CheckReport(accepted=accepted, reasons=[] if accepted else ["mismatch: x"]),
        timing=timing,
    )
    task = TaskSpec(path="t.py", name="t", source="", device=device)
    return {"task": task, "best": best, "status": "running", "settings": {"device": device}}


def test_gpu_run_with_a_measured_best_is_verified_with_its_stage_timing():
    rep = build_report(wrap_up_values(_values("cuda")), thread_id="t")
    assert rep["verified"] and rep["halt"] == WRAP_UP_HALT
    assert rep["timing"]["candidate_ms"] == 1.0 and rep["speedup_vs_eager"] == 2.0
    assert rep["timing"]["timed_by"].startswith("stage") and WRAP_UP_HALT in rep["timing"]["timed_by"]


def test_gpu_run_without_a_measured_best_has_no_kernel():
    for values in (_values("cuda", measured=False), _values("cuda", measured=None)):
        rep = build_report(wrap_up_values(values), thread_id="t")
        assert not rep["verified"] and rep["status"] == "no_kernel" and rep["timing"] is None


def test_unaccepted_or_missing_best_has_no_kernel():
    rep = build_report(wrap_up_values(_values("cpu", accepted=False)), thread_id="t")
    assert not rep["verified"]
    values = _values("cpu")
    values["best"] = None
    rep = build_report(wrap_up_values(values), thread_id="t")
    assert not rep["verified"] and rep["failure"] == WRAP_UP_HALT


def test_cpu_run_is_verified_untimed_as_finalize_would_be():
    rep = build_report(wrap_up_values(_values("cpu", measured=False)), thread_id="t")
    assert rep["verified"] and rep["timing"] is None and rep["timing_note"] == "not timed on cpu"


SLOW_GRAPH = """
import os, sys, time
from typing import TypedDict
from langgraph.graph import END, START, StateGraph
from graph.cli import _wrap_up_on_sigterm

class S(TypedDict, total=False):
    a: int
    b: int

def slow(key):
    def node(state):
        # one write per line: two threads' print() calls interleave their words and newlines
        sys.stdout.write(f"started {key}\\n")
        sys.stdout.flush()
        time.sleep(120)  # a GPU job waiting for memory, say
        return {key: 1}
    return node

g = StateGraph(S)
for key in ("a", "b"):  # two branches: LangGraph runs them on its executor's threads
    g.add_node(key, slow(key))
    g.add_edge(START, key)
    g.add_edge(key, END)

def wrap_up():
    print("wrapped up", flush=True)
    os._exit(0)

with _wrap_up_on_sigterm(wrap_up):
    g.compile().invoke({})
print("graph ended", flush=True)
sys.exit(3)
"""


def test_sigterm_wraps_up_without_waiting_for_nodes_in_flight(tmp_path):
    """The wrap-up must not wait for the graph's nodes: a handler that raised into the main thread
    would sit in LangGraph's executor until every node in flight returned (here 120 s), and the
    eval would kill the run with nothing written."""
    import signal
    import subprocess
    import sys
    import time

    script = tmp_path / "slow_graph.py"
    script.write_text(SLOW_GRAPH)
    root = Path(__file__).resolve().parents[2]
    proc = subprocess.Popen(
        [sys.executable, str(script)], cwd=root, stdout=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONPATH": str(root)},
    )  # fmt: skip
    try:
        started = [proc.stdout.readline(), proc.stdout.readline()]
        assert all(line.startswith("started") for line in started), started
        sent = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 0 and out.strip() == "wrapped up"
    assert time.monotonic() - sent < 10
