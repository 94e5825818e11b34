"""GPU memory admission (tools/worker/gpumem.py): estimates from shapes, shares as file locks."""

from __future__ import annotations

import threading
import time

import pytest

from tools.worker import gpumem
from tools.worker.gpulock import LOCK_ENV

torch = pytest.importorskip("torch")

GIB = 1024**3

ELEMENTWISE = """
import torch
import torch.nn as nn
N = 1024
M = 2048
class Model(nn.Module):
    def __init__(self):
        super().__init__()
    def forward(self, x):
        return torch.relu(x)
def get_inputs():
    return [torch.randn(N, M)]
def get_init_inputs():
    return []
"""

ROWSUM = ELEMENTWISE.replace("torch.relu(x)", "x.sum(dim=1)")


def _task(src: str):
    from tools.worker.common import load_task

    return load_task(src, {})


def test_peak_estimate_follows_shapes_without_allocating():
    one = 1024 * 2048 * 4
    assert gpumem.estimate_peak_bytes(_task(ELEMENTWISE)) == (
        gpumem.INPUT_COPIES + gpumem.OUTPUT_COPIES
    ) * one + gpumem.compare_bytes(one)
    # The comparison's temporaries are bounded by its chunk, not by the output's size.
    assert gpumem.compare_bytes(one) == gpumem.COMPARE_COPIES * one
    assert gpumem.compare_bytes(64 * GIB) == gpumem.compare_bytes(gpumem.COMPARE_WINDOW_BYTES) < 2 * GIB
    # A row reduction's output is tiny: the inputs dominate.
    assert gpumem.estimate_peak_bytes(
        _task(ROWSUM)
    ) == gpumem.INPUT_COPIES * one + gpumem.OUTPUT_COPIES * 1024 * 4 + gpumem.compare_bytes(1024 * 4)
    big = _task(ELEMENTWISE)
    big.module.N, big.module.M = 1 << 20, 1 << 14  # 64 GiB of input: must not be allocated
    assert gpumem.estimate_peak_bytes(big) > 64 * GIB


def test_units_are_clamped_to_the_slots():
    total = 141 * GIB
    assert gpumem.units_for(1, total) == 1
    # 64 shares of (141 - 16) / 64 = 1.95 GiB each
    assert gpumem.units_for(10 * GIB, total) == 6
    assert gpumem.units_for(10**15, total) == gpumem.SLOTS


def test_memory_shares_block_when_the_gpu_is_full_and_queue_in_order(tmp_path, monkeypatch):
    monkeypatch.setenv(LOCK_ENV, str(tmp_path / "gpu.lock"))
    events: list[str] = []

    def big():
        with gpumem.gpu_memory(gpumem.SLOTS):
            events.append("big in")
            time.sleep(0.3)
            events.append("big out")

    def small(name: str):
        with gpumem.gpu_memory(1):
            events.append(f"{name} in")

    with gpumem.gpu_memory(gpumem.SLOTS - 1):  # one share left
        small("first")  # fits at once
        b = threading.Thread(target=big)
        b.start()
        time.sleep(0.2)  # big now heads the queue, waiting for every share
        s = threading.Thread(target=small, args=("second",))
        s.start()
        time.sleep(0.2)
        assert events == ["first in"]  # the small request queues behind the big one
    b.join(5)
    s.join(5)
    assert events == ["first in", "big in", "big out", "second in"]


def test_no_lock_env_means_no_admission(monkeypatch):
    monkeypatch.delenv(LOCK_ENV, raising=False)
    with gpumem.gpu_memory(gpumem.SLOTS), gpumem.gpu_memory(gpumem.SLOTS):
        pass


def test_units_come_from_the_describe_estimate_without_loading_the_task(monkeypatch):
    from tools.protocol import Job

    monkeypatch.setattr(gpumem, "total_bytes", lambda: 141 * GIB)
    # A task source that cannot even be loaded: with peak_bytes given, it is never executed.
    job = Job(kind="evaluate", task_path="t.py", task_source="def broken(:\n", device="cuda",
              options={"peak_bytes": 30 * GIB})  # fmt: skip
    assert gpumem.job_units(job) == gpumem.units_for(30 * GIB, 141 * GIB) > 1
    # Shares computed by the describe job win (no CUDA needed to know them), clamped to the slots.
    with_units = job.model_copy(update={"options": {"peak_bytes": 30 * GIB, "memory_units": 99}})
    assert gpumem.known_units(with_units) == gpumem.job_units(with_units) == gpumem.SLOTS
    assert gpumem.known_units(job) is None
    # Without it the worker estimates from the task itself (and a broken task gets one share).
    assert gpumem.job_units(job.model_copy(update={"options": {}})) == 1
    ok = job.model_copy(update={"options": {}, "task_source": ELEMENTWISE})
    assert gpumem.job_units(ok) == gpumem.units_for(gpumem.estimate_peak_bytes(_task(ELEMENTWISE)), 141 * GIB)


