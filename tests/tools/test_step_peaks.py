"""Per-step GPU memory peaks of the judge (tools/worker/gpumem.py): each step's peak is its own
even though every step resets PyTorch's one peak counter, steps nest (the check's steps inside the
evaluate job's check step), and the process peak survives the resets. PyTorch's counters are
replaced by a fake allocator here (no GPU)."""

import pytest

torch = pytest.importorskip("torch")

from tools.worker import gpumem  # noqa: E402


class _Alloc:
    def __init__(self) -> None:
        self.live = self.peak = 0

    def alloc(self, n: int) -> None:
        self.live += n
        self.peak = max(self.peak, self.live)

    def free(self, n: int) -> None:
        self.live -= n

    def reset(self) -> None:
        self.peak = self.live


@pytest.fixture
def fake(monkeypatch):
    a = _Alloc()
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda: a.peak)
    monkeypatch.setattr(torch.cuda, "memory_allocated", lambda: a.live)
    monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats", a.reset)
    monkeypatch.setattr(gpumem, "_EARLIER_PEAK", [0])
    monkeypatch.setattr(gpumem, "_OPEN", [])
    return a


def test_nested_steps_each_see_their_own_peak(fake):
    fake.alloc(50)
    fake.free(50)  # a peak before any step: the process's, no step's
    gpumem.step_peak_start()  # the evaluate job's check step
    fake.alloc(10)
    gpumem.step_peak_start()  # judge.inputs
    fake.alloc(30)
    fake.free(20)
    inputs = gpumem.step_peak_end()
    gpumem.step_peak_start()  # judge.reference
    fake.alloc(5)
    fake.free(5)
    reference = gpumem.step_peak_end()
    fake.alloc(25)  # after the inner steps, inside the outer one
    fake.free(25)
    check = gpumem.step_peak_end()
    assert (inputs, reference, check) == (40, 25, 45)
    assert gpumem.process_peak() == 50  # the counter was reset three times; the peak is kept
    assert gpumem._OPEN == []
