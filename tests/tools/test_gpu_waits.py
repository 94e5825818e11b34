"""Waiting for the GPU is the machine's time, not the job's: a job that queues behind other
tasks' memory shares or timing is not killed (or its candidate blamed) for the wait."""

from __future__ import annotations

import threading
import time

import pytest
from fakes import gpu_lock_held_elsewhere

from tools import sandbox
from tools.worker import gpulock
from tools.worker.gpulock import LOCK_ENV, gpu_lock, note_waits_to, read_wait_note


@pytest.fixture()
def note(tmp_path, monkeypatch):
    monkeypatch.setenv(LOCK_ENV, str(tmp_path / "gpu.lock"))
    monkeypatch.setattr(gpulock, "WAITED", {"shared": 0.0, "exclusive": 0.0})
    path = tmp_path / "waited"
    note_waits_to(str(path))
    yield path
    note_waits_to(None)


def test_a_wait_for_the_lock_is_noted_while_it_lasts_and_after(note):
    seen: list[float] = []
    with gpu_lock_held_elsewhere(exclusive=True) as release:  # a timer

        def watch():
            time.sleep(0.6)
            seen.append(read_wait_note(str(note)))
            release.set()

        w = threading.Thread(target=watch)
        w.start()
        with gpu_lock(exclusive=False):
            pass
    w.join()
    assert seen and seen[0] >= 0.5  # a wait under way counts while it lasts
    after = read_wait_note(str(note))
    assert 0.5 <= after < 5 and after == pytest.approx(gpulock.total_waited(), abs=0.01)
    time.sleep(0.2)
    assert read_wait_note(str(note)) == pytest.approx(after, abs=0.01)  # nothing under way now


def test_unreadable_or_missing_notes_count_as_no_wait(tmp_path):
    assert read_wait_note(str(tmp_path / "none")) == 0.0
    (tmp_path / "bad").write_text("garbage")
    assert read_wait_note(str(tmp_path / "bad")) == 0.0


class _Proc:
    """A job process that exits after `runs_s` of wall time."""

    def __init__(self, runs_s: float) -> None:
        self.end = time.monotonic() + runs_s

    def wait(self, timeout_s: float) -> int | None:
        left = self.end - time.monotonic()
        if left <= timeout_s:
            time.sleep(max(0.0, left))
            return 0
        time.sleep(timeout_s)
        return None


def test_the_job_limit_does_not_count_waits_for_the_gpu(tmp_path, monkeypatch):
    note = tmp_path / "waited"
    # 2.5 s of the job's 3 s were spent queueing: a 1 s limit is not used up
    note.write_text(f"2.5 {0.0:.3f}\n")
    rc, waited = sandbox._wait_job(_Proc(3.0), note, timeout_s=1.0)
    assert rc == 0 and waited == pytest.approx(2.5)
    # with no wait noted the same job is out of time after its 1 s
    t0 = time.monotonic()
    rc, waited = sandbox._wait_job(_Proc(3.0), tmp_path / "absent", timeout_s=1.0)
    assert rc is None and waited == 0.0 and time.monotonic() - t0 < 2.0
    # waits beyond MAX_GPU_WAIT_S count again: a job stuck in the queue still ends
    monkeypatch.setattr(sandbox, "MAX_GPU_WAIT_S", 0.5)
    rc, waited = sandbox._wait_job(_Proc(3.0), note, timeout_s=1.0)
    assert rc is None and waited >= sandbox.MAX_GPU_WAIT_S


def test_the_runners_deadline_moves_by_the_judges_waits(monkeypatch):
    from tools.worker.judge import RunnerProcess

    monkeypatch.setattr(gpulock, "WAITED", {"shared": 0.0, "exclusive": 0.0})
    r = RunnerProcess.__new__(RunnerProcess)  # only the clock: no process
    r.deadline = time.monotonic() + 10.0
    r._waited0 = gpulock.total_waited()
    assert 9.0 < r.left() <= 10.0
    gpulock.WAITED["memory"] = 100.0
    assert 109.0 < r.left() <= 110.0
