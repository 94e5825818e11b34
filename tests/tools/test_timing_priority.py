"""The timed section runs at a raised priority where the judge may raise it (root), restores
the priorities after, and records how busy the host's CPUs were meanwhile."""

import os
import time

from tools.worker import timing


def test_priority_raised_and_restored_as_root(monkeypatch):
    calls: list[tuple[int, int]] = []
    nice = {11: 0, 22: 5}
    monkeypatch.setattr(timing.os, "geteuid", lambda: 0)
    monkeypatch.setattr(timing.os, "getpriority", lambda which, pid: nice[pid])

    def setp(which, pid, value):
        calls.append((pid, value))
        nice[pid] = value

    monkeypatch.setattr(timing.os, "setpriority", setp)
    out: dict = {}
    with timing.timing_priority([11, 22], out):
        assert nice == {11: timing.TIMING_NICE, 22: timing.TIMING_NICE}
        time.sleep(0.2)  # a few clock ticks of /proc/stat
    assert nice == {11: 0, 22: 5}
    assert out["host_priority"] == f"nice {timing.TIMING_NICE}"
    if os.path.exists("/proc/stat"):
        assert 0.0 <= out["host_cpu_busy"] <= 1.0


def test_priority_unchanged_without_root(monkeypatch):
    monkeypatch.setattr(timing.os, "geteuid", lambda: 1000)

    def refuse(*a):
        raise AssertionError("no priority change without root")

    monkeypatch.setattr(timing.os, "setpriority", refuse)
    out: dict = {}
    with timing.timing_priority([11], out):
        pass
    assert out["host_priority"] == "unchanged (needs root)"


def test_priorities_restored_when_the_timed_section_raises(monkeypatch):
    nice = {11: 0}
    monkeypatch.setattr(timing.os, "geteuid", lambda: 0)
    monkeypatch.setattr(timing.os, "getpriority", lambda which, pid: nice[pid])
    monkeypatch.setattr(timing.os, "setpriority", lambda which, pid, v: nice.__setitem__(pid, v))
    out: dict = {}
    try:
        with timing.timing_priority([11], out):
            raise RuntimeError("runner died")
    except RuntimeError:
        pass
    assert nice == {11: 0}
