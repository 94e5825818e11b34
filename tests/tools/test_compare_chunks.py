"""compare() works chunk by chunk (bounded float64 temporaries): the verdict, the counts and the
statistics are those of the whole tensor, whatever the chunk size."""

import pytest

torch = pytest.importorskip("torch")

from tools.worker import check  # noqa: E402
from tools.worker.check import Rejected, compare  # noqa: E402


def _stats():
    return {"max_abs": 0.0, "max_rel": 0.0, "ref_err": 0.0, "widened": False, "notes": []}


def _ref(n=1000):
    g = torch.Generator().manual_seed(0)
    r64 = torch.randn(n, dtype=torch.float64, generator=g).reshape(10, n // 10)
    return r64, r64.float()


@pytest.mark.parametrize("chunk", [7, 100, 1 << 24])
def test_statistics_do_not_depend_on_the_chunk(monkeypatch, chunk):
    r64, rn = _ref()
    c = rn.clone()
    c.view(-1)[987] += 5e-5  # inside the float32 bar, in the last chunk for small chunks
    monkeypatch.setattr(check, "COMPARE_CHUNK", chunk)
    stats = _stats()
    compare("t", 0, c, r64, rn, None, stats)
    assert stats["max_abs"] == pytest.approx(float((c.double() - r64).abs().max()))
    assert stats["ref_err"] == pytest.approx(float((rn.double() - r64).abs().max()))


@pytest.mark.parametrize("chunk", [7, 1 << 24])
def test_bad_elements_counted_over_all_chunks_and_first_named(monkeypatch, chunk):
    r64, rn = _ref()
    c = rn.clone()
    flat = c.view(-1)
    flat[123] += 1.0
    flat[900] -= 1.0
    monkeypatch.setattr(check, "COMPARE_CHUNK", chunk)
    with pytest.raises(Rejected, match=r"2/1000 elements out of tolerance.*flat index 123"):
        compare("t", 0, c, r64, rn, None, _stats())


def test_nan_count_spans_chunks(monkeypatch):
    r64, rn = _ref()
    c = rn.clone()
    c.view(-1)[[5, 500, 999]] = float("nan")
    monkeypatch.setattr(check, "COMPARE_CHUNK", 64)
    with pytest.raises(Rejected, match=r"nan_parity: .*3 element\(s\) NaN"):
        compare("t", 0, c, r64, rn, None, _stats())


def test_non_contiguous_outputs_are_compared_in_logical_order(monkeypatch):
    r64, rn = _ref()
    c = rn.t().contiguous().t()  # same values, other strides
    c[3, 7] += 1.0
    monkeypatch.setattr(check, "COMPARE_CHUNK", 13)
    with pytest.raises(Rejected, match=r"flat index 307:"):
        compare("t", 0, c, r64, rn, None, _stats())