def test_toolbox_passes_the_describe_estimate_to_gpu_jobs_only():
    from graph.records import TaskSpec
    from tools.toolbox import Toolbox

    tb = Toolbox()
    gpu = TaskSpec(path="t.py", name="t", source=ELEMENTWISE, device="cuda")
    cpu = gpu.model_copy(update={"device": "cpu"})
    assert "peak_bytes" not in tb._job("evaluate", gpu).options  # no describe yet
    tb._peak[tb._task_key(gpu)] = {"peak_bytes": 123.0, "memory_units": 3}
    options = tb._job("evaluate", gpu, options={"tolerance": 1e-3}).options
    # Every job also carries the run's options (EGG home, runner deadline); these three are ours.
    assert {k: options[k] for k in ("tolerance", "peak_bytes", "memory_units")} == {
        "tolerance": 1e-3,
        "peak_bytes": 123.0,
        "memory_units": 3,
    }
    assert "peak_bytes" not in tb._job("describe", gpu).options
    assert "peak_bytes" not in tb._job("check", cpu).options
    other = gpu.model_copy(update={"size_overrides": {"N": 8}})  # other sizes: another estimate
    assert "peak_bytes" not in tb._job("evaluate", other).options


def test_a_screened_jobs_estimate_is_the_timing_not_the_check():
    one = 1024 * 2048 * 4
    timing = gpumem.estimate_timing_bytes(_task(ELEMENTWISE))
    assert timing == gpumem.TIMING_COPIES * one + gpumem.TIMING_OUTPUT_COPIES * one + gpumem.FLUSH_BYTES
    big = _task(ELEMENTWISE)
    big.module.N, big.module.M = 1 << 20, 1 << 14  # 64 GiB of input: shapes only, nothing allocated
    # under half the check's: no float64 reference, no pristine copies
    assert 2 * gpumem.estimate_timing_bytes(big) < gpumem.estimate_peak_bytes(big)


def _hold(units: int, name: str, events: list[str], release: threading.Event) -> threading.Thread:
    def run():
        with gpumem.gpu_memory(units):
            events.append(f"{name} in")
            release.wait(10)
        events.append(f"{name} out")

    t = threading.Thread(target=run)
    t.start()
    return t


def _until(events: list[str], *names: str) -> None:
    """Wait (at most 10 s) until every named event happened."""
    deadline = time.monotonic() + 10
    while not all(n in events for n in names) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert all(n in events for n in names), events


def test_a_small_request_does_not_wait_behind_a_large_one(tmp_path, monkeypatch):
    """The express lane: with a large request at the head of the queue, a small one still takes a
    free express share at once (one queue made it wait for the large one's whole turn)."""
    monkeypatch.setenv(LOCK_ENV, str(tmp_path / "gpu.lock"))
    events: list[str] = []
    go = {n: threading.Event() for n in ("holder", "large", "small")}
    threads = [_hold(gpumem.SLOTS - 4, "holder", events, go["holder"])]  # general + 12 express
    _until(events, "holder in")
    threads.append(_hold(10, "large", events, go["large"]))
    time.sleep(0.3)  # the large request heads the general queue, 10 shares short
    threads.append(_hold(2, "small", events, go["small"]))
    _until(events, "small in")
    assert "large in" not in events
    go["small"].set()
    _until(events, "small out")
    go["holder"].set()
    _until(events, "large in")
    go["large"].set()
    for t in threads:
        t.join(10)


def test_lanes_borrow_only_while_nobody_queues_in_the_other(tmp_path, monkeypatch):
    monkeypatch.setenv(LOCK_ENV, str(tmp_path / "gpu.lock"))
    events: list[str] = []
    go = {n: threading.Event() for n in ("general", "borrower", "express", "large", "small")}
    threads = [_hold(len(gpumem.GENERAL), "general", events, go["general"])]
    _until(events, "general in")
    # nobody queues for express shares: a large request completes with them at once
    threads.append(_hold(6, "borrower", events, go["borrower"]))
    _until(events, "borrower in")
    go["borrower"].set()
    _until(events, "borrower out")
    # the express lane full of small requests, a large one waiting for general shares: a small
    # request may not borrow general shares ahead of it
    fill = [f"x{i}" for i in range(len(gpumem.EXPRESS) // gpumem.EXPRESS_UNITS)]
    threads += [_hold(gpumem.EXPRESS_UNITS, n, events, go["express"]) for n in fill]
    _until(events, *(f"{n} in" for n in fill))
    threads.append(_hold(10, "large", events, go["large"]))
    time.sleep(0.3)
    threads.append(_hold(2, "small", events, go["small"]))
    time.sleep(0.3)
    assert "large in" not in events and "small in" not in events
    go["general"].set()  # general shares free: the large request takes its 10, the small one borrows
    _until(events, "large in", "small in")
    for e in go.values():
        e.set()
    for t in threads:
        t.join(10)
