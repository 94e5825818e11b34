"""RunnerProcess.start/finish: a request sent ahead (the precompile, while the judge queues for
memory) is answered when the judge asks for its reply, one request at a time; a failed load is
reported the same way each time it is asked for, without importing the candidate again."""

from pathlib import Path

import pytest

pytest.importorskip("torch")

from tools.protocol import Job  # noqa: E402
from tools.worker.compile_job import run_compile, start_precompile  # noqa: E402
from tools.worker.judge import RunnerProcess  # noqa: E402

CORPUS = Path(__file__).resolve().parents[1] / "corpus"


def _job(candidate: str) -> Job:
    return Job(
        kind="compile",
        task_path="relu.py",
        task_source=(CORPUS / "tasks" / "relu.py").read_text(),
        candidate_source=candidate,
        size_overrides={"BATCH": 48},
    )


def test_a_request_sent_ahead_is_answered_when_its_reply_is_read():
    job = _job((CORPUS / "good" / "relu_good.py").read_text())
    with RunnerProcess(job, timeout_s=120) as r:
        assert r.load(job) is None
        r.start("precompile", overrides={"BATCH": 48})
        with pytest.raises(RuntimeError, match="unread"):
            r.request("load")  # a second request before the first's reply: refused here
        with pytest.raises(RuntimeError, match="no `build`"):
            r.finish("build")
        rep = r.finish("precompile")
        assert rep["ok"] and rep["op"] == "precompile" and rep["kernels"] == 1
        assert r.pending is None and r.seconds["precompile"] >= 0
        # the channel is in step again: the next request gets its own reply
        assert r.request("release")["op"] == "release"
        # a reply's own parts are kept per request as "<op>.<part>" (the check reports them)
        assert r.request("build", overrides={"BATCH": 48}, weight_seed=1)["ok"]
        assert {"build", "build.cpu", "build.to_device"} <= set(r.seconds)


def test_start_precompile_is_for_gpu_jobs_only_and_run_compile_reads_its_reply(monkeypatch):
    job = _job((CORPUS / "good" / "relu_good.py").read_text())
    with RunnerProcess(job, timeout_s=120) as r:
        assert start_precompile(job, r) is False and r.pending is None  # a CPU job: no warm-up
        # run_compile reads a reply sent ahead, whatever the device (here: the CPU runner)
        assert r.load(job) is None
        r.start("precompile", overrides={"BATCH": 48})
        rep = run_compile(job, r)
        assert rep["ok"], rep
        assert rep["precompiled"]["kernels"] == 1 and "precompile_runner" in rep["phases"]
        assert r.pending is None


def test_a_failed_load_is_the_same_failure_when_asked_again():
    job = _job((CORPUS / "good" / "relu_good.py").read_text() + "\nraise ValueError('broken at import')\n")
    with RunnerProcess(job, timeout_s=120) as r:
        first = r.load(job)
        assert first is not None and "broken at import" in first["error"]
        loads = r.seconds.get("load")
        assert r.load(job) is first and r.seconds.get("load") == loads  # not imported again
        rep = run_compile(job, r)
        assert rep["ok"] is False and "broken at import" in rep["error"]


def test_a_runners_parts_of_its_seconds_are_kept_only_as_plain_names_and_numbers(monkeypatch):
    """The parts are the runner's claim (a hostile candidate's process may forge them): they
    reach the job's phases and its log line, so odd names, non-numbers and floods are dropped."""
    job = _job((CORPUS / "good" / "relu_good.py").read_text())
    with RunnerProcess(job, timeout_s=120) as r:
        forged = {
            "ok": True,
            "seconds": 0.5,
            "phases": {
                "forward": 0.25,
                "x accepted=True": 1.0,  # would add a field to the log line
                "cpu": "fast",
                "to_device": True,
                "inputs": float("nan"),
                **{f"p{i}": 0.1 for i in range(20)},
            },
        }
        monkeypatch.setattr(r, "_recv", lambda timeout_s, op: forged)
        r.pending = "record"
        assert r.finish("record") is forged
        parts = {k for k in r.seconds if k.startswith("record.")}
        assert parts <= {"record.forward", "record.p0", "record.p1", "record.p2"}
        assert "record.forward" in parts and len(parts) <= 8


def test_a_kept_recording_is_ready_to_time_until_a_build_or_a_release():
    """A screened job's recording call keeps its model and inputs in the runner (the screening
    timing times them without a second build and call); a build or a release replaces them."""
    job = _job((CORPUS / "good" / "relu_good.py").read_text())
    with RunnerProcess(job, timeout_s=120) as r:
        assert r.load(job) is None
        assert r.request("record")["kept"] is False  # not asked to keep: dropped as before
        rep = r.request("record", keep=True)
        assert rep["ok"] and rep["kept"] is True and "report" not in rep
        r.ready_to_time = True  # run_compile's reading of that reply for a screened GPU job
        # the kept model answers a call (on a GPU the timing's `time` request runs it)
        assert r.request("call", input_seed=3)["launches"] >= 1 and r.ready_to_time
        r.request("release")
        assert r.ready_to_time is False
        r.ready_to_time = True
        assert r.request("build", overrides={"BATCH": 48}, weight_seed=1)["ok"]
        assert r.ready_to_time is False
        # a CPU job's compile never keeps one (only a screened GPU job's timing uses it)
        assert run_compile(job, r)["ok"] and r.ready_to_time is False
