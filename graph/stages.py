"""The four stages of the EGG method, as data.

Stage 1 (algorithmic structure design) explores several algorithms in parallel and refines the
best; stage 2 (hardware-specific tuning) runs three sub-stages in order: parallel mapping, tensor
tiling and memory optimization. The factory builds one subgraph per spec.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal


@dataclass(frozen=True)
class StageSpec:
    name: str
    title: str
    objective: str
    may_change: tuple[str, ...]
    must_keep: tuple[str, ...]
    principles: tuple[str, ...] = ()
    # "explore": fan out seeds, keep the best verified, then refine it; "tune": revise the best.
    kind: Literal["explore", "tune"] = "tune"


ALGORITHM = StageSpec(
    name="algorithm",
    title="Algorithmic structure design",
    objective="Find the fastest correct algorithm for the whole computation: what is fused, what is computed "
    "once, which one-pass or online forms and exact algebraic rewrites apply.",
    may_change=("kernel decomposition", "fusion", "one-pass/online forms", "exact algebra", "split-K"),
    must_keep=("results within tolerance of the reference", "ModelNew's constructor and parameter names"),
    principles=(
        "fuse producer-consumer chains so intermediates never reach global memory",
        "prefer one-pass (online) reductions over re-reading inputs",
        "use exact algebraic identities only; never trade accuracy for speed",
        "accumulate in fp32",
    ),
    kind="explore",
)

MAPPING = StageSpec(
    name="mapping",
    title="Parallel mapping",
    objective="Choose how work maps onto programs: grid shape, work per program, program ordering for L2 "
    "reuse, persistent programs.",
    may_change=("grid shape", "rows/tiles per program", "grouped program ordering", "persistent kernels"),
    must_keep=("the algorithm chosen by the algorithm stage", "block sizes", "memory parameters"),
    principles=(
        "enough programs to fill 132 SMs several times over, or a persistent grid of one wave",
        "grouped (swizzled) tile order so neighbouring programs share L2 lines",
        "give each program enough work to amortise its launch and prologue",
    ),
)

TILING = StageSpec(
    name="tiling",
    title="Tensor tiling",
    objective="Choose block sizes (tl.constexpr) for the chosen mapping by timing a small candidate set.",
    may_change=("BLOCK_* sizes",),
    must_keep=("the algorithm", "the parallel mapping"),
    principles=(
        "powers of two; larger tiles raise reuse until registers or shared memory spill",
        "on sm_90 watch registers per thread and shared memory per block: occupancy vs reuse",
    ),
)

MEMORY = StageSpec(
    name="memory",
    title="Memory optimization",
    objective="Tune how data moves: num_warps, num_stages software pipelining, vectorised and coalesced "
    "access, eviction hints.",
    may_change=("num_warps", "num_stages", "eviction/cache hints", "access order"),
    must_keep=("the algorithm", "the parallel mapping", "block sizes"),
    principles=(
        "coalesced, contiguous accesses along the fastest-varying dimension",
        "pipeline loads with num_stages where a loop streams tiles",
        "evict-first for data read once, evict-last for data reused",
    ),
)

STAGES: dict[str, StageSpec] = {s.name: s for s in (ALGORITHM, MAPPING, TILING, MEMORY)}
STAGE_ORDER: tuple[str, ...] = tuple(STAGES)
