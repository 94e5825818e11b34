"""The speed-of-light bound's counts (bytes read, FLOPs) are counted once per task, sizes, GPU and
versions and read back from the baseline cache afterwards: counting the FLOPs runs the reference
once more inside the timing's shared GPU hold (CPU test, a real reference module)."""

from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")

from tools.worker import timing  # noqa: E402
from tools.worker.describe import bytes_and_flops  # noqa: E402


class _Job:
    task_source = "class Model: ..."
    size_overrides = {"N": 64}


class _Counted(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(64, 32)
        self.calls = 0

    def forward(self, x):
        self.calls += 1
        return self.lin(x)


def test_the_counts_are_made_once_and_read_back(tmp_path):
    env = {"gpu": "test", "torch": torch.__version__, "triton": "x"}
    ref, inputs = _Counted(), [torch.randn(16, 64)]
    first = timing._roofline_counts(
        timing.BaselineCache(str(tmp_path), _Job(), env), ref, inputs, bytes_and_flops
    )
    assert ref.calls == 1 and first[1] == 2 * 16 * 64 * 32  # one forward under the FLOP counter
    assert first[0] == (16 * 64 + 64 * 32 + 32) * 4  # the input and the weights, read once
    again = timing._roofline_counts(
        timing.BaselineCache(str(tmp_path), _Job(), env), ref, inputs, bytes_and_flops
    )
    assert again == first and ref.calls == 1  # read back: the reference did not run again
    # another GPU (or versions, sizes, task) has its own entry
    other = timing._roofline_counts(
        timing.BaselineCache(str(tmp_path), _Job(), {**env, "gpu": "other"}), ref, inputs, bytes_and_flops
    )
    assert other == first and ref.calls == 2


def test_an_unreadable_entry_is_counted_again(tmp_path):
    env = {"gpu": "test", "torch": torch.__version__, "triton": "x"}
    cache = timing.BaselineCache(str(tmp_path), _Job(), env)
    ref, inputs = _Counted(), [torch.randn(4, 64)]
    for bad in ({"bytes": "many"}, {"bytes": -1.0, "flops": 5.0}, {"bytes": 1.0, "flops": "Infinity"}, {}):
        (tmp_path / f"{cache.key}.roofline.json").write_text(json.dumps(bad))
        got = timing._roofline_counts(cache, ref, inputs, bytes_and_flops)
        assert got[1] == 2 * 4 * 64 * 32
    assert ref.calls == 4
    assert json.loads((tmp_path / f"{cache.key}.roofline.json").read_text())["flops"] == 2 * 4 * 64 * 32
