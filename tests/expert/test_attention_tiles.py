"""The fused attention kernel's tiles fit the head dim: compiled for sm_90 (no GPU needed), the
expert's first seed for fp32 SDPA stays within shared memory at head dims 64, 128 and 256 and
spills no more than the tiles measured fastest on an H100 did (evals/h200/attn_tiles.py,
2026-12-07: at 128, 128 x 64 with 8 warps, 1.476 ms against the old 64 x 64 default's 2.333 and
eager SDPA's 1.548; at 256, 32 x 32 with 4 warps, where the old default needed 384 KiB of shared
memory, more than a block may have), and the shared-memory model that screens the tuning moves
(attention.shared_bytes) is what Triton allocates for tiles of 64 rows or more (the H100's
"Required" figures agree) and a bound above it for smaller ones."""

from __future__ import annotations

import pytest
from expert_helpers import check_jobs, describe_many, request, run_jobs, stage
from fakes import best_from_reply

from nodes.expert import ExpertCode
from nodes.expert.code import plan_for
from nodes.expert.families import attention

SDPA = """
import torch
import torch.nn as nn
import torch.nn.functional as F

B, H, S, D = 1, 2, 80, {d}


class Model(nn.Module):
    def forward(self, q, k, v):
        return F.scaled_dot_product_attention(q, k, v)


def get_inputs():
    return [torch.randn(B, H, S, D) for _ in range(3)]


def get_init_inputs():
    return []
"""

HEAD_DIMS = (64, 128, 256)
# Spilled bytes a thread the seed may keep (at this file's sequence length 80): none at 64; the
# measured-fastest tiles spill a little at 128 (156 bytes here, 20 at length 1024 on the H100)
# and more at 256 (1736 here), where every tiling that fits shared memory spills.
MAX_SPILLS = {64: 0, 128: 256, 256: 2048}


@pytest.fixture(scope="module")
def cases():
    srcs = [SDPA.format(d=d) for d in HEAD_DIMS]
    descs = describe_many([(s, {}) for s in srcs])
    code = ExpertCode()
    out = {}
    for d, src, desc in zip(HEAD_DIMS, srcs, descs, strict=True):
        r = code.write(request(desc, seed_index=0, n_seeds=1))
        assert r.source is not None and r.family == "attention", r.note
        out[d] = (src, desc, r)
    return out


@pytest.fixture(scope="module")
def compiled(cases):
    jobs = [dict(check_jobs(src, {}, [r])[0], kind="compile", ptxas=True) for src, _, r in cases.values()]
    return dict(zip(cases, run_jobs(jobs, interpret=False), strict=True))


@pytest.mark.parametrize("d", HEAD_DIMS)
def test_seed_tiles_fit_the_head_dim(d, cases, compiled):
    _, desc, r = cases[d]
    res = compiled[d]
    assert res.get("ok"), res.get("error")
    (k,) = res["kernels"]
    plan = plan_for(desc).units[0].plan
    assert plan.head_dim == d
    model = attention.shared_bytes(plan, r.params)
    # exact for tiles of 64 rows or more, an upper bound below (a buffer reused)
    assert k["shared"] == model if r.params["BLOCK_M"] >= 64 else k["shared"] <= model, (k, r.params)
    assert k["shared"] <= attention.SMEM_LIMIT, (k, r.params)
    assert k["spills"] is not None and k["spills"] <= MAX_SPILLS[d], (k, r.params)


def test_tuning_moves_stay_within_shared_memory(cases):
    """Every tiling and memory move around the head-dim-128 seed that the expert proposes fits
    a block's shared memory (by the model the test above holds to Triton's allocation); the
    moves that would not are screened out rather than failing at launch."""
    src, desc, seed = cases[128]
    best = best_from_reply(seed)
    plan = plan_for(desc).units[0].plan
    code = ExpertCode()
    proposed = []
    for name in ("tiling", "memory"):
        for i in range(12):
            r = code.write(request(desc, mode="tune", stage=stage(name), best=best, seed_index=i, n_seeds=12))
            if r.source is None:
                break
            proposed.append(r.params)
            assert attention.shared_bytes(plan, r.params) <= attention.SMEM_LIMIT, r.params
    assert len(proposed) >= 4
    # what the screen refuses: 128 x 64 tiles with two stages (256 KiB at head dim 128), and key
    # tiles of 16, which faulted on an H100
    base = dict(seed.params)
    assert "shared memory" in attention.valid(plan, dict(base, BLOCK_M=128, BLOCK_N=64, num_stages=2))
    assert "faulted" in attention.valid(plan, dict(base, BLOCK_N=16))
    assert attention.valid(plan, base) is None
