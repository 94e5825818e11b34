"""ExpertProfiler: reads the ProfileReport and compile info and says what limits the kernel.

Beyond the roofline's bottleneck (memory / compute / latency), a kernel far from its roofline gets
the reasons its algorithm is known to lose time for, worked out from the shapes (the family plan
of the op graph), the candidate's parameters and the compiled kernels: a grid that leaves SMs idle,
registers that leave too few warps resident, operand layouts that force narrow copies, an
algorithm that moves more bytes than the roofline counts. Each reason names the parameters that
address it; the tuning stages search those for that algorithm (each family's space() holds the
parameters that matter for the algorithm, spaces.BOTTLENECK_ORDER their order per bottleneck).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from graph.records import ProfilerAdvice, RoleUsage, TaskDescription
from nodes.models import ProfilerRequest

from .graphview import Unsupported
from .hostgraph import HOST_BOUND_RATIO, host_bound
from .lowering import PARTITION, Lowering, lower, own
from .partition import group_cost

# H200 figures used to interpret achieved numbers when the report has no roofline fraction.
PEAK_GBPS = 4300.0
SMS = 132
REGISTERS_PER_SM = 65536
# Below this fraction of its roofline a kernel is "far" from it and its algorithm's reasons apply.
FAR = 0.6

_PLANS = {
    "memory": (
        "memory-bound: raise bytes in flight and cut traffic — larger BLOCK per program, evict_first "
        "on streamed inputs, fuse remaining passes so each byte is read once"
    ),
    "compute": (
        "compute-bound: keep tensor cores fed — larger output tiles (128x128/128x256), deeper "
        "pipelining (num_stages 3-5), GROUP_M ordering for L2 reuse of the operand tiles"
    ),
    "latency": (
        "latency/launch-bound: too little work per launch — fewer, larger programs (more rows or "
        "elements per program), fewer kernels, fewer warps per small tile"
    ),
    "unknown": "no timing evidence: tune tile sizes first, then warps/stages",
}


class ExpertProfiler:
    name = "expert"

    def advise(self, req: ProfilerRequest) -> tuple[ProfilerAdvice, RoleUsage]:
        p = req.profile
        evidence = list(p.evidence)
        bottleneck = p.bottleneck
        if p.roofline_fraction is not None:
            evidence.append(f"roofline fraction {p.roofline_fraction:.2f}")
        if p.achieved_gbps is not None:
            evidence.append(
                f"achieved {p.achieved_gbps:.0f} GB/s ({p.achieved_gbps / PEAK_GBPS:.0%} of peak)"
            )
        if p.achieved_tflops is not None:
            evidence.append(f"achieved {p.achieved_tflops:.1f} TFLOP/s")
        timing = req.attempt.timing
        if bottleneck == "unknown" and timing is not None and timing.measured and timing.candidate_ms:
            if timing.candidate_ms < 0.02:
                bottleneck = "latency"
                evidence.append(f"{timing.candidate_ms * 1000:.1f} us per call: launch overhead dominates")
        if bottleneck == "unknown" and req.desc.flops is not None and req.desc.bytes_moved:
            intensity = req.desc.flops / req.desc.bytes_moved
            # The fp32-tensor-core ridge on H200 is ~100 FLOP/byte; well below it is memory-bound.
            bottleneck = "compute" if intensity > 60 else "memory"
            evidence.append(f"arithmetic intensity {intensity:.1f} FLOP/byte")
        ratio = host_bound(timing)
        launching = ratio is not None and ratio >= HOST_BOUND_RATIO
        if launching:
            assert ratio is not None and timing is not None and timing.cudagraph_ms is not None
            bottleneck = "latency"
            evidence.append(
                f"host-bound: a call takes {timing.candidate_ms:.4f} ms, the same "
                f"{timing.candidate_launches or 'many'} launches replayed as a CUDA graph "
                f"{timing.cudagraph_ms:.4f} ms: launching costs {1 - 1 / ratio:.0%} of the call"
            )
        plan = _PLANS[bottleneck]
        if launching:
            plan = (
                "host-bound: the GPU waits for the launches — replay the forward as one CUDA graph "
                "(host=graph) or launch fewer kernels; tiles, warps and stages cannot help here"
            )
        comp = req.attempt.compile
        if comp is not None:
            for k in comp.kernels:
                if k.spills:
                    evidence.append(f"{k.name}: {k.spills} bytes spilled ({k.registers} registers)")
                    plan = (
                        f"{k.name} spills registers: shrink the per-program tile or raise num_warps "
                        "before anything else; then " + plan
                    )
                elif k.registers is not None and k.registers >= 224:
                    evidence.append(f"{k.name}: {k.registers} registers per thread limits occupancy")
                if k.mma == "mma.sync":
                    evidence.append(
                        f"{k.name}: its dots compile to per-warp mma.sync, not Hopper's warpgroup "
                        "wgmma (wgmma needs tiles of 64+ rows per 4 warps and operands it can read "
                        "from shared memory: K-major for TF32)"
                    )
        far = p.roofline_fraction is None or p.roofline_fraction < FAR
        reasons = algorithm_reasons(req, bottleneck) if far else []
        for text, params in reasons:
            evidence.append(f"reason: {text} (tune {', '.join(params)})")
        if reasons:
            first = [q for _, ps in reasons for q in ps]
            plan = (
                f"{' '.join(t for t, _ in reasons)} Parameters that address this: "
                f"{', '.join(dict.fromkeys(first))}; " + plan
            )
        if p.suggestion:
            evidence.append(f"tool suggestion: {p.suggestion}")
        share = dominant_group(req.desc, req.attempt.candidate.params)
        if share is not None:
            tag, name, frac = share
            evidence.append(f"group {tag} ({name}) holds ~{frac:.0%} of the estimated work")
            plan = f"tune {tag} first: it dominates the estimated work; then " + plan
        return ProfilerAdvice(bottleneck=bottleneck, evidence=evidence, plan=plan), RoleUsage(calls=1)


def _lowering(desc: TaskDescription, params: dict) -> Lowering | None:
    """The lowering a candidate with these parameters was written from (None: unsupported)."""
    # The policy shapes the groups only where a family's algorithms are all library calls; a
    # candidate using none of them was planned as under strict.
    lib = any(str(v).startswith("library") for k, v in params.items() if k.split(".")[-1] == "algorithm")
    try:
        return lower(desc, "mixed" if lib else "strict").at(params)
    except Unsupported:
        return None


def dominant_group(desc: TaskDescription, params: dict) -> tuple[str, str, float] | None:
    """(tag, family, share) of the group with the most estimated work, for a partitioned
    candidate (its parameters are namespaced by group); None for a whole-graph kernel."""
    if params.get("algorithm") != PARTITION:
        return None
    low = _lowering(desc, params)
    if low is None:
        return None
    costs = [(group_cost(low.view, u.group), u) for u in low.units if u.group is not None]
    total = sum(c for c, _ in costs)
    if not costs or total <= 0:
        return None
    cost, unit = max(costs, key=lambda x: x[0])
    return unit.tag or "", unit.name, cost / total


Reason = tuple[str, list[str]]  # (why, the parameters that address it)


def algorithm_reasons(req: ProfilerRequest, bottleneck: str) -> list[Reason]:
    """Why this candidate's algorithm may sit far from the roofline at these shapes."""
    cand = req.attempt.candidate
    algo = cand.algorithm or str(cand.params.get("algorithm") or "")
    if not algo:
        return []
    params = dict(cand.params)
    out: list[Reason] = []
    comp = req.attempt.compile
    if comp is not None and comp.ok and bottleneck in ("memory", "latency"):
        out += _occupancy(comp.kernels)
    low = _lowering(req.desc, params)
    for unit in low.units if low is not None else []:
        rule = _RULES.get(unit.name)
        mine = own(unit.tag, params)
        if rule is None or unit.is_library(mine):
            continue
        try:
            found = rule(unit.plan, str(mine.get("algorithm") or algo), mine, bottleneck)
        except (KeyError, IndexError, TypeError, ValueError) as e:  # a rule that misreads a plan
            found = [(f"no algorithm reasons for {unit.name}: {type(e).__name__}: {e}", [])]
        if unit.tag is None:
            out += found
        else:  # a group of a partition: its parameters are namespaced by its tag
            out += [(f"{unit.tag}: {why}", [f"{unit.tag}.{q}" for q in qs]) for why, qs in found]
    launches = req.attempt.timing.candidate_launches if req.attempt.timing else None
    if bottleneck == "latency" and launches and launches > 1:
        out.append((f"{launches} kernel launches per forward for little work.", ["PROGS_PER_SM", "BLOCK"]))
    return out


