"""The row-norm family's operand reader (the `_row_mode` helper it emits into ModelNew): any
operand that broadcasts to the normalised tensor is read, in the cheapest of its modes."""

from __future__ import annotations

import pytest

from nodes.expert.families.rownorm import _MODE_HELPER

torch = pytest.importorskip("torch")


@pytest.fixture(scope="module")
def row_mode():
    ns: dict = {}
    exec(_MODE_HELPER, ns)  # the helper is plain torch code, emitted as text into the candidate
    return ns["_row_mode"]


SHAPE = (4, 3, 2, 5, 6)  # instance norm rows: (N, C) over (D, H, W): lo = 2, hi = 5


@pytest.mark.parametrize(
    ("operand", "mode", "stored"),
    [
        ((1,), 3, (1,)),
        (SHAPE, 0, SHAPE),
        ((4, 3, 1, 1, 1), 2, (4, 3, 1, 1, 1)),
        # a per-channel factor broadcast over the batch: N * C per-row values
        ((3, 1, 1, 1), 2, (4, 3, 1, 1, 1)),
        ((1, 3, 1, 1, 1), 2, (4, 3, 1, 1, 1)),
        ((2, 5, 6), 1, (1, 1, 2, 5, 6)),
        ((5, 1), 1, (1, 1, 2, 5, 6)),
        # varies along the row and across rows, broadcast along some of both: the full tensor
        ((3, 1, 5, 1), 0, SHAPE),
    ],
)
def test_broadcast_operands_get_the_mode_whose_values_match(row_mode, operand, mode, stored):
    t = torch.randn(operand)
    got, m = row_mode(t, SHAPE, 2, 5)
    assert m == mode and tuple(got.shape) == stored and got.is_contiguous()
    # whatever the mode, broadcasting the stored values gives the operand's broadcast values
    assert torch.equal(got.expand(SHAPE), t.expand(SHAPE))


def test_an_operand_that_does_not_broadcast_is_named(row_mode):
    with pytest.raises(ValueError, match=r"operand of shape \(7, 1, 1, 1\) cannot be read row-wise"):
        row_mode(torch.randn(7, 1, 1, 1), SHAPE, 2, 5)
