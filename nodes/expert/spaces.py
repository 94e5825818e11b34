"""Tuning spaces, kept as data apart from the generators.

For each family and stage: param -> candidate values, in the order tried when the profiler gives
no reason to prefer another. The first value of a list is NOT the default; defaults are in
DEFAULTS. "tune" mode walks one param at a time (coordinate search) around the best kernel.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

Space = dict[str, dict[str, list[Any]]]  # stage -> param -> values

SPACES: dict[str, Space] = {
    "elementwise": {
        "mapping": {"PERSISTENT": [True, False]},
        "tiling": {"BLOCK": [4096, 1024, 8192, 512, 2048]},
        "memory": {"num_warps": [4, 8, 16, 2], "EVICT": ["evict_first", ""]},
    },
    "softmax": {
        "mapping": {"ROWS": [1, 2, 4, 8]},
        "tiling": {"BLOCK_N": [2048, 8192, 1024, 16384, 4096]},
        "memory": {"num_warps": [4, 16, 8, 32, 2], "EVICT": ["evict_first", ""]},
    },
    "reduction": {
        "tiling": {"BLOCK_N": [4096, 1024, 8192, 512]},
        "memory": {"num_warps": [4, 16, 2]},
    },
    "rownorm": {
        "tiling": {"BLOCK_N": [2048, 8192, 1024]},
        "memory": {"num_warps": [4, 16]},
    },
    # tl.dot GEMMs (tiled, tiled-ieee, split-k, tiled-persistent); gemm.space() adds the K-major
    # operand copy (memory), SPLIT_K / PROGS_PER_SM (mapping) per algorithm. Tiles dot_tile_problem
    # rejects (shared memory, registers) are skipped.
    "gemm": {
        "mapping": {"GROUP_M": [16, 4, 1, 8]},
        "tiling": {
            "BLOCK_M": [64, 128, 256],
            "BLOCK_N": [256, 64, 128],
            "BLOCK_K": [64, 16, 32],
        },
        "memory": {"num_stages": [4, 2, 5, 3], "num_warps": [4, 8]},
    },
    # implicit-GEMM convolution (BLOCK_N / BLOCK_K are caps: the launcher shrinks them to the
    # channels per group, so small groups do not pay for padding columns)
    "conv": {
        "mapping": {"GROUP_M": [1, 4, 16], "CHANNELS_LAST": [True, False]},
        "tiling": {
            "BLOCK_M": [64, 256, 128],
            "BLOCK_N": [128, 32, 256, 64],
            "BLOCK_K": [64, 16, 32],
        },
        "memory": {"num_stages": [4, 2, 5, 3], "num_warps": [8, 4]},
    },
    # recurrent layers: the per-step fused GEMM + cell kernel (BLOCK_H 0: the launcher's choice).
    # On an H100 (batch 128, hidden 512, 3xTF32) 16x64x64 with 2 stages was the best of 36 points,
    # 38.7 us a step; with fp32 FMAs 16x16x64 was.
    "rnn": {
        "tiling": {"BLOCK_H": [16, 32, 64], "BLOCK_B": [32], "BLOCK_K": [32, 128]},
        "memory": {"num_stages": [1, 3], "num_warps": [8, 2]},
    },
    # direct (depthwise / tiny groups) convolution: one output pixel per lane
    "conv-direct": {
        "tiling": {"BLOCK": [1024, 256, 2048, 512]},
        "memory": {"num_warps": [8, 2, 4]},
    },
}

DEFAULTS: dict[str, dict[str, Any]] = {
    # Memory-bound: 8 fp32 per thread keeps two 16-byte loads per operand in flight per thread.
    "elementwise": {"BLOCK": 2048, "PERSISTENT": False, "num_warps": 8, "EVICT": ""},
    # ROWS only matters for the whole-row algorithm on short rows; BLOCK_N for the looped ones.
    "softmax": {"ROWS": 1, "BLOCK_N": 4096, "num_warps": 8, "EVICT": ""},
    "reduction": {"BLOCK_N": 2048, "num_warps": 8},
    "rownorm": {"BLOCK_N": 4096, "num_warps": 8},
    "scan": {"BLOCK_N": 1024, "num_warps": 4},
    "xent": {"BLOCK_N": 1024, "num_warps": 4},
    "pooling": {"BLOCK": 512, "num_warps": 4},
    "batchnorm": {"BLOCK": 2048, "PERSISTENT": False, "num_warps": 8, "EVICT": ""},
    "groupnorm": {"BLOCK_N": 2048, "num_warps": 8},
    "rowloss": {"BLOCK_N": 1024, "num_warps": 4},
    "attention": {"BLOCK_M": 64, "BLOCK_N": 64, "num_warps": 4, "num_stages": 2},
    # the fused epilogue after a library conv is an elementwise pass
    "libconv": {"BLOCK": 2048, "PERSISTENT": False, "num_warps": 8, "EVICT": ""},
    # 128x128x32 tiles, grouped ordering for L2 reuse, 3 stages: a solid sm_90 fp32 start point.
    "gemm": {
        "BLOCK_M": 128,
        "BLOCK_N": 128,
        "BLOCK_K": 32,
        "GROUP_M": 8,
        "num_stages": 3,
        "num_warps": 8,
        "SPLIT_K": 1,
    },
    # conv: only what every algorithm shares; conv.defaults() adds the per-algorithm tiles
    # (implicit GEMM: 128x64x32, GROUP_M 8, 3 stages, 4 warps; direct: 1024 pixels, 4 warps).
    "conv": {"num_warps": 4},
    "rnn": {"BLOCK_B": 16, "BLOCK_H": 0, "BLOCK_K": 64, "num_warps": 4, "num_stages": 2},
}

# Which stage's params to try first for each profiler bottleneck.
BOTTLENECK_ORDER: dict[str, dict[str, list[str]]] = {
    "memory": {
        "tiling": ["BLOCK", "BLOCK_V", "BLOCK_N", "BLOCK_R", "BLOCK_K", "BLOCK_M", "BLOCK_W", "ROWS_OUT"],
        "memory": ["EVICT", "KMAJOR", "num_warps", "num_stages"],
        "mapping": ["PROGS_PER_SM", "SPLIT_K", "PERSISTENT", "ROWS", "GROUP_M", "CHANNELS_LAST"],
    },
    "compute": {
        "tiling": ["BLOCK_M", "BLOCK_N", "BLOCK_K", "BLOCK", "BLOCK_V", "BLOCK_R"],
        "memory": ["num_stages", "KMAJOR", "num_warps", "EVICT"],
        "mapping": ["SPLIT_K", "GROUP_M", "PROGS_PER_SM", "CHANNELS_LAST", "ROWS", "PERSISTENT"],
    },
    "latency": {
        "tiling": ["BLOCK", "BLOCK_N", "BLOCK_M", "BLOCK_K", "BLOCK_V", "BLOCK_R"],
        "memory": ["num_warps", "num_stages", "EVICT", "KMAJOR"],
        "mapping": ["PROGS_PER_SM", "SPLIT_K", "ROWS", "PERSISTENT", "GROUP_M"],
    },
}


def next_pow2(n: int) -> int:
    """The smallest power of two >= n (1 for n <= 1), as triton.next_power_of_2 on the host."""
    return 1 << max(0, int(n) - 1).bit_length()


def distinct_launches(values: list[int], current: int, launched: Callable[[int], int]) -> list[int]:
    """The values of a tuning list whose launched size (`launched(v)`: what the launcher makes of
    v at the task's sizes, e.g. a block capped by the row's power of two) differs from the current
    value's and from every earlier value kept: each one a different kernel."""
    seen, out = {launched(current)}, []
    for v in values:
        if launched(v) not in seen:
            seen.add(launched(v))
            out.append(v)
    return out
