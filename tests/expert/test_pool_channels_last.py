"""Pooling over a channels-last input (a library conv's output inside a network): every pooling
seed reads it in place and returns a channels-last result with the reference's values, and an
NCHW input still gets an NCHW result. Each candidate runs in a child process under the Triton
interpreter (the sandboxed checks of the same seeds are in test_expert_families.py, which cannot
see the output's layout)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from expert_tasks import CASES

ROOT = Path(__file__).resolve().parents[2]

LOAD = r"""
import importlib.util, sys
import torch

def load(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod
"""

SCRIPT = (
    LOAD
    + r"""
task, cand = load(sys.argv[1], "task_mod"), load(sys.argv[2], "cand_mod")
torch.manual_seed(0)
ref = task.Model(*task.get_init_inputs())
new = cand.ModelNew(*task.get_init_inputs())
new.load_state_dict(ref.state_dict())
x = task.get_inputs()[0]
fmt = torch.channels_last if x.dim() == 4 else torch.channels_last_3d
assert x.is_contiguous(memory_format=fmt) and not x.is_contiguous()
with torch.no_grad():
    y, r = new(x), ref(x)
    y2 = new(x.contiguous())
assert y.is_contiguous(memory_format=fmt) and not y.is_contiguous(), y.stride()
assert y2.is_contiguous(), y2.stride()
torch.testing.assert_close(y, r, rtol=1e-5, atol=1e-5)
torch.testing.assert_close(y2, r, rtol=1e-5, atol=1e-5)
print("ok")
"""
)


@pytest.mark.parametrize("case", ["pool_cl_max2d_bias", "pool_cl_avg2d_nopad", "pool_cl_max3d"])
def test_channels_last_in_channels_last_out(case, seeds, tmp_path):
    assert seeds[case]
    for i, r in enumerate(seeds[case]):
        p = _run(SCRIPT, CASES[case][0], r.source, tmp_path / str(i))
        assert p.returncode == 0 and p.stdout.strip() == "ok", f"{r.algorithm}: {p.stderr[-2000:]}"


def _run(script: str, task_src: str, cand_src: str, d: Path) -> subprocess.CompletedProcess:
    """`script` on the task and candidate files, in a child process under the Triton interpreter."""
    d.mkdir(parents=True, exist_ok=True)
    task, cand = d / "task.py", d / "cand.py"
    task.write_text(task_src)
    cand.write_text(cand_src)
    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-c", script, str(task), str(cand)],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )


NET_SCRIPT = (
    LOAD
    + r"""
class Counted:
    def __init__(self, k):
        self.k, self.n = k, 0
    def __getitem__(self, grid):
        self.n += 1
        return self.k[grid]

task, cand = load(sys.argv[1], "task_mod"), load(sys.argv[2], "cand_mod")
names = [n for n in vars(cand) if n.endswith("pool_cl_kernel")]
assert names, "no channels-last pool kernel in the file"
counted = {n: Counted(getattr(cand, n)) for n in names}
for n, c in counted.items():
    setattr(cand, n, c)
torch.manual_seed(0)
ref = task.Model(*task.get_init_inputs())
new = cand.ModelNew(*task.get_init_inputs())
new.load_state_dict(ref.state_dict())
x = task.get_inputs()[0]
with torch.no_grad():
    y, r = new(x), ref(x)
torch.testing.assert_close(y, r, rtol=1e-4, atol=1e-4)
print(sum(c.n for c in counted.values()))
"""
)


def test_network_channels_last_seed_pools_in_that_layout(seeds, tmp_path):
    """The VGG-like block's channels-last seed: the conv groups' channels-last output reaches the
    pool, which reads it in place (pool_cl_kernel runs once per forward) instead of copying it to
    NCHW first (VGG-16's channels-last seed made 18 layout copies a forward on the H200, 0.51 ms
    of its 2.50; the pools' were among them)."""
    r = seeds["net_conv_pool"][0]
    assert r.params.get("g0.CHANNELS_LAST") is True
    p = _run(NET_SCRIPT, CASES["net_conv_pool"][0], r.source, tmp_path)
    assert p.returncode == 0, p.stderr[-2000:]
    assert p.stdout.strip() == "1"


def test_pooled_conv_first_seed_is_channels_last(seeds, tmp_path):
    """A conv + pool group on an NCHW input: its first seed turns the conv's input channels-last,
    so cuDNN answers in that layout and the channels-last pool reads it (AlexNet's pool groups,
    first in the network, left cuDNN turning every output back to NCHW: 1.05 ms a forward on the
    H200). The other seeds keep the NCHW pools."""
    for case in ("pool_conv_relu_bias", "pool_conv_bias_rows"):
        algos = [r.algorithm for r in seeds[case]]
        assert algos[0] == "library-conv+channels-last" and len(algos) == 3, algos
        first = seeds[case][0]
        # 3 input channels: input and weight padded to 4 (cuDNN's 16-byte channels-last alignment)
        assert "to_channels_last(x, 4)" in first.source
        assert "cl_conv_weight(self.conv.weight, 4), None" in first.source
        src, ov = CASES[case]
        sizes = {"N": 4, "C": 8, "D": 16, "H": 32, "W": 32, **ov}
        line = "N, C, D, H, W = 4, 8, 16, 32, 32"
        assert line in src
        src = src.replace(line, "N, C, D, H, W = " + ", ".join(str(sizes[k]) for k in "NCDHW"))
        p = _run(NET_SCRIPT, src, first.source, tmp_path / case)
        assert p.returncode == 0, p.stderr[-2000:]
        assert p.stdout.strip() == "1"
        for r in seeds[case][1:]:
            assert "to_channels_last(" not in r.source
