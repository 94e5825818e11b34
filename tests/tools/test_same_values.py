"""The "inputs unchanged" comparison shared by the judge and the runner: exact, NaN-aware, and
without whole-tensor float64 copies (which exhausted an H200 on a 6 GiB elementwise task)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from tools.worker.common import same_values, upcast_copies  # noqa: E402


def test_equal_tensors_and_nans_at_the_same_places_are_the_same() -> None:
    x = torch.randn(1000)
    x[[3, 500, 999]] = float("nan")
    assert same_values(x, x.clone(), chunk=64)


@pytest.mark.parametrize("where", [0, 63, 64, 999])
def test_one_changed_element_in_any_chunk_is_seen(where: int) -> None:
    x = torch.randn(1000)
    y = x.clone()
    y[where] += 1.0
    assert not same_values(x, y, chunk=64)


def test_nan_against_a_number_and_inf_against_the_largest_float_differ() -> None:
    x = torch.zeros(10)
    y = x.clone()
    y[2] = float("nan")
    assert not same_values(x, y)
    a = torch.full((4,), float("inf"))
    b = torch.full((4,), torch.finfo(torch.float32).max)  # nan_to_num made these equal
    assert not same_values(a, b)


def test_shape_dtype_and_integer_tensors() -> None:
    x = torch.arange(12).reshape(3, 4)
    assert same_values(x, x.clone())
    assert not same_values(x, x.reshape(4, 3).clone())
    assert not same_values(x.float(), x.double())
    y = x.clone()
    y[1, 1] = -1
    assert not same_values(x, y)


def test_non_contiguous_tensors_are_compared_whole() -> None:
    x = torch.randn(64, 32)
    t = x.t()
    assert same_values(t, t.clone(memory_format=torch.preserve_format))
    u = t.contiguous()
    u[5, 7] += 1
    assert not same_values(t, u)


def test_no_float64_copy_is_made(monkeypatch) -> None:
    def boom(*a, **k):
        raise AssertionError("whole-tensor float64 copy")

    monkeypatch.setattr(torch.Tensor, "double", boom)
    monkeypatch.setattr(torch, "nan_to_num", boom)
    x = torch.randn(100_000)
    assert same_values(x, x.clone(), chunk=1 << 12)


def test_upcast_copies_are_fresh_float64_and_leave_the_inputs_alone() -> None:
    x, d, i = torch.randn(8), torch.randn(8, dtype=torch.float64), torch.arange(8)
    out = upcast_copies([x, d, i, 3.5, [1, 2]])
    assert out[0].dtype == torch.float64 and torch.equal(out[0], x.double())
    assert out[1].dtype == torch.float64 and out[1].data_ptr() != d.data_ptr()
    assert out[2].data_ptr() != i.data_ptr() and torch.equal(out[2], i)
    out[1].add_(1)
    out[2].add_(1)
    assert not torch.equal(out[1], d) and not torch.equal(out[2], i)
    assert out[3:] == [3.5, [1, 2]]
