"""The compile report on a GPU comes from the kernels the recording call's JIT built and loaded
(one compilation per kernel, not a second one for the report); without them it is compiled."""

from types import SimpleNamespace

import pytest

from tools.worker.compile_job import report_from_jit

SPEC = {"name": "k", "num_warps": 4, "num_stages": 3, "constexprs": {"BLOCK": 128}}


def _kernel(ptx: str = "wgmma.mma_async.sync", regs=40, local=2, shared=1024):
    return SimpleNamespace(
        asm={"ptx": ptx, "cubin": b""}, n_regs=regs, n_spills=local, metadata=SimpleNamespace(shared=shared)
    )


def test_report_from_the_loaded_kernels():
    r = report_from_jit([SPEC, {**SPEC, "name": "k2"}], [_kernel(), _kernel("add.f32", 24, 0, 0)])
    assert r is not None and r["ok"] and r["source"] == "jit"
    a, b = r["kernels"]
    assert (a["name"], a["registers"], a["spills"], a["shared_bytes"], a["mma"]) == (
        "k",
        40,
        8,
        1024,
        "wgmma",
    )
    assert (b["name"], b["registers"], b["spills"], b["mma"]) == ("k2", 24, 0, None)
    assert a["constants"] == {"BLOCK": 128} and a["num_warps"] == 4


@pytest.mark.parametrize(
    "kernel",
    [
        None,
        SimpleNamespace(asm={"cubin": b""}, n_regs=1, n_spills=0, metadata=SimpleNamespace(shared=0)),
        SimpleNamespace(asm={"ptx": ""}, metadata=SimpleNamespace(shared=0)),
    ],  # fmt: skip
)
def test_no_report_without_a_loaded_kernel(kernel):
    # not launched (no registers yet), no PTX, or nothing recorded: the caller compiles instead
    assert report_from_jit([SPEC], [kernel]) is None
