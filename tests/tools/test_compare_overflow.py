"""compare(): Inf where PyTorch's own dtype overflowed, and no infinite tolerance from it."""

import pytest

torch = pytest.importorskip("torch")

from tools.worker.check import Rejected, compare  # noqa: E402


def _stats():
    return {"max_abs": 0.0, "max_rel": 0.0, "ref_err": 0.0, "widened": False, "notes": []}


def _case():
    r64 = torch.tensor([1.0, 2.0, 1e39], dtype=torch.float64)  # 1e39 overflows float32
    rn = r64.float()  # PyTorch's own float32 result: [1, 2, inf]
    return r64, rn


def test_candidate_matching_pytorchs_overflow_is_accepted():
    r64, rn = _case()
    stats = _stats()
    compare("t", 0, rn.clone(), r64, rn, None, stats)
    assert any("overflow" in n for n in stats["notes"])


def test_finite_value_where_pytorch_overflowed_is_rejected():
    r64, rn = _case()
    c = rn.clone()
    c[2] = 3.0e38
    with pytest.raises(Rejected, match="nan_parity"):
        compare("t", 0, c, r64, rn, None, _stats())


def test_overflow_elsewhere_does_not_make_the_tolerance_infinite():
    r64, rn = _case()
    c = rn.clone()
    c[0] = 5.0  # wrong by 4 where everything is finite
    with pytest.raises(Rejected, match="mismatch"):
        compare("t", 0, c, r64, rn, None, _stats())


def test_spurious_inf_is_rejected():
    r64, rn = _case()
    c = rn.clone()
    c[1] = float("inf")
    with pytest.raises(Rejected, match="nan_parity"):
        compare("t", 0, c, r64, rn, None, _stats())
