"""Every tuning variant changes what runs. An offline audit of 2026-12-07 (each suite task's
first seed and its tuning variants run with Triton's launches recorded) found variants that
changed a parameter the timed launch never reads, each compiled, timed and screened out as the
same kernel: row-tile widths cut to the same tile on narrow pooling rows (pl02-pl06: 3-4 per
task), the multi-pass kernel's warps for whole-row norms (nm01-nm10: 2 each), the row kernel's
warps for reductions over a middle dim (rd01, rd02, rd04, rd08: 3 each; softmax had the same,
dbb6005). The variants now change the width actually launched, the whole-row kernel's warps,
and the column kernels' tile and warps; a variant of each runs sandboxed against the reference."""

from __future__ import annotations

import pytest
from expert_helpers import check_jobs, describe_many, request, run_jobs, stage
from expert_tasks import ROWNORM_CASES, ROWNORM_TEMPLATE
from fakes import best_from_reply

POOL = """import torch
import torch.nn as nn

B = 2
C = 3
H = 20
W = 112


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.pool = nn.MaxPool2d(2)

    def forward(self, x):
        return self.pool(x)


def get_inputs():
    return [torch.randn(B, C, H, W)]


def get_init_inputs():
    return []
"""
COLSUM = """import torch
import torch.nn as nn

R = 300
N = 70


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.sum(x * 2.0, dim=0)


def get_inputs():
    return [torch.randn(R, N)]


def get_init_inputs():
    return []
"""
init, expr = ROWNORM_CASES["rn_layernorm_module"]
LAYERNORM = ROWNORM_TEMPLATE.replace("{init}", init).replace("{expr}", expr)
TASKS = {"pool": (POOL, {}), "colsum": (COLSUM, {}), "layernorm": (LAYERNORM, {})}


@pytest.fixture(scope="module")
def variants():
    from nodes.expert import ExpertCode

    code = ExpertCode()
    out = {}
    for name, desc in zip(TASKS, describe_many(list(TASKS.values())), strict=True):
        seed = code.write(request(desc, seed_index=0, n_seeds=1))
        best = best_from_reply(seed)
        per = {}
        for st in ("tiling", "memory"):
            rs = []
            for i in range(6):
                r = code.write(
                    request(desc, mode="tune", stage=stage(st), best=best, seed_index=i, n_seeds=6)
                )
                if r.source is None:
                    break
                rs.append(r)
            per[st] = rs
        out[name] = (seed, per)
    return out


def test_pool_row_tile_widths_are_the_ones_the_launcher_keeps(variants):
    seed, per = variants["pool"]
    assert seed.algorithm == "row-tiles"
    # 56 output columns: the default 512 is a 64-wide tile, as 256, 1024 and 128 would be
    widths = [r.params["BLOCK_W"] for r in per["tiling"] if r.params["BLOCK_W"] != seed.params["BLOCK_W"]]
    assert widths == [], widths  # 64 is the tile already: no width changes it; ROWS_OUT does
    assert per["tiling"] and all(r.params["ROWS_OUT"] != seed.params["ROWS_OUT"] for r in per["tiling"])


def test_whole_row_norm_tunes_the_whole_row_kernels_warps(variants):
    seed, per = variants["layernorm"]
    assert seed.algorithm == "whole-row"
    warps = [r.params.get("ROW_WARPS") for r in per["memory"]]
    assert len(warps) == 2 and 0 not in warps and None not in warps, warps
    for r, w in zip(per["memory"], warps, strict=True):
        assert "num_warps=warps)" in r.source and f"warps = {w}" in r.source


def test_column_reduction_tunes_the_column_tile_and_warps(variants):
    seed, per = variants["colsum"]
    assert seed.params.get("BLOCK_I") == 128, seed.params
    assert [r.params["BLOCK_I"] for r in per["tiling"]] == [64, 256, 32]
    assert sorted(r.params["num_warps"] for r in per["memory"]) == [2, 8]
    for r in per["tiling"]:
        assert f"block_i = min({r.params['BLOCK_I']}," in r.source
    for r in per["memory"]:
        assert f"FINAL=True, num_warps={r.params['num_warps']})" in r.source


def test_the_new_variants_match_the_reference(variants):
    jobs = []
    for name, pick in (("colsum", ("tiling", 2)), ("colsum", ("memory", 0)), ("layernorm", ("memory", 1))):
        r = variants[name][1][pick[0]][pick[1]]
        jobs += check_jobs(TASKS[name][0], {}, [r], trials=2)
    for res in run_jobs(jobs, interpret=True):
        assert res.get("ok"), res.get("error")


def test_row_reduction_blocks_are_the_ones_the_launcher_keeps():
    """The row kernels take min(BLOCK_N, the row's power of two): on rows of 300 (512) every
    block of the tiling space is the same kernel as the default 2048, so none is offered."""
    from nodes.expert import ExpertCode

    src = COLSUM.replace("torch.sum(x * 2.0, dim=0)", "torch.logsumexp(x, dim=1)").replace(
        "N = 70", "N = 3000"
    )
    src = src.replace("R = 300", "R = 64")
    long_rows = describe_many([(src, {})])[0]
    short_rows = describe_many([(src.replace("N = 3000", "N = 300"), {})])[0]
    code = ExpertCode()
    blocks = {}
    for name, desc in (("long", long_rows), ("short", short_rows)):
        seed = code.write(request(desc, seed_index=0, n_seeds=1))
        best = best_from_reply(seed)
        rs = [
            code.write(request(desc, mode="tune", stage=stage("tiling"), best=best, seed_index=i, n_seeds=6))
            for i in range(6)
        ]
        blocks[name] = (seed.algorithm, [r.params.get("BLOCK_N") for r in rs if r.source is not None])
    assert blocks["short"][1] == [], blocks
    # 3000 -> 4096: 4096 and 8192 are one kernel, 1024 and 512 two others (default 2048)
    assert blocks["long"][1] == [4096, 1024, 512], blocks
