"""assemble.cat_in_place: the branches of a concatenation written into their ranges of the joined
output by their own tails, instead of into tensors of their own that a join then copies (a Fire
or Inception block: each branch's output written once)."""

from __future__ import annotations

import pytest
from expert_helpers import check_jobs, describe_many, request, run_jobs

from nodes.expert.assemble import _Def, cat_in_place

TAIL = "def g0_launch_conv_tail(t, cb, out=None):\n    return t\n"
PLAIN = "def g1_launch_plain(t, cb):\n    return t\n"
CAT = "def g3_launch_cat(xs, dim):\n    return xs[0]\n"
BUF = "def g3_cat_buffer(xs, dim):\n    return xs[0]\n"
DEFS = {
    "g0_launch_conv_tail": _Def("g0_launch_conv_tail", TAIL, "g0"),
    "g1_launch_plain": _Def("g1_launch_plain", PLAIN, "g1"),
    "g3_launch_cat": _Def("g3_launch_cat", CAT, "g3"),
    "g3_cat_buffer": _Def("g3_cat_buffer", BUF, "g3"),
}
FIRE = (
    "s = g0_launch_conv_tail(conv(x, w0), b0)\n"
    "t_n0 = conv(s, w1)\n"
    "a = g0_launch_conv_tail(t_n0, b1)\n"
    "t_n0 = conv(s, w3)\n"
    "b = g0_launch_conv_tail(t_n0, b3)\n"
    "v = g3_launch_cat([a, b], 1)\n"
    "return v"
)


def test_the_branches_tails_write_their_ranges_of_the_join() -> None:
    assert cat_in_place(FIRE, DEFS) == (
        "s = g0_launch_conv_tail(conv(x, w0), b0)\n"
        "t_n0_v = conv(s, w1)\n"
        "t_n0_v2 = conv(s, w3)\n"
        "v = g3_cat_buffer([t_n0_v, t_n0_v2], 1)\n"
        "g0_launch_conv_tail(t_n0_v, b1, out=v.narrow(1, 0, t_n0_v.shape[1]))\n"
        "g0_launch_conv_tail(t_n0_v2, b3, out=v.narrow(1, t_n0_v.shape[1], t_n0_v2.shape[1]))\n"
        "return v"
    )


@pytest.mark.parametrize(
    "fwd",
    [
        # a branch's output is read again
        FIRE.replace("return v", "return v + a"),
        # a branch made by a launcher that cannot write into a given tensor
        FIRE.replace("b = g0_launch_conv_tail(t_n0, b3)", "b = g1_launch_plain(t_n0, b3)"),
        # a tail's input read by another statement as well
        FIRE.replace("a = g0_launch_conv_tail(t_n0, b1)", "a = g0_launch_conv_tail(t_n0, b1)\nz = t_n0 * 2"),
        # a tail reads a name rebound before the join: moved down, it would read the new one
        FIRE.replace("b1)", "c)")
        .replace("t_n0 = conv(s, w3)", "c = s + 1\nt_n0 = conv(s, w3)")
        .replace("s = g0", "c = x\ns = g0"),
        # two statements on one line
        FIRE.replace("\nt_n0 = conv(s, w3)\n", "; t_n0 = conv(s, w3)\n"),
        # the tail's input is not made just before it
        FIRE.replace("t_n0 = conv(s, w1)\n", "t_n0 = conv(s, w1)\nq = s * 2\n"),
    ],
)
def test_left_as_written(fwd: str) -> None:
    assert cat_in_place(fwd, DEFS) == fwd


FIRE_TASK = """import torch
import torch.nn as nn

N = 2
C_IN = 5
SQ = 3
E1 = 4
E3 = 6
H = 9
W = 7


class Model(nn.Module):
    def __init__(self, c_in, sq, e1, e3):
        super().__init__()
        self.squeeze = nn.Conv2d(c_in, sq, 1)
        self.e1 = nn.Conv2d(sq, e1, 1)
        self.e3 = nn.Conv2d(sq, e3, 3, padding=1)

    def forward(self, x):
        s = torch.relu(self.squeeze(x))
        return torch.cat([torch.relu(self.e1(s)), torch.sigmoid(self.e3(s))], 1)


def get_inputs():
    return [torch.randn(N, C_IN, H, W)]


def get_init_inputs():
    return [C_IN, SQ, E1, E3]
"""


def test_a_fire_block_writes_its_branches_into_the_join_and_matches_the_reference() -> None:
    from nodes.expert import ExpertCode

    desc = describe_many([(FIRE_TASK, {})])[0]
    code = ExpertCode()
    replies = [code.write(request(desc, seed_index=i, n_seeds=2)) for i in range(2)]
    for r in replies:
        assert r.source is not None, r.note
        forward = r.source[r.source.index("def forward(") :]
        assert "_cat_buffer([" in forward and "_launch_cat(" not in forward, forward
    res = run_jobs(check_jobs(FIRE_TASK, {"N": 3, "H": 6, "W": 11}, replies, trials=3), interpret=True)
    for r, x in zip(replies, res, strict=True):
        assert x.get("ok"), f"{r.algorithm}: {x.get('error')}"
