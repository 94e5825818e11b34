"""assemble.share_channels_last: a forward input turned channels-last for a library conv is
copied once and the same copy feeds a later channels-last launcher's full-shape operand (the
residual of a ResNet block), instead of a second copy inside the launcher."""

from __future__ import annotations

from pathlib import Path

import pytest
from expert_helpers import ROOT

from graph.records import TaskSpec
from nodes.expert.assemble import _Def, share_channels_last

CONV = "def g0_to_channels_last(x, channels=None):\n    return x\n"
APPLY = "def g1_launch_apply(x, mean, t_r, t_s):\n    t_r_c, t_r_m = _epi_mode_cl(t_r, x)\n    return t_s\n"
PLAIN = "def g2_launch_plain(x, t_r):\n    t_r_c, t_r_m = _epi_mode(t_r, x.shape)\n    return x\n"
DEFS = {
    "g0_to_channels_last": _Def("g0_to_channels_last", CONV, "g0"),
    "g1_launch_apply": _Def("g1_launch_apply", APPLY, "g1"),
    "_epi_mode_cl": _Def("_epi_mode_cl", "def _epi_mode_cl(t, x):\n    return t, 0\n", None),
    "g2_launch_plain": _Def("g2_launch_plain", PLAIN, "g2"),
}


def test_the_residual_reads_the_convs_channels_last_copy() -> None:
    fwd = (
        "y = conv(g0_to_channels_last(x), w)\n"
        "if training:\n"
        "    m = stats(y)\n"
        "out = g1_launch_apply(y, m, x, x)\n"
        "return out"
    )
    assert share_channels_last(fwd, DEFS) == (
        "x_cl = g0_to_channels_last(x)\n"
        "y = conv(x_cl, w)\n"
        "if training:\n"
        "    m = stats(y)\n"
        # only the parameter that goes through _epi_mode_cl reads the copy
        "out = g1_launch_apply(y, m, x_cl, x)\n"
        "return out"
    )


def test_two_convs_of_one_input_read_one_copy() -> None:
    # an Inception block: two branches convolve the same input
    fwd = "a = conv(g0_to_channels_last(x), w1)\nb = conv(g0_to_channels_last(x), w2)\nreturn a + b"
    assert share_channels_last(fwd, DEFS) == (
        "x_cl = g0_to_channels_last(x)\na = conv(x_cl, w1)\nb = conv(x_cl, w2)\nreturn a + b"
    )


def test_a_group_output_converted_twice_with_the_same_padding_is_converted_once() -> None:
    # a Fire module: both expand convs read the squeeze output padded from 6 to 8 channels
    fwd = (
        "s = g2_launch_plain(conv(g0_to_channels_last(x, 4), w0), b0)\n"
        "a = conv(g0_to_channels_last(s, 8), w1)\n"
        "b = conv(g0_to_channels_last(s, 8), w3)\n"
        "return g1_launch_apply(a, 0, s, s)"
    )
    assert share_channels_last(fwd, DEFS) == (
        "s = g2_launch_plain(conv(g0_to_channels_last(x, 4), w0), b0)\n"
        "s_cl = g0_to_channels_last(s, 8)\n"
        "a = conv(s_cl, w1)\n"
        "b = conv(s_cl, w3)\n"
        # the padded copy has more channels than s: the launcher still reads s
        "return g1_launch_apply(a, 0, s, s)"
    )


@pytest.mark.parametrize(
    "fwd",
    [
        # a name bound twice: the two conversions may read different tensors
        "s = f(x)\na = conv(g0_to_channels_last(s), w1)\ns = f(a)\nb = conv(g0_to_channels_last(s), w3)\nreturn b",
        # different paddings: different tensors
        "s = f(x)\na = conv(g0_to_channels_last(s, 4), w1)\nb = conv(g0_to_channels_last(s, 8), w3)\nreturn a + b",
    ],
)
def test_conversions_of_different_tensors_stay_apart(fwd: str) -> None:
    assert share_channels_last(fwd, DEFS) == fwd


@pytest.mark.parametrize(
    "fwd",
    [
        # no later channels-last launcher reads x
        "y = conv(g0_to_channels_last(x), w)\nreturn g2_launch_plain(y, x)",
        # x padded to more channels: another tensor than the residual
        "y = conv(g0_to_channels_last(x, 4), w)\nreturn g1_launch_apply(y, 0, x, x)",
        # x rebound in forward: which x the launcher reads is not the converted one
        "y = conv(g0_to_channels_last(x), w)\nx = y + 1\nreturn g1_launch_apply(y, 0, x, x)",
        # the conversion only under a branch: binding it first would add a pass
        "if a:\n    y = conv(g0_to_channels_last(x), w)\nreturn g1_launch_apply(y, 0, x, x)",
        # the launcher before the conversion
        "z = g1_launch_apply(x, 0, x, x)\ny = conv(g0_to_channels_last(x), w)\nreturn y + z",
    ],
)
def test_left_as_written(fwd: str) -> None:
    assert share_channels_last(fwd, DEFS) == fwd


def test_a_taken_name_is_not_reused() -> None:
    fwd = "x_cl = 1\ny = conv(g0_to_channels_last(x), w)\nreturn g1_launch_apply(y, x_cl, x, x)"
    out = share_channels_last(fwd, DEFS)
    assert "x_cl2 = g0_to_channels_last(x)\ny = conv(x_cl2, w)" in out
    assert out.endswith("g1_launch_apply(y, x_cl, x_cl2, x)")


def test_resnet_block_seed_is_verified_with_one_layout_copy() -> None:
    """The channels-last seed of a conv-BN-ReLU, conv-BN, residual-ReLU block (the suite's
    ResNet basic block at odd CPU sizes) binds one copy of x and passes the check."""
    from evals.h200.probe import seeds
    from tools.toolbox import Toolbox

    p = Path(ROOT) / "evals" / "suites" / "egg" / "cx09_resnet_basic_block.py"
    task = TaskSpec(
        path=str(p),
        name=p.stem,
        source=p.read_text(),
        size_overrides={"BATCH": 2, "CHANNELS": 8, "SIZE": 7},  # 8: no channel padding
    )
    tb = Toolbox()
    desc = tb.describe(task, shrink=False)
    cl = [r for r in seeds(task, desc, 3) if "cl-channel-tiles" in str(r.params)]
    assert cl, "no channels-last seed"
    src = cl[0].source
    assert src.count("_to_channels_last(x)") == 1 and "x_cl = " in src
    assert "b_v, x_cl)" in src
    chk = tb.check(task, src, policy="mixed")
    assert chk.accepted, chk.reasons
