"""GEMMs whose K rows are not whole 16-byte lines (an odd K in fp32) keep 16-byte copies.

The sm_90 TF32 MMA's operand tiles reach shared memory through async copies; Triton issues
them 16 bytes at a time only when it can prove every row of the tile aligned. With K = 6143
(KernelBench level 2's GEMMs at ragged sizes) or 393215 (a large-K matmul) no row after the
first is, and every copy moves 4 bytes: on an H100 the in-register 3xTF32 kernel at 767 x 6143 x
6143 took 3.66 ms where the K-padded presplit one took 0.870 ms, and the ragged large-K split-k
ran 0.58x of eager. The expert now takes the K-major, K-padded operand copies (KMAJOR) by
default for such shapes, split-k and tf32x3-bsplit included (there B is split into padded halves
already and A is copied too). Each seed is compiled for sm_90 with the GPU launch's own
specialisation and its async copies counted, beside the same seed without the copies, and run
under the interpreter against the reference at the same sizes."""

from __future__ import annotations

import pytest
from expert_helpers import check_jobs, describe_many, request, run_jobs

MATMUL = """import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A, B):
        return torch.matmul(A, B)


M = 256
K = 65536
N = 256


def get_inputs():
    return [torch.randn(M, K), torch.randn(K, N)]


def get_init_inputs():
    return []
"""

LINEAR = """import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, i, o):
        super().__init__()
        self.lin = nn.Linear(i, o)

    def forward(self, x):
        return torch.relu((self.lin(x) - 0.5) * 2.0)


B = 512
I = 1024
O = 1024


def get_inputs():
    return [torch.randn(B, I)]


def get_init_inputs():
    return [I, O]
"""

# (source, ragged sizes, the seed's algorithm, its precision): a large-K matmul (split-k with B
# split once) and a Linear with an elementwise tail (tiled, in-register 3xTF32)
CASES = {
    "large_k": (MATMUL, {"M": 131, "K": 1023, "N": 45}, "split-k", "tf32x3-bsplit"),
    "linear_tail": (LINEAR, {"B": 320, "I": 203, "O": 320}, "tiled", "tf32x3"),
}
GEMM_KERNELS = ("gemm_kernel", "gemm_splitk_kernel")


def _without_copies(source: str) -> str:
    """The same kernel file with the operands read where they are (the launcher before KMAJOR)."""
    drop = ("    a3 = _kmajor(a3, 2, K, kp)", "    b3 = _kmajor(b3, 1, K, kp)", "    K = kp")
    kept = [ln for ln in source.splitlines() if ln not in drop]
    assert len(kept) < len(source.splitlines()), "no K-major copy in the launcher"
    return "\n".join(kept) + "\n"


@pytest.fixture(scope="module")
def seeds():
    from nodes.expert import ExpertCode

    code = ExpertCode()
    descs = describe_many([(src, ov) for src, ov, _, _ in CASES.values()])
    picked = {}
    for name, desc in zip(CASES, descs, strict=True):
        want = CASES[name][2]
        for i in range(8):
            r = code.write(request(desc, seed_index=i, n_seeds=8))
            if r.source is None:
                break
            if r.algorithm == want:
                picked[name] = r
                break
    assert set(picked) == set(CASES), f"seeds found: {sorted(picked)}"
    jobs, plain = [], []
    for name, r in picked.items():
        src, ov = CASES[name][:2]
        jobs += check_jobs(src, ov, [r], trials=2)
        plain += check_jobs(src, ov, [r.model_copy(update={"source": _without_copies(r.source)})])
    checks = run_jobs(jobs, interpret=True)
    compiled = run_jobs([dict(j, kind="compile") for j in jobs + plain], interpret=False)
    n = len(jobs)
    return {name: (r, checks[i], compiled[i], compiled[n + i]) for i, (name, r) in enumerate(picked.items())}


def _gemm(comp: dict) -> dict:
    assert comp.get("ok"), comp.get("error")
    (k,) = [k for k in comp["kernels"] if k["kernel"] in GEMM_KERNELS]
    return k


@pytest.mark.parametrize("case", list(CASES))
def test_ragged_gemm_seed_takes_the_copies_and_matches(seeds, case):
    r, check, _, _ = seeds[case]
    assert r.params["KMAJOR"] is True and r.params["PRECISION"] == CASES[case][3], r.params
    assert check.get("ok"), f"{case}: {check.get('error')}"


@pytest.mark.parametrize("case", list(CASES))
def test_ragged_gemm_operands_move_16_bytes_a_copy(seeds, case):
    _, _, comp, plain = seeds[case]
    with_copies, without = _gemm(comp), _gemm(plain)
    # without the copies some operand tile moves 4 bytes at a time; with them none does
    assert without["cp4"] > 0, without
    assert with_copies["cp4"] == 0 and with_copies["cp16"] > 0, with_copies
