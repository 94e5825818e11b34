"""evals/h200/locksim.py replays a GPU-lock trace against tools/worker/gpulock.py on the CPU."""

from __future__ import annotations

from evals.h200.locksim import read_trace, replay

# a check's step from 0 to 1 s; a timer asks at 0.2 s and holds 1 s; a second check asks at 0.4 s
TRACE = """shared:check.trial 11 100.0 100.0 101.0
exclusive:time.screen 12 100.2 101.0 102.0
mem2 12 100.1 100.1 102.0
shared:compile.record 13 100.4 102.0 102.2
"""


def test_a_replay_keeps_the_traces_holds_and_waits_as_the_lock_decides(tmp_path, monkeypatch):
    path = tmp_path / "lock.trace"
    path.write_text(TRACE)
    by_pid = read_trace(path)
    assert sorted(by_pid) == ["11", "12", "13"]  # memory shares are not the GPU lock's
    monkeypatch.setenv("EGG_GPU_LOCK", str(tmp_path / "gpu.lock"))
    out = replay(by_pid, speed=2.0)
    waits = out["waits"]
    assert len(waits["shared:check.trial"]) == 1 and waits["shared:check.trial"][0] < 0.3
    # the timer waits for the first check's step (0.8 s), the second check for the timer (1.6 s)
    assert 0.4 < waits["exclusive:time.screen"][0] < 1.4, waits
    assert 1.1 < waits["shared:compile.record"][0] < 2.4, waits
    assert 2.0 < out["span"] < 3.5
