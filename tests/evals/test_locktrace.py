"""The GPU lock's trace (EGG_GPU_TRACE) and its report: holds are written by real locks, and the
sweep splits a window into timing, draining, shared, handoff and idle exactly."""

from __future__ import annotations

import threading
import time

import pytest
from fakes import gpu_lock_held_elsewhere

from evals.h200 import locktrace
from tools import sandbox
from tools.worker.gpulock import LOCK_ENV, TRACE_ENV, gpu_lock
from tools.worker.gpumem import gpu_memory


def test_sweep_splits_the_window_by_state():
    holds = [
        ("shared", 1, 0.0, 0.0, 4.0),  # a check from 0 to 4
        ("exclusive", 2, 1.0, 4.0, 5.0),  # asked at 1: drains 1-4, times 4-5
        ("shared", 3, 5.0, 5.0, 6.0),  # shared alone 5-6
        ("mem3", 3, 5.0, 5.0, 6.0),
        ("shared", 4, 8.0, 8.0, 10.0),  # idle 6-8, shared 8-10
    ]
    res = locktrace.sweep(holds)
    assert res["wall"] == pytest.approx(10.0)
    secs = res["secs"]
    assert secs["timing"] == pytest.approx(1.0)
    assert secs["draining"] == pytest.approx(3.0)
    assert secs["shared"] == pytest.approx(1.0 + 1.0 + 2.0)  # 0-1, 5-6, 8-10
    assert secs["idle"] == pytest.approx(2.0)
    assert secs["handoff"] == pytest.approx(0.0)
    assert res["shared_mean"] == pytest.approx((4 + 1 + 2) / 10)
    assert res["mem_mean"] == pytest.approx(3 * 1 / 10)
    cpu = [(0.5, 1.0), (2.0, 0.5), (4.5, 0.2), (7.0, 0.9)]
    by = locktrace.cpu_by_state(res["spans"], cpu)
    assert by == pytest.approx({"shared": 1.0, "draining": 0.5, "timing": 0.2, "idle": 0.9})


def test_real_locks_write_the_trace_only_when_asked(tmp_path, monkeypatch):
    lock = tmp_path / "gpu.lock"
    monkeypatch.setenv(LOCK_ENV, str(lock))
    monkeypatch.delenv(TRACE_ENV, raising=False)
    with gpu_lock(exclusive=False):
        pass
    assert not (tmp_path / "gpu.lock.trace").exists()

    monkeypatch.setenv(TRACE_ENV, "1")
    with gpu_lock_held_elsewhere(exclusive=False) as release:  # a reader
        threading.Timer(0.3, release.set).start()
        with gpu_memory(2), gpu_lock(exclusive=True):  # waits for the reader: about 0.3 s draining
            time.sleep(0.1)
    holds = locktrace.read_trace(str(tmp_path / "gpu.lock.trace"))
    assert sorted(h[0] for h in holds) == ["exclusive", "mem2", "shared"]
    x = next(h for h in holds if h[0] == "exclusive")
    assert x[3] - x[2] >= 0.2 and x[4] - x[3] >= 0.09
    res = locktrace.sweep(holds)
    assert res["secs"]["draining"] >= 0.2 and res["secs"]["timing"] >= 0.09
    text = locktrace.report(str(tmp_path / "gpu.lock.trace"), None, None, None)
    assert "draining" in text and "exclusive holds     1" in text


def test_the_trace_switch_reaches_the_judge_not_secrets(monkeypatch):
    monkeypatch.setenv(TRACE_ENV, "1")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-secret")
    env = sandbox.sandbox_env("/tmp/x", "cuda")
    assert env[TRACE_ENV] == "1" and "OPENAI_API_KEY" not in env


def test_the_cpu_sampler_writes_the_busy_share_of_each_interval(tmp_path, monkeypatch):
    readings = iter([(100, 50), (200, 75), None])  # 100 jiffies, 25 idle: 75% busy; then gone
    monkeypatch.setattr(locktrace, "cpu_times", lambda: next(readings))
    monkeypatch.setattr(locktrace.time, "sleep", lambda s: None)
    out = tmp_path / "cpu.txt"
    locktrace.sample(str(out), 2.0)
    (line,) = out.read_text().splitlines()
    assert line.split()[1] == "0.750"
    assert locktrace.read_cpu(str(out))[0][1] == 0.75


def test_lines_that_do_not_parse_are_counted_in_the_report(tmp_path):
    trace = tmp_path / "t.trace"
    trace.write_text("shared 1 0.0 0.0 1.0\ngarbage\nexclusive 2 0.5 1.0 x\n")
    bad: list[str] = []
    assert len(locktrace.read_trace(str(trace), bad)) == 1 and len(bad) == 2
    assert "2 line(s) of the trace did not parse" in locktrace.report(str(trace), None, None, None)


def test_a_trace_that_cannot_be_written_says_so_and_the_job_goes_on(tmp_path, monkeypatch, capsys):
    from tools.worker.gpulock import trace_hold

    monkeypatch.setenv(LOCK_ENV, str(tmp_path / "missing-dir" / "gpu.lock"))
    monkeypatch.setenv(TRACE_ENV, "1")
    trace_hold("shared", 0.0, 0.0)
    assert "GPU lock trace not written" in capsys.readouterr().err


def test_named_steps_are_kept_apart_and_charged_with_the_drains_they_caused(tmp_path):
    holds = [
        ("shared:check.trial", 1, 0.0, 0.0, 4.0),  # held through the writer's 1-4 drain
        ("exclusive:time.screen", 2, 1.0, 4.0, 5.0),
        ("shared:compile.record", 3, 5.0, 5.0, 6.0),  # no writer waiting
        ("mem3", 3, 5.0, 5.0, 6.0),
        ("shared", 4, 8.0, 8.0, 10.0),  # an older trace's line: no step
    ]
    res = locktrace.sweep(holds)
    assert res["secs"]["draining"] == pytest.approx(3.0) and res["secs"]["timing"] == pytest.approx(1.0)
    rows = {r[0]: r[1:] for r in locktrace.by_step(holds, res["spans"], *res["window"])}
    assert rows["shared:check.trial"] == pytest.approx((1, 4.0, 4.0, 3.0))
    assert rows["shared:compile.record"] == pytest.approx((1, 1.0, 1.0, 0.0))
    assert rows["exclusive:time.screen"][:3] == pytest.approx((1, 1.0, 1.0))
    assert rows["shared:-"][0] == 1
    trace = tmp_path / "t.trace"
    trace.write_text("".join(f"{w} {p} {a} {g} {r}\n" for w, p, a, g, r in holds))
    text = locktrace.report(str(trace), None, None, None)
    assert "shared:check.trial" in text and "during drains     3.0 s" in text
    assert "exclusive holds     1" in text  # the mode's totals count named holds too
