"""torch.compile's own output held to the checker's bar (tools/worker/timing.py compile_accuracy):
the comparison runs on CPU tensors here; on a GPU the baseline job calls it on the timed inputs."""

import pytest
import torch
import torch.nn as nn

from tools.worker import timing
from tools.worker.timing import compile_accuracy


class Lin(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.fc = nn.Linear(64, 32)

    def forward(self, x):
        return torch.relu(self.fc(x))


def _inputs():
    return [torch.randn(16, 64, generator=torch.Generator().manual_seed(1))]


def test_the_same_computation_is_within_the_bar() -> None:
    ref = Lin().eval()
    res = compile_accuracy(ref, ref, _inputs())
    assert res["within_bar"] is True and res["max_abs"] >= 0.0 and res["allowed"] > 0.0


def test_a_coarser_computation_is_outside_it_with_the_checkers_words() -> None:
    ref = Lin().eval()

    def coarse(x):
        # products with a 10-bit mantissa, like TF32: far outside an fp32 reference's own error
        w = ref.fc.weight.detach()
        w10 = (w * 1024).round() / 1024
        return torch.relu(x @ w10.t() + ref.fc.bias)

    res = compile_accuracy(ref, coarse, _inputs())
    assert res["within_bar"] is False and res["reason"].startswith("mismatch: trial torch.compile")


def test_failures_are_notes_never_exceptions(monkeypatch: pytest.MonkeyPatch) -> None:
    ref = Lin().eval()

    def broken(x):
        raise RuntimeError("inductor fell over")

    res = compile_accuracy(ref, broken, _inputs())
    assert res == {"error": "RuntimeError: inductor fell over"}
    monkeypatch.setattr(timing, "COMPILE_CHECK_MAX_BYTES", 100)
    assert "skipped" in compile_accuracy(ref, ref, _inputs())
    # inputs are never changed by the check (the timing reuses them)
    xs = _inputs()
    before = xs[0].clone()
    compile_accuracy(ref, lambda x: x.mul_(2.0), xs)
    assert torch.equal(xs[0], before)


def test_a_random_forward_is_not_held_to_it() -> None:
    class Noisy(nn.Module):
        def forward(self, x):
            return x + torch.rand_like(x)

    res = compile_accuracy(Noisy(), Noisy(), _inputs())
    assert res == {"skipped": "the reference's output changes from call to call (random ops)"}


def test_reference_outputs_the_caller_has_are_not_computed_again() -> None:
    calls = []

    class Counted(Lin):
        def forward(self, x):
            calls.append(1)
            return super().forward(x)

    ref = Counted().eval()
    assert compile_accuracy(ref, ref, _inputs())["within_bar"] is True
    assert len(calls) == 4  # the reference twice (the randomness probe), the stand-in, the twin
    calls.clear()
    with torch.no_grad():
        native = [ref(*_inputs())]
    calls.clear()
    assert compile_accuracy(ref, ref, _inputs(), native=native)["within_bar"] is True
    assert len(calls) == 3