def _occupancy(kernels: list[Any]) -> list[Reason]:
    out: list[Reason] = []
    for k in kernels:
        if not k.registers or not k.num_warps:
            continue
        ctas = REGISTERS_PER_SM // (k.registers * 32 * k.num_warps)
        warps = ctas * k.num_warps
        if warps < 16:
            out.append(
                (
                    f"{k.name}: {k.registers} registers x {k.num_warps} warps leave {warps} warps resident "
                    "per SM, too few loads in flight to cover memory latency.",
                    ["num_warps", "BLOCK", "BLOCK_N", "BLOCK_V", "BLOCK_R", "ROWS_OUT"],
                )
            )
    return out


def _cdiv(a: int, b: int) -> int:
    return -(-a // max(b, 1))


def _gemm(plan: Any, algo: str, p: dict[str, Any], bottleneck: str) -> list[Reason]:
    out: list[Reason] = []
    if algo == "gemv-splitk":
        lines = max(plan.m, plan.n) * plan.batch
        if lines < SMS * 64 and p.get("SPLIT_K", 0) == 0:
            out.append(
                (
                    f"a GEMV over {lines} output lines needs its K split across programs to keep "
                    "every SM streaming the matrix.",
                    ["PROGS_PER_SM", "SPLIT_K"],
                )
            )
        out.append(
            (
                "a GEMV is a pure stream: bytes in flight per SM set its speed.",
                ["BLOCK_V", "BLOCK_R", "num_warps"],
            )
        )
        return out
    if "BLOCK_M" not in p:
        return out
    tiles = _cdiv(plan.m, p["BLOCK_M"]) * _cdiv(plan.n, p["BLOCK_N"]) * plan.batch
    if algo == "split-k":
        out.append(
            (
                f"{tiles} output tile(s): the K split decides how many SMs work; its partials add "
                f"{tiles * p['BLOCK_M'] * p['BLOCK_N'] * 8} bytes per chunk.",
                ["SPLIT_K", "PROGS_PER_SM", "BLOCK_M", "BLOCK_N"],
            )
        )
    elif tiles < SMS:
        out.append(
            (
                f"{tiles} output tiles of {p['BLOCK_M']}x{p['BLOCK_N']} leave {SMS - tiles} of {SMS} SMs idle.",
                ["BLOCK_M", "BLOCK_N"],
            )
        )
    elif tiles % SMS and tiles < 4 * SMS and algo != "tiled-persistent":
        out.append(
            (
                f"{tiles} tiles are {tiles / SMS:.2f} waves over {SMS} SMs: the last wave runs part-empty.",
                ["BLOCK_M", "BLOCK_N", "PROGS_PER_SM"],
            )
        )
    if plan.dtype == "float32" and bottleneck == "compute":
        # tiled-presplit's split operands are K-major and padded already
        if not p.get("KMAJOR") and p.get("PRECISION") != "tf32x3-presplit":
            out.append(
                (
                    "an operand that is not K-major (a plain (K, N) B, a transposed A) or has unaligned "
                    "rows reaches the TF32 MMA's shared-memory layout through 4-byte async copies.",
                    ["KMAJOR"],
                )
            )
        if p.get("PRECISION") == "tf32x3":
            out.append(
                (
                    "3xTF32 issues three tensor-core MMAs per product (fp32 accuracy) and splits "
                    "every operand tile in registers inside the K loop, B's halves written back to "
                    "shared memory each step (at 128x128 tiles the sm_90 kernel spills registers); "
                    "splitting B once before the GEMM (A stays in registers) or both operands takes "
                    "that out of the loop, deeper pipelines hide it, TF32 is one MMA if the checker "
                    "accepts it.",
                    ["PRECISION=tf32x3-bsplit", "algorithm=tiled-presplit", "num_stages", "BLOCK_K"],
                )
            )
    return out


def _rows(rows: int, length: int, algo: str, what: str) -> list[Reason]:
    if algo != "split-row" and rows < 2 * SMS and length >= 4096:
        return [
            (
                f"one program per {what}: {rows} {what}s of {length} elements keep at most {rows} "
                f"of {SMS} SMs busy; split-row spreads each {what} over many programs.",
                ["algorithm=split-row"],
            )
        ]
    if algo == "split-row":
        return [
            (
                f"split-row's {what} chunks: the programs per SM and the tile per step set the bytes in "
                "flight; it also reads each row once more than the roofline counts.",
                ["PROGS_PER_SM", "BLOCK_N", "num_warps"],
            )
        ]
    return []


def _rownorm(plan: Any, algo: str, p: dict[str, Any], bottleneck: str) -> list[Reason]:
    from .families.rownorm import pass_levels, rows_and_length

    rows, length = rows_and_length(plan)
    out = _rows(rows, length, algo, "row")
    # whole-row holds the row in registers: one read, one write
    passes = {"split-row": max(pass_levels(plan).values(), default=0), "multi-pass": plan.n_levels}.get(
        algo, 0
    )
    if passes:
        out.append(
            (
                f"{passes + 1} passes over each row (statistics, then the write): "
                f"{passes + 2} tensor-sized transfers against the roofline's 2.",
                ["BLOCK_N"],
            )
        )
    return out


def _reduction(plan: Any, algo: str, p: dict[str, Any], bottleneck: str) -> list[Reason]:
    if plan.inner == 1:
        return _rows(plan.outer, plan.rlen, algo, "row")
    blocks = plan.outer * _cdiv(plan.inner, 128)
    if algo == "columns" and blocks < 2 * SMS and plan.rlen >= 1024:
        return [
            (
                f"{blocks} column blocks of {plan.rlen} rows: one program each keeps at most {blocks} "
                f"of {SMS} SMs busy; split-columns splits the rows too.",
                ["algorithm=split-columns"],
            )
        ]
    if algo == "split-columns":
        return [("the split of the reduced dim sets the programs per SM.", ["PROGS_PER_SM", "num_warps"])]
    return []


def _pooling(plan: Any, algo: str, p: dict[str, Any], bottleneck: str) -> list[Reason]:
    if algo.endswith("direct-window"):
        loads = 1
        for k in plan.kernel:
            loads *= k
        return [
            (
                f"every output loads its {loads} window elements and decodes its flat index with "
                "divisions; row tiles share input rows between output rows.",
                ["algorithm=row-tiles"],
            )
        ]
    if algo.endswith("channels-last"):
        return [
            (
                "channels-last tiles: CL_BC contiguous channels x CL_TILE / CL_BC output pixels per "
                "program; each window element is one load of the tile's channels.",
                ["CL_BC", "CL_TILE", "num_warps"],
            )
        ]
    return [
        (
            "row tiles: more output rows per tile share more input rows (fewer loads per output) "
            "but hold more registers; wider tiles give 16-byte vectors.",
            ["ROWS_OUT", "BLOCK_W", "num_warps"],
        )
    ]


def _conv(plan: Any, algo: str, p: dict[str, Any], bottleneck: str) -> list[Reason]:
    out: list[Reason] = []
    if algo == "direct" or "BLOCK_M" not in p:
        return out
    if not p.get("CHANNELS_LAST"):
        out.append(
            (
                "an NCHW input gathers each tap's channel column with 4-byte async copies; "
                "channels-last copies 16-byte channel runs.",
                ["CHANNELS_LAST"],
            )
        )
    if p.get("PRECISION") in ("tf32x3", "tf32x3-bsplit"):
        out.append(
            (
                "3xTF32 is three MMAs per product; PyTorch's own convolutions are TF32.",
                ["PRECISION=tf32"],
            )
        )
    out.append((f"implicit-GEMM tiles for {plan.cpo} output channels per group.", ["BLOCK_N", "BLOCK_M"]))
    return out


def _libconv(plan: Any, algo: str, p: dict[str, Any], bottleneck: str) -> list[Reason]:
    if algo == "library-conv+fused-epilogue":
        return [
            (
                "the flat tail kernel decodes each element's channel with 64-bit index arithmetic "
                "and reads the NCHW library output; the tile tail does neither.",
                ["algorithm=library-conv+tile-epilogue"],
            )
        ]
    if algo == "library-conv+tile-epilogue":
        return [
            (
                "the library convolution's layout decides its speed (cuDNN is fastest channels-last) "
                "and the tail's coalescing.",
                ["CHANNELS_LAST", "BLOCK"],
            )
        ]
    if plan.triton_plan is not None:
        return _conv(plan.triton_plan, algo, p, bottleneck)
    return []


def _batchnorm(plan: Any, algo: str, p: dict[str, Any], bottleneck: str) -> list[Reason]:
    if algo.endswith("channel-tiles"):
        return [
            (
                "two passes over the input (statistics, then normalise): 3 tensor-sized transfers "
                "against the roofline's 2; the statistics split sets how many SMs read.",
                ["PROGS_PER_SM", "BLOCK", "APPLY_BLOCK", "FLAT_APPLY", "num_warps"],
            )
        ]
    return [
        (
            "the flat kernels decode (sample, channel, pixel) per element with divisions.",
            ["algorithm=channel-tiles"],
        )
    ]


_RULES: dict[str, Callable[[Any, str, dict[str, Any], str], list[Reason]]] = {
    "gemm": _gemm,
    "rownorm": _rownorm,
    "reduction": _reduction,
    "pooling": _pooling,
    "conv": _conv,
    "libconv": _libconv,
    "batchnorm": _batchnorm,
}
