"""The describe job's output checks (nondeterminism, degenerate outputs) run chunk by chunk and
give the same answers as a whole-tensor computation, whatever the chunk size."""

import math

import pytest

torch = pytest.importorskip("torch")

from tools.worker import describe  # noqa: E402
from tools.worker.common import BadTask  # noqa: E402


@pytest.fixture(params=[5, 1 << 24])
def chunk(request, monkeypatch):
    monkeypatch.setattr(describe, "DESCRIBE_CHUNK", request.param)
    return request.param


def test_gap_and_scale_match_the_whole_tensor(chunk):
    x = torch.linspace(-3, 7, 101).reshape(1, 101)
    y = x.clone()
    y[0, 77] += 0.25
    gap, scale = describe._max_gap(x, y)
    assert gap == pytest.approx(0.25, rel=1e-6)
    assert scale == pytest.approx(7.0)


def test_one_sided_nan_is_a_difference_and_shared_nan_is_not(chunk):
    x = torch.ones(40)
    y = x.clone()
    x[31] = y[31] = float("nan")
    assert describe._max_gap(x, y)[0] == 0.0
    y[33] = float("nan")
    assert math.isnan(describe._max_gap(x, y)[0])


def test_degenerate_flags_see_every_chunk(chunk):
    const = torch.full((3, 7), 2.5)
    assert describe.degenerate_flags([const]) == ["output 0 is constant (2.5)"]
    varied = const.clone()
    varied[2, 6] = 3.0  # the very last element, in the last chunk
    assert describe.degenerate_flags([varied]) == []
    nans = torch.full((12,), float("nan"))
    assert describe.degenerate_flags([nans]) == ["output 0 has no finite values"]
    tiny = torch.full((12,), 1e-7)
    tiny[11] = 2e-7
    assert "tiny" in describe.degenerate_flags([tiny])[0]


def test_nondeterministic_reference_is_named(chunk):
    class Noisy(torch.nn.Module):
        def forward(self, x):
            return x + torch.rand_like(x)

    with pytest.raises(BadTask, match="nondeterministic"):
        describe.nondeterminism(Noisy(), [torch.zeros(64)])
    describe.nondeterminism(torch.nn.ReLU(), [torch.randn(64)])
