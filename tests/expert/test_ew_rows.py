"""Elementwise operands that are row views of a larger tensor (a chunk or slice along the last
dim, as a recurrent cell's gates) are read in place (mode 3 of kernels/ew.py `_bcast`), not
copied first; other layouts keep their modes. The candidates pass the sandboxed check."""

from __future__ import annotations

import json
import subprocess
import sys

from expert_helpers import ROOT, check_jobs, describe_many, request, run_jobs, task

from nodes.expert import ExpertCode
from nodes.expert.families.elementwise import BCAST_HELPER

MODES = r"""
import json, sys
import torch
ns = {"torch": torch}
exec(sys.stdin.read(), ns)
b = ns["_bcast"]
x = torch.randn(3, 5, 64)
g = torch.randn(6, 40)
cases = {
    "chunk": b(x.chunk(2, dim=-1)[1], (3, 5, 32)),
    "slice2d": b(g[:, 3:20], (6, 17)),
    "contiguous": b(x, (3, 5, 64)),
    "transposed": b(x.transpose(1, 2), (3, 64, 5)),
    "column": b(g[:, 5:6], (6, 1)),
    "bias": b(torch.randn(64), (3, 5, 64)),
}
out = {}
for k, (t, mode, inner, size) in cases.items():
    out[k] = [mode, inner, size, t.is_contiguous()]
print(json.dumps(out))
"""


def test_row_views_are_read_in_place():
    proc = subprocess.run(
        [sys.executable, "-c", MODES],
        input=BCAST_HELPER,
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    got = json.loads(proc.stdout)
    assert got["chunk"] == [3, 32, 64, False]
    assert got["slice2d"] == [3, 17, 40, False]
    assert got["contiguous"] == [0, 1, 3 * 5 * 64, True]
    assert got["transposed"][0] == 0 and got["transposed"][3] is True  # copied: no stride-1 rows
    assert got["column"][0] == 0 and got["column"][3] is True  # rows of one element: copied
    assert got["bias"][:3] == [2, 1, 64]


GATES = task(
    "",
    "",
    "a, b, c = x.chunk(3, dim=-1)\nreturn torch.sigmoid(a) * torch.tanh(b) + c[..., :1] * 0.5",
    "torch.randn(4, 7, 99)",
)
SLICE = task("", "", "return torch.relu(x[:, 2:35]) - x[:, 40:73] * 2.0", "torch.randn(37, 80)")


def test_candidates_with_row_views_pass_the_check():
    descs = describe_many([(GATES, {}), (SLICE, {})])
    code = ExpertCode()
    jobs = []
    for src, d in zip((GATES, SLICE), descs, strict=True):
        r = code.write(request(d))
        assert r.source, r.note
        assert "_MODE == 3" in r.source
        jobs += check_jobs(src, {}, [r], trials=2)
    for res in run_jobs(jobs):
        assert res.get("ok"), f"{res.get('error')}\n{res.get('traceback', '')}"
