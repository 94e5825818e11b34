"""Matmul / linear (2D, batched, broadcast-batched, transposed operands) + fused elementwise epilogue.

Algorithms (the seeds):
  tiled          output-tiled tl.dot kernel, GROUP_M grouped tile order, epilogue fused into the
                 store; fp32 operands use 3xTF32 ("tf32x3": tensor cores at near-fp32 accuracy)
  tiled-ieee     the same with true fp32 dot products (slower, exact to fp32 rounding)
  split-k        K split over SPLIT_K programs writing fp32 partials, then a reduce kernel that
                 applies the epilogue (for small M*N with a long K; SPLIT_K 0 sizes the split at
                 launch to fill the SMs once)
  tiled-persistent  the tiled kernel on a persistent grid (PROGS_PER_SM programs per SM) walking
                 the output tiles of every batch in grouped order (batched / many-tile GEMMs)
  tiled-presplit the tiled kernel on fp32 operands split once before it into TF32 high and
                 fp32 low parts, K-major and K-padded (kernels/tf32split.py), then three plain
                 TF32 dots per K step ("tf32x3-presplit"): the 3xTF32 accuracy without splitting
                 every tile in registers inside the K loop (for GEMMs whose M and N are large
                 enough that the split's extra operand traffic is small next to the MMAs)
Parameters shared by the tl.dot algorithms: PRECISION (fp32 operands: tf32x3 by default, ieee,
tf32x3-bsplit for tiled and split-k (B split once before the GEMM, A in registers; split-k's
default from 128 rows of A, see _bsplit_pays), or tf32 as a
last refinement the checker judges; reports show it), FRESH_ACC (the split 3xTF32 forms sum each
K step's three products in a zero accumulator before adding it to the running sum, as Triton's
tf32x3 does: see _three_dots) and KMAJOR (copy operands that
are not K-major, or whose K rows are not 16-byte aligned, into K-major buffers with K zero-padded to
BLOCK_K: 16-byte async copies for the TF32 MMAs and a mask-free K loop; on by default where the
copy is cheap next to the GEMM). Output tiles are sized from the shape (halved while they would
leave SMs idle), so ragged, non-power-of-two dims do not collapse onto a few programs.
  library+fused-epilogue  matmul stays a library call (mixed policy only), the whole epilogue
                 is one Triton kernel
  gemv-splitk    a vector operand (N == 1 or M == 1): the matrix streamed once in coalesced
                 16-byte loads, K split over enough programs to fill the GPU, fp32 FMA partials,
                 then the reduce + epilogue kernel of split-k (the first seed for such shapes)
Epilogue operands (bias, residuals, scales) are read through their broadcast strides, so any
tensor that broadcasts to the output works without a copy.

Row-reduction epilogue: GEMM -> elementwise chain -> sum / mean / amax / amin (or max/min(dim)
values) over the output-feature (last) dim, e.g. F.gelu(linear(x)).sum(1). Algorithms:
  tiled+atomic-rowreduce   each BLOCK_M x BLOCK_N tile applies the epilogue, reduces its rows and
                           atomically combines the partial row results into the (M,) output
                           (zero / -inf initialised); order-dependent fp32 rounding, in tolerance
  tiled+rowreduce-kernel   the tiled GEMM writes the (M, N) epilogue result, a second kernel
                           reduces each row (deterministic, one extra M x N round trip)
  tiled-rowband            one program per BLOCK_M row band loops over every N tile, keeping the
                           row results in registers (deterministic, no atomics, fewer programs)
  tiled-ieee+atomic-rowreduce  the atomic variant with true fp32 dot products
  library+fused-epilogue-rowreduce  library matmul, then one kernel: epilogue + row reduction
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from graph.records import TaskDescription

from .. import ewops
from ..chain import Chain, collect_chain, leaf_launch_args
from ..graphview import GraphView, Leaf, Unsupported, arg_value, assemble, is_node
from ..kernelfiles import jit_source, kernel_source
from . import elementwise as ew

VIEW_OPS = {"t", "transpose", "permute", "T", "mT", "getattr"}


@dataclass
class GemmPlan:
    kind: str  # "linear" | "matmul"
    a_expr: str  # Python expression (forward scope) of the left operand (views applied)
    b_expr: str  # right operand as (.., K, N) — for linear the weight's transpose view
    bias_expr: str | None
    epilogue: Chain
    gemm_node: str
    m: int
    n: int
    k: int
    dtype: str
    leaves_in_forward: list[str] = field(default_factory=list)
    # Row-reduction epilogue over the last (output-feature) dim, applied after `epilogue`.
    reduce: str | None = None  # "sum" | "mean" | "max" | "min"
    keepdim: bool = False
    # Independent GEMMs (bmm / broadcast batch); 1 when a batched A meets a 2-D B (folded into M).
    batch: int = 1


# reduction op -> (kind, identity literal)
ROW_REDUCE = {"sum": "sum", "mean": "mean", "amax": "max", "amin": "min", "max": "max", "min": "min"}
_RED_IDENTITY = {"sum": "0.0", "mean": "0.0", "max": "-float('inf')", "min": "float('inf')"}


def _operand(view: GraphView, ref: Any, depth: int = 0) -> str:
    """Python expression for a GEMM operand: a leaf, possibly through transpose/permute views."""
    if not is_node(ref):
        raise Unsupported("matmul with a constant operand")
    name = view.resolve(ref["node"])
    leaf = view.leaves.get(name)
    if leaf is not None:
        if leaf.is_scalar:
            raise Unsupported("matmul with a scalar operand")
        return leaf.expr
    n = view.nodes[name]
    if depth > 3 or n.kind not in ("call_method", "call_function"):
        raise Unsupported(f"matmul operand produced by {n.op}")
    inner = _operand(view, n.args[0], depth + 1)
    if n.op == "t":
        return f"{inner}.t()"
    if n.op == "transpose":
        d0, d1 = arg_value(n, 1, "dim0"), arg_value(n, 2, "dim1")
        return f"{inner}.transpose({int(d0)}, {int(d1)})"
    if n.op == "permute":
        dims = n.args[1:] if len(n.args) > 2 else n.args[1]
        return f"{inner}.permute({', '.join(str(int(d)) for d in dims)})"
    if n.op == "getattr" and len(n.args) > 1 and n.args[1] in ("T", "mT"):
        return f"{inner}.{n.args[1]}"
    raise Unsupported(f"matmul operand produced by {n.op}")


def match(view: GraphView) -> GemmPlan | None:
    nodes = view.compute_nodes()
    gem = [n for n in nodes if n.op in ("linear", "matmul")]
    if len(gem) != 1:
        return None
    g = gem[0]
    # Operand view ops (transposes) come before the GEMM and are folded into its strides.
    pre = nodes[: nodes.index(g)]
    for n in pre:
        if n.op not in VIEW_OPS:
            raise Unsupported(f"{n.op} before the matmul is not fused")
    epi_nodes = nodes[nodes.index(g) + 1 :]
    epi_nodes, reduce, keepdim = _row_reduction(view, g, epi_nodes)
    epilogue = collect_chain(view, epi_nodes, internal={g.name})
    for n in epi_nodes:
        if n.shape != g.shape:
            raise Unsupported("matmul epilogue changes the shape")
    shape = g.shape or []
    if g.op == "linear":
        if g.kind == "call_module":
            a = _operand(view, g.args[0])
            w = f"self.{g.target}.weight"
            bias = f"self.{g.target}.bias" if g.module_attrs.get("bias") else None
        else:
            a = _operand(view, g.args[0])
            w = _operand(view, arg_value(g, 1, "weight"))
            b = arg_value(g, 2, "bias")
            bias = _operand(view, b) if b is not None else None
        b_expr = f"{w}.t()"
        k = int(view.nodes[view.resolve(g.args[0]["node"])].shape[-1]) if is_node(g.args[0]) else 0
        return GemmPlan(
            "linear",
            a,
            b_expr,
            bias,
            epilogue,
            g.name,
            _prod(shape[:-1]),
            shape[-1] if shape else 0,
            k,
            g.dtype or "float32",
            reduce=reduce,
            keepdim=keepdim,
        )
    a_ref = g.args[0] if g.args else g.kwargs.get("input")
    b_ref = g.args[1] if len(g.args) > 1 else g.kwargs.get("other", g.kwargs.get("mat2"))
    a_shape = view.nodes[view.resolve(a_ref["node"])].shape or []
    b_shape = view.nodes[view.resolve(b_ref["node"])].shape or []
    if len(a_shape) < 2 or len(b_shape) < 2:
        raise Unsupported(f"matmul of ranks {len(a_shape)}x{len(b_shape)}")
    return GemmPlan(
        "matmul",
        _operand(view, a_ref),
        _operand(view, b_ref),
        None,
        epilogue,
        g.name,
        shape[-2] if len(b_shape) == 3 else _prod(shape[:-1]),
        shape[-1],
        a_shape[-1],
        g.dtype or "float32",
        reduce=reduce,
        keepdim=keepdim,
        batch=_prod(shape[:-2]) if len(b_shape) == 3 else 1,
    )


def _row_reduction(view: GraphView, g: Any, epi: list[Any]) -> tuple[list[Any], str | None, bool]:
    """Split a final reduction over the GEMM output's last dim off the elementwise epilogue.

    Returns (elementwise epilogue nodes, reduction kind or None, keepdim)."""
    reds = [i for i, n in enumerate(epi) if n.op in ROW_REDUCE]
    if not reds:
        return epi, None, False
    i = reds[0]
    red = epi[i]
    tail = epi[i + 1 :]
    rank = len(g.shape or [])
    dim = arg_value(red, 1, "dim")
    if red.op in ("max", "min"):
        # torch.max(x, dim) is a (values, indices) tuple: only the values are a row reduction.
        if dim is None or is_node(dim):
            raise Unsupported(f"{red.op} after the matmul is not a row reduction")
        if len(tail) != 1 or tail[0].op not in ("getitem", "getattr") or view.refs(tail[0]) != [red.name]:
            raise Unsupported(f"{red.op}(dim) after the matmul used as a tuple")
        idx = tail[0].args[1] if len(tail[0].args) > 1 else None
        if idx not in (0, "values"):
            raise Unsupported(f"{red.op}(dim) indices after the matmul")
        tail = []
    if tail:
        raise Unsupported(f"{tail[0].op} after the row reduction of the matmul output")
    if dim is None or is_node(dim) or rank == 0:
        raise Unsupported(f"{red.op} of the matmul output over all dims")
    dims = {int(d) % rank for d in (dim if isinstance(dim, list) else [dim])}
    if dims != {rank - 1}:
        raise Unsupported(f"{red.op} of the matmul output over dim(s) {sorted(dims)}, not the last")
    if arg_value(red, 99, "dtype") is not None:
        raise Unsupported(f"{red.op}(dtype=...) after the matmul")
    src = epi[i - 1].name if i > 0 else g.name
    if view.refs(red) != [src]:
        raise Unsupported(f"{red.op} does not reduce the matmul epilogue's result")
    return epi[:i], ROW_REDUCE[red.op], bool(arg_value(red, 2, "keepdim", False))


def _prod(xs: list[int]) -> int:
    p = 1
    for x in xs:
        p *= x
    return p


ATOMIC = "tiled+atomic-rowreduce"
ATOMIC_IEEE = "tiled-ieee+atomic-rowreduce"
TWO_KERNEL = "tiled+rowreduce-kernel"
ROWBAND = "tiled-rowband"
LIB_REDUCE = "library+fused-epilogue-rowreduce"
GEMV = "gemv-splitk"


def algorithms(plan: GemmPlan) -> list[str]:
    if plan.reduce is not None:
        algos = [ATOMIC, TWO_KERNEL, ROWBAND]
        if plan.dtype == "float32":
            algos.append(ATOMIC_IEEE)
        algos.append(LIB_REDUCE)
        return algos
    if min(plan.m, plan.n) == 1:
        # A vector operand: a GEMV streams the matrix once at the bandwidth roof; a GEMM tile
        # would be 1/16 (or less) useful columns.
        algos = [GEMV, "tiled"]
        if plan.dtype == "float32":
            algos.append("tiled-ieee")
        algos.append("split-k")
        if plan.epilogue.nodes:
            algos.append("library+fused-epilogue")
        return algos
    algos = ["tiled"]
    if plan.dtype == "float32":
        if _presplit_pays(plan):
            algos.append(PRESPLIT)
        algos.append("tiled-ieee")
    # Split-K pays off only when the output has too few tiles to fill the GPU.
    if plan.k >= 4 * max(plan.m, plan.n, 1) or plan.m * plan.n * plan.batch <= 256 * 256:
        algos.insert(0 if plan.k >= 4 * max(plan.m, plan.n, 1) else 1, "split-k")
    else:
        algos.append("split-k")
    # Many output tiles (a batch of GEMMs, or one large GEMM): one persistent program per SM
    # walking the tiles in grouped order; before split-k / ieee where the batch is large.
    persist_at = 1 if plan.batch > 1 and _tile_count(plan, 128, 128) >= 4 * SMS else len(algos)
    algos.insert(persist_at, PERSISTENT)
    if plan.epilogue.nodes:
        algos.append("library+fused-epilogue")
    return algos


# Streaming multiprocessors of the target GPU (an H200 has 132): shapes are sized against it.
SMS = 132
PERSISTENT = "tiled-persistent"
PRESPLIT = "tiled-presplit"
DOT_ALGOS = ("tiled", "tiled-ieee", "split-k", PERSISTENT, PRESPLIT)
PRESPLIT_PRECISION = "tf32x3-presplit"
# K from which the split 3xTF32 forms sum each K step apart (_three_dots); bsplit always does.
FRESH_ACC_K = 16384
# 3xTF32 with B split once before the GEMM (kernels/tf32split.py) and A split in registers in the
# K loop: the A operand of an sm_90 TF32 MMA may come from registers, B must come from shared
# memory. Triton's own tf32x3 splits both loaded tiles in registers, so its B halves go back to
# shared memory every K step (the sm_90 TTGIR shows B as an unpipelined shared buffer); split
# once, B and its low part stream straight into pipelined buffers, and A costs no extra traffic
# (for split-k's small M x N, A is the long operand that a full presplit would copy twice over).
BSPLIT_PRECISION = "tf32x3-bsplit"


def _presplit_pays(plan: GemmPlan) -> bool:
    """Splitting the operands first writes and re-reads both of them twice: about 16 (M + N) K
    bytes next to 6 M N K TF32 flops, i.e. under 10% of the MMA time at H200's ~60 flop/byte
    TF32-tensor-to-HBM balance once 2 M N / (M + N) >= 512 (and a K long enough to pipeline)."""
    m, n = max(plan.m, 1), max(plan.n, 1)
    return 2 * m * n / (m + n) >= 512 and plan.k >= 256


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _tile_count(plan: GemmPlan, bm: int, bn: int) -> int:
    return _cdiv(plan.m, bm) * _cdiv(plan.n, bn) * plan.batch


def _fill_tiles(plan: GemmPlan) -> tuple[int, int]:
    """128x128 output tiles, halved (rows first) while they would leave over 10% of the SMs idle:
    a 1000x1000 output has 64 tiles of 128x128 for 132 SMs, 128 of 64x128."""
    bm, bn = 128, 128
    while _tile_count(plan, bm, bn) < 0.9 * SMS and (bm > 64 or bn > 64):
        if bm >= bn:
            bm //= 2
        else:
            bn //= 2
    return bm, bn


def _rows_misaligned(plan: GemmPlan) -> bool:
    """Rows of K elements that are not whole 16-byte lines (an odd K in fp32): A's rows (and a
    K-major B's) then start at addresses no 16-byte access can use."""
    return plan.k % (4 if plan.dtype == "float32" else 8) != 0


def _kmajor_default(plan: GemmPlan) -> bool:
    """Copy the operands into K-major, K-padded buffers when that is cheap next to the GEMM.

    fp32 operands go to the tensor cores as TF32, whose sm_90 MMAs (wgmma) read both operands
    K-major from shared memory: an N-major B (a plain (K, N) matrix) or rows that are not 16-byte
    aligned (an odd K) make Triton fill shared memory with 4-byte instead of 16-byte async copies
    (seen in the sm_90 PTX). Copying both operands costs about 150 * (1/M + 1/N) of a 3xTF32 GEMM's
    time; taken when that is under 15%. With misaligned rows every operand tile, A's too, moves
    4 bytes at a time (tests/expert/test_gemm_ragged.py counts the copies), and the GEMM is several
    times slower (H100, 767 x 6143 x 6143: the in-register 3xTF32 kernel 3.66 ms, the K-padded
    presplit one 0.870 ms), so the copies are taken while they cost less than the GEMM itself.
    Split-k's A is the long operand, so there the copy is taken only for misaligned rows."""
    if plan.dtype != "float32" and plan.k % 8 == 0:
        return False
    limit = 1.0 if _rows_misaligned(plan) else 0.15
    return 150.0 * (1.0 / max(plan.m, 1) + 1.0 / max(plan.n, 1)) < limit


# Rows of A from which split-k's fp32 default is tf32x3-bsplit (see _bsplit_pays).
BSPLIT_MIN_M = 128


def _bsplit_pays(plan: GemmPlan) -> bool:
    """Split-k with B split once (tf32x3-bsplit) against Triton's tf32x3, which splits both
    operand tiles in registers every K step. On the H200 at 256 x 524288 x 256 (seventh sitting's
    fix, eighth sitting's probe, evals/h200/tf32_probe.py) bsplit ran the whole forward, B's split
    included, in 1.173 ms against tf32x3's 3.121 ms, with the same mean error against float64
    (-1.2e-7). The split reads B once more and writes and re-reads its two halves: about four
    extra passes over K x N, paid back only when each B element meets enough rows of A. From
    those timings the saving per MAC pays for the passes from about 50 rows of A; 128 leaves a
    margin. A few rows (a classifier layer's batch of 10) keep tf32x3, whose traffic is A + B."""
    return plan.dtype == "float32" and plan.m >= BSPLIT_MIN_M


def _precision(plan: GemmPlan, algorithm: str) -> str | None:
    if plan.dtype != "float32":
        return None
    if algorithm == PRESPLIT:
        return PRESPLIT_PRECISION
    if algorithm == "split-k" and _bsplit_pays(plan):
        return BSPLIT_PRECISION
    return "ieee" if algorithm == "tiled-ieee" else "tf32x3"


def defaults(plan: GemmPlan, algorithm: str) -> dict[str, Any]:
    if algorithm == GEMV:
        # 8 rows x 512 contiguous elements per step: 32 fp32 per thread (eight 16-byte loads in
        # flight) at 4 warps; K split only as far as needed to give every SM 8 programs.
        return {
            "BLOCK_V": 512,
            "BLOCK_R": 8,
            "SPLIT_K": 0,
            "PROGS_PER_SM": 8,
            "num_warps": 4,
            "num_stages": 1,
            "PRECISION": "ieee",
        }
    if algorithm == ROWBAND:
        # One program per row band: smaller bands keep more programs in flight.
        return {"SPLIT_K": 1, "BLOCK_M": 64, "BLOCK_N": 128}
    if algorithm == LIB_REDUCE:
        return {}
    if algorithm == "library+fused-epilogue":
        # PRECISION notes the library matmul's: fp32 (torch.backends.cuda.matmul.allow_tf32 is
        # False by default); not a tunable.
        return {"BLOCK": 2048, "num_warps": 8, "EVICT": "", "PRECISION": "cublas-default"}
    out: dict[str, Any] = {"SPLIT_K": 1, "KMAJOR": _kmajor_default(plan)}
    prec = _precision(plan, algorithm)
    if prec:
        out["PRECISION"] = prec
    if algorithm == "split-k":
        # Few output tiles: full 128x128 tiles (8 warps) where the output allows, and K split at
        # launch into as many chunks as fill the SMs once (SPLIT_K 0 = sized at launch).
        bm = 128 if plan.m >= 128 else 64
        bn = 128 if plan.n >= 128 else 64
        out.update(
            SPLIT_K=0,
            PROGS_PER_SM=1,
            BLOCK_M=bm,
            BLOCK_N=bn,
            BLOCK_K=32,
            num_warps=8 if bm * bn >= 128 * 128 else 4,
            num_stages=3,
            # misaligned rows: A copied to whole 16-byte lines (and, with K padded, every K chunk
            # whole: no masks) costs two passes over A, next to 4-byte copies of every tile
            KMAJOR=_rows_misaligned(plan),
        )
        return out
    if algorithm in ("tiled", "tiled-ieee", PERSISTENT, PRESPLIT):
        bm, bn = _fill_tiles(plan)
        out.update(BLOCK_M=bm, BLOCK_N=bn, num_warps=8 if bm * bn >= 128 * 128 else 4)
        if plan.dtype == "float32":
            # 4 stages of 128x32 + 32x128 fp32 operand tiles are 128 KB of shared memory: deeper
            # prefetch for the 3xTF32 MMAs, still one 8-warp program per SM as registers allow.
            out["num_stages"] = 4
        if algorithm == PRESPLIT:
            # high and low tiles of both operands: 64 KB a stage at 128x32; the split buffers
            # are K-major and padded already (no KMAJOR copy). A long K sums each step's three
            # products apart (_three_dots): 512 steps of 32 would leave about -5e-6 of bias.
            out.update(num_stages=3, KMAJOR=False, FRESH_ACC=plan.k >= FRESH_ACC_K)
        if algorithm == PERSISTENT:
            out["PROGS_PER_SM"] = 1
    return out


def grouped_tiles(n_cols: str) -> list[str]:
    """Kernel lines mapping program id `pid` to an (M, n_cols) output tile in grouped order:
    GROUP_M row tiles share each column band of the B operand while it sits in L2. Defines
    pid_m, pid_n and the row / column / K offsets rm, rn, rk."""
    return [
        "num_m = tl.cdiv(M, BLOCK_M)",
        f"num_n = tl.cdiv({n_cols}, BLOCK_N)",
        "per_group = GROUP_M * num_n",
        "first_m = (pid // per_group) * GROUP_M",
        "rows_in_group = tl.minimum(num_m - first_m, GROUP_M)",
        "pid_m = first_m + (pid % per_group) % rows_in_group",
        "pid_n = (pid % per_group) // rows_in_group",
        "rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)",
        "rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)",
        "rk = tl.arange(0, BLOCK_K)",
    ]


def dot_tile_problem(params: dict[str, Any]) -> str | None:
    """Why BLOCK_M x BLOCK_N x BLOCK_K tl.dot tiles cannot run on sm_90 (None when they can)."""
    bm, bn, bk = params["BLOCK_M"], params["BLOCK_N"], params["BLOCK_K"]
    if min(bm, bn, bk) < 16:
        return "tl.dot needs tiles of at least 16"
    # Shared memory for the pipelined operand tiles (fp32: 4 bytes; one buffer per stage, as
    # Triton 3.6 allocates them for sm_90) must fit in the 227 KB a block may have.
    stages = params.get("num_stages", 3)
    prec = params.get("PRECISION")
    a_parts = 2 if prec == PRESPLIT_PRECISION else 1  # high and low operand tiles
    b_parts = 2 if prec in (PRESPLIT_PRECISION, BSPLIT_PRECISION) else 1
    if (bm * bk * a_parts + bk * bn * b_parts) * 4 * max(stages, 1) > 224 * 1024:
        return "operand tiles exceed shared memory"
    if bm * bn > 128 * 256:
        return "accumulator too large for the register file"
    return None


def valid(plan: GemmPlan, params: dict[str, Any]) -> str | None:
    algo = params["algorithm"]
    if algo in ("library+fused-epilogue", LIB_REDUCE):
        return None
    if algo == GEMV:
        if params["BLOCK_V"] * params["BLOCK_R"] > 16384:
            return "GEMV tile holds more than 64 fp32 accumulators per thread at 8 warps"
        return None if params["BLOCK_V"] >= 32 else "BLOCK_V below one warp"
    if algo not in ("split-k", GEMV) and params.get("SPLIT_K", 1) != 1:
        return "SPLIT_K applies to split-k only"
    if params.get("PRECISION") == BSPLIT_PRECISION and (
        algo not in ("tiled", "split-k") or plan.dtype != "float32"
    ):
        return "tf32x3-bsplit applies to fp32 tiled and split-k only"
    if algo == "split-k" and params.get("SPLIT_K", 0) < 0:
        return "SPLIT_K must be 0 (sized at launch) or a chunk count"
    return dot_tile_problem(params)


def space(plan: GemmPlan, params: dict[str, Any], stage: str, sp: dict[str, list]) -> dict[str, list]:
    if params["algorithm"] == "library+fused-epilogue":
        from ..spaces import SPACES

        return SPACES["elementwise"].get(stage, {})
    if params["algorithm"] == LIB_REDUCE:
        return {}  # the row-reduce kernel sizes its own tiles
    if params["algorithm"] == ROWBAND and stage == "mapping":
        return {}  # one program per row band: no tile order to choose
    if params["algorithm"] == GEMV:
        return GEMV_SPACE.get(stage, {})
    sp = dict(sp)
    if stage == "memory" and params["algorithm"] in DOT_ALGOS and params["algorithm"] != PRESPLIT:
        # (under tf32x3-bsplit B is K-major and padded already: KMAJOR copies A alone)
        sp["KMAJOR"] = [not params.get("KMAJOR", False)]
    if params["algorithm"] == "split-k" and stage == "mapping":
        # SPLIT_K 0 sizes the split at launch (PROGS_PER_SM programs per SM)
        sp["SPLIT_K"] = [0, 16, 32, 64, 8, 4]
        sp["PROGS_PER_SM"] = [2, 3, 1]
    if params["algorithm"] == PERSISTENT and stage == "mapping":
        sp["PROGS_PER_SM"] = [2, 1]
    return sp


def refinements(plan: GemmPlan, params: dict[str, Any]) -> list[tuple[str, dict[str, Any], str]]:
    out = []
    if params["algorithm"] == "library+fused-epilogue":
        p = {k: v for k, v in params.items() if k not in ("BLOCK", "EVICT", "PRECISION")}
        from ..spaces import DEFAULTS

        p.update(DEFAULTS["gemm"])
        p.update(defaults(plan, "tiled"), algorithm="tiled")
        out.append(("refine:fuse-epilogue-into-gemm", p, "write the output once: epilogue in the GEMM store"))
    if params["algorithm"] == LIB_REDUCE:
        from ..spaces import DEFAULTS

        p = dict(DEFAULTS["gemm"], algorithm=ATOMIC)
        out.append(
            (
                "refine:fuse-epilogue-into-gemm",
                p,
                "no M x N round trip: epilogue and row reduction in the GEMM",
            )
        )
    if params["algorithm"] == TWO_KERNEL:
        out.append(
            (
                "refine:fuse-rowreduce",
                dict(params, algorithm=ATOMIC),
                "reduce each tile's rows in the GEMM and combine them atomically: no M x N round trip",
            )
        )
    if params["algorithm"] == ATOMIC_IEEE:
        out.append(
            (
                "refine:3xtf32",
                dict(params, algorithm=ATOMIC),
                "3xTF32 tensor-core dot keeps fp32 accuracy at several times the fp32 FMA rate",
            )
        )
    if params["algorithm"] == "tiled-ieee" and plan.dtype == "float32":
        out.append(
            (
                "refine:3xtf32",
                dict(params, algorithm="tiled", PRECISION="tf32x3"),
                "3xTF32 tensor-core dot keeps fp32 accuracy at several times the fp32 FMA rate",
            )
        )
    # tf32x3-bsplit is split-k's default where it pays (_bsplit_pays), not a refinement: the
    # sixth sitting's H200 refusal (a bias growing with K, from MMAs fed the running sum) is gone
    # since each K step sums apart (FRESH_ACC), as the eighth sitting's probe confirmed.
    if params["algorithm"] in DOT_ALGOS and params.get("PRECISION") in ("tf32x3", BSPLIT_PRECISION):
        # fp32 matmuls are not TF32 in PyTorch by default (torch.backends.cuda.matmul.allow_tf32 is
        # False), so plain TF32 passes only where the checker's bar (fp64 reference, tolerance plus
        # 4x the reference's own fp32 error) is wide enough: long K, or a TF32 reference.
        out.append(
            (
                "refine:tf32",
                dict(params, PRECISION="tf32"),
                "one TF32 MMA instead of three (about 3x the tensor-core rate); the checker's fp64 "
                "bar decides whether its 10-bit mantissa products are accurate enough here",
            )
        )
    return out


def safer(plan: GemmPlan, params: dict[str, Any], rule: str) -> list[tuple[str, dict[str, Any], str]]:
    if params["algorithm"] == ATOMIC and plan.dtype == "float32" and "mismatch" in rule:
        return [
            (
                "fix:mismatch:ieee",
                dict(params, algorithm=ATOMIC_IEEE),
                "exact fp32 dot products in case 3xTF32 rounding exceeds the tolerance",
            )
        ]
    if params["algorithm"] in DOT_ALGOS and plan.dtype == "float32" and "mismatch" in rule:
        prec = params.get("PRECISION") or _precision(plan, params["algorithm"])
        if prec == "tf32":
            return [
                (
                    "fix:mismatch:tf32x3",
                    dict(params, PRECISION="tf32x3"),
                    "3xTF32 dot products in case TF32 rounding exceeds the tolerance",
                )
            ]
        if prec == BSPLIT_PRECISION:
            return [
                (
                    "fix:mismatch:tf32x3",
                    dict(params, PRECISION="tf32x3"),
                    "Triton's own 3xTF32 split (both tiles in registers) in case B's split-once "
                    "form exceeds the tolerance",
                )
            ]
        if prec in ("tf32x3", PRESPLIT_PRECISION):
            algo = "tiled-ieee" if params["algorithm"] in ("tiled", PRESPLIT) else params["algorithm"]
            return [
                (
                    "fix:mismatch:ieee",
                    dict(params, algorithm=algo, PRECISION="ieee"),
                    "exact fp32 dot products in case 3xTF32 rounding exceeds the tolerance",
                )
            ]
    return []


# ---------------------------------------------------------------------------------------------
# code generation
# ---------------------------------------------------------------------------------------------


def _leaf_args(chain: Chain) -> tuple[list[str], list[str]]:
    tensor = [f"l_{lf.name}" for lf in chain.tensor_leaves]
    scal = [f"l_{lf.name}" for lf in chain.scalar_leaves]
    return tensor, scal


def _epilogue_lines(plan: GemmPlan, acc: str) -> tuple[list[str], str]:
    env = {plan.gemm_node: acc}
    lines: list[str] = []
    for lf in plan.epilogue.tensor_leaves:
        p = f"l_{lf.name}"
        lines.append(
            f"x_{lf.name} = tl.load({p}_ptr + bid * {p}_sb + rm[:, None] * {p}_sm + rn[None, :] * {p}_sn, "
            "mask=cmask, other=0.0).to(tl.float32)"
        )
        env[lf.name] = f"x_{lf.name}"
    for lf in plan.epilogue.scalar_leaves:
        env[lf.name] = f"l_{lf.name}_val"
    body, last = plan.epilogue.body(env)
    return lines + body, last or acc


def _epi_sig(plan: GemmPlan) -> str:
    parts = []
    for lf in plan.epilogue.tensor_leaves:
        p = f"l_{lf.name}"
        parts += [f"{p}_ptr", f"{p}_sb", f"{p}_sm", f"{p}_sn"]
    parts += [f"l_{lf.name}_val" for lf in plan.epilogue.scalar_leaves]
    return "".join(f", {x}" for x in parts)


def _bias_lines(plan: GemmPlan) -> list[str]:
    if plan.bias_expr is None:
        return []
    return ["acc = acc + tl.load(bias_ptr + rn, mask=rn < N, other=0.0).to(tl.float32)[None, :]"]


def _row_combine(plan: GemmPlan, tile: str) -> str:
    """Expression reducing a masked (BLOCK_M, BLOCK_N) tile over its columns."""
    fn = {"sum": "tl.sum", "mean": "tl.sum", "max": "tl.max", "min": "tl.min"}[plan.reduce or "sum"]
    return f"{fn}(tl.where(cmask, {tile}, {_RED_IDENTITY[plan.reduce or 'sum']}), 1)"


def _k_loop(prec: str, indent: str = "", bsplit: bool = False, fresh: bool = False) -> list[str]:
    bl = ["        bl = tl.load(bl_ptrs)"] if bsplit else []
    bl_masked = ["        bl = tl.load(bl_ptrs, mask=kmask[:, None], other=0.0)"] if bsplit else []
    body = [
        "for k0 in range(0, K, BLOCK_K):",
        "    if EVEN_K:",
        "        a = tl.load(a_ptrs)",
        "        b = tl.load(b_ptrs)",
        *bl,
        "    else:",
        "        kmask = (k0 + rk) < K",
        "        a = tl.load(a_ptrs, mask=kmask[None, :], other=0.0)",
        "        b = tl.load(b_ptrs, mask=kmask[:, None], other=0.0)",
        *bl_masked,
        *(bsplit_dots(fresh) if bsplit else [f"    acc = tl.dot(a, b, acc{prec})"]),
        "    a_ptrs += BLOCK_K * s_ak",
        "    b_ptrs += BLOCK_K * s_bk",
        *(["    bl_ptrs += BLOCK_K * s_bk"] if bsplit else []),
    ]
    return [indent + ln for ln in body]


def _three_dots(lo_a: str, lo_b: str, hi_a: str, hi_b: str, fresh: bool) -> list[str]:
    """The three TF32 products of a 3xTF32 K step, small ones first. With `fresh`, into a zero
    accumulator that one IEEE fp32 add then takes into `acc`, as Triton's own tf32x3 does: the
    tensor cores' fp32 accumulation truncates, so a running sum fed straight to the MMAs loses
    a fraction of an ulp of the sum at every step, always downwards (on the H200 -2.05e-5 of the
    result at K = 65536, -1.7e-4 at 524288), while the step's own sum loses only its own."""
    tf = 'input_precision="tf32"'
    if not fresh:
        return [
            f"    acc = tl.dot({lo_a}, {hi_b}, acc, {tf})",
            f"    acc = tl.dot({hi_a}, {lo_b}, acc, {tf})",
            f"    acc = tl.dot({hi_a}, {hi_b}, acc, {tf})",
        ]
    return [
        f"    step = tl.dot({lo_a}, {hi_b}, {tf})",
        f"    step = tl.dot({hi_a}, {lo_b}, step, {tf})",
        f"    step = tl.dot({hi_a}, {hi_b}, step, {tf})",
        "    acc += step",
    ]


def bsplit_dots(fresh: bool) -> list[str]:
    """The K step of tf32x3-bsplit: the loaded A tile split in registers into its TF32 high part
    (rounded as kernels/tf32split.py rounds) and the fp32 remainder, B's halves loaded as b / bl;
    small products first, then the high one (_three_dots)."""
    return [
        "    a_bits = a.to(tl.int32, bitcast=True)",
        "    ah = tl.where(a == a, ((a_bits + 0x1000) & -8192).to(tl.float32, bitcast=True), a)",
        '    al = tl.where(tl.abs(ah) < float("inf"), a - ah, 0.0)',
        *_three_dots("al", "bl", "ah", "b", fresh),
    ]


def _bl_ptrs(offset: str = "") -> list[str]:
    """B's low part: the same strides as B (both come from _tf32_split)."""
    at = f" + {offset}" if offset else ""
    return [f"bl_ptrs = bl_ptr + bid * s_bb + rk[:, None] * s_bk + rb[None, :] * s_bn{at}"]


def _presplit_k_loop(fresh: bool) -> list[str]:
    """The K loop over operands split before the kernel (kernels/tf32split.py): K-major, padded
    to BLOCK_K, so no masks; small products first, then the high one (_three_dots)."""
    return [
        "al_ptrs = al_ptr + bid * s_ab + ra[:, None] * s_am + rk[None, :] * s_ak",
        "bl_ptrs = bl_ptr + bid * s_bb + rk[:, None] * s_bk + rb[None, :] * s_bn",
        "for k0 in range(0, K, BLOCK_K):",
        "    a = tl.load(a_ptrs)",
        "    b = tl.load(b_ptrs)",
        "    al = tl.load(al_ptrs)",
        "    bl = tl.load(bl_ptrs)",
        *_three_dots("al", "bl", "a", "b", fresh),
        "    a_ptrs += BLOCK_K * s_ak",
        "    b_ptrs += BLOCK_K * s_bk",
        "    al_ptrs += BLOCK_K * s_ak",
        "    bl_ptrs += BLOCK_K * s_bk",
    ]


def _gemm_kernel(
    plan: GemmPlan,
    precision: str | None,
    split: bool,
    atomic: bool = False,
    persistent: bool = False,
    fresh: bool = False,
) -> str:
    bias_sig = ", bias_ptr" if plan.bias_expr else ""
    presplit = precision == PRESPLIT_PRECISION
    bsplit = precision == BSPLIT_PRECISION
    prec = f', input_precision="{precision}"' if precision and not (presplit or bsplit) else ""
    L = [
        "pid = tl.program_id(0)",
        "bid = tl.program_id(1).to(tl.int64)",
        *grouped_tiles("N"),
        # Clamp rows/cols into range so the K loop needs no M/N masks; the store is masked.
        "ra = tl.where(rm < M, rm, 0)",
        "rb = tl.where(rn < N, rn, 0)",
        "a_ptrs = a_ptr + bid * s_ab + ra[:, None] * s_am + rk[None, :] * s_ak",
        "b_ptrs = b_ptr + bid * s_bb + rk[:, None] * s_bk + rb[None, :] * s_bn",
        "acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)",
    ]
    if split:
        L += [
            "sk = tl.program_id(2)",
            "k_per = tl.cdiv(tl.cdiv(K, SPLIT_K), BLOCK_K) * BLOCK_K",
            "k_lo = sk * k_per",
            "k_hi = tl.minimum(K, k_lo + k_per)",
            "a_ptrs += k_lo * s_ak",
            "b_ptrs += k_lo * s_bk",
            *(_bl_ptrs("k_lo * s_bk") if bsplit else []),
            "for k0 in range(k_lo, k_hi, BLOCK_K):",
            "    kmask = (k0 + rk) < k_hi",
            "    a = tl.load(a_ptrs, mask=kmask[None, :], other=0.0)",
            "    b = tl.load(b_ptrs, mask=kmask[:, None], other=0.0)",
            *(
                ["    bl = tl.load(bl_ptrs, mask=kmask[:, None], other=0.0)", *bsplit_dots(fresh)]
                if bsplit
                else [f"    acc = tl.dot(a, b, acc{prec})"]
            ),
            "    a_ptrs += BLOCK_K * s_ak",
            "    b_ptrs += BLOCK_K * s_bk",
            *(["    bl_ptrs += BLOCK_K * s_bk"] if bsplit else []),
            "cmask = (rm < M)[:, None] & (rn < N)[None, :]",
            "w_ptrs = ws_ptr + ((sk * n_batch + bid) * M + rm[:, None]) * N + rn[None, :]",
            "tl.store(w_ptrs, acc, mask=cmask)",
        ]
        sig = (
            "a_ptr, b_ptr, ws_ptr, M, N, K, n_batch, s_ab, s_am, s_ak, s_bb, s_bk, s_bn, "
            "BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, "
            "GROUP_M: tl.constexpr, SPLIT_K: tl.constexpr"
        )
        name = "gemm_splitk_kernel"
        if bsplit:
            sig = sig.replace("a_ptr, b_ptr, ", "a_ptr, b_ptr, bl_ptr, ", 1)
    elif atomic:
        # Row-reduction epilogue: reduce this tile's rows, combine partials across N tiles atomically.
        epi, last = _epilogue_lines(plan, "acc")
        atom = {
            "sum": "tl.atomic_add",
            "mean": "tl.atomic_add",
            "max": "tl.atomic_max",
            "min": "tl.atomic_min",
        }
        L += [
            *_k_loop(prec),
            *_bias_lines(plan),
            "cmask = (rm < M)[:, None] & (rn < N)[None, :]",
            *epi,
            f"part = {_row_combine(plan, last)}",
            *(["part = part * inv_n"] if plan.reduce == "mean" else []),
            f'{atom[plan.reduce or "sum"]}(r_ptr + bid * M + rm, part, mask=rm < M, sem="relaxed")',
        ]
        sig = (
            f"a_ptr, b_ptr, r_ptr{bias_sig}, M, N, K, s_ab, s_am, s_ak, s_bb, s_bk, s_bn, "
            f"inv_n{_epi_sig(plan)}, "
            "BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, "
            "GROUP_M: tl.constexpr, EVEN_K: tl.constexpr"
        )
        name = "gemm_rowreduce_kernel"
    else:
        epi, last = _epilogue_lines(plan, "acc")
        L += [
            *(
                _presplit_k_loop(fresh)
                if presplit
                else [*_bl_ptrs(), *_k_loop(prec, bsplit=True, fresh=fresh)]
                if bsplit
                else _k_loop(prec)
            ),
            *_bias_lines(plan),
            "cmask = (rm < M)[:, None] & (rn < N)[None, :]",
            *epi,
            "c_ptrs = c_ptr + bid * s_cb + rm[:, None] * s_cm + rn[None, :] * s_cn",
            f"tl.store(c_ptrs, {last}.to(c_ptr.dtype.element_ty), mask=cmask)",
        ]
        sig = (
            f"a_ptr, b_ptr, c_ptr{bias_sig}, M, N, K, s_ab, s_am, s_ak, s_bb, s_bk, s_bn, "
            f"s_cb, s_cm, s_cn{_epi_sig(plan)}, "
            "BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, "
            "GROUP_M: tl.constexpr, EVEN_K: tl.constexpr"
        )
        name = "gemm_kernel"
        if presplit:
            sig = sig.replace("a_ptr, b_ptr, ", "a_ptr, b_ptr, al_ptr, bl_ptr, ", 1)
        if bsplit:
            sig = sig.replace("a_ptr, b_ptr, ", "a_ptr, b_ptr, bl_ptr, ", 1)
        if persistent:
            # One program per SM (or a few) walks the output tiles of every batch in grouped
            # order: no tail wave of idle SMs, and the next tile's loads start while this
            # program's epilogue finishes.
            L = [
                "tiles = tl.cdiv(M, BLOCK_M) * tl.cdiv(N, BLOCK_N)",
                "for tile in range(tl.program_id(0), tiles * n_batch, tl.num_programs(0)):",
                "    pid = tile % tiles",
                "    bid = (tile // tiles).to(tl.int64)",
                *("    " + ln for ln in L[2:]),
            ]
            sig = sig.replace("M, N, K, ", "M, N, K, n_batch, ", 1)
    return jit_source(name, sig, L)


def _rowband_kernel(plan: GemmPlan, precision: str | None) -> str:
    """One program per BLOCK_M rows: loop over the N tiles, each a full-K GEMM tile + epilogue,
    and keep the running row results in registers (deterministic, no atomics)."""
    bias_sig = ", bias_ptr" if plan.bias_expr else ""
    prec = f', input_precision="{precision}"' if precision else ""
    epi, last = _epilogue_lines(plan, "acc")
    comb = (
        "row + {t}"
        if plan.reduce in ("sum", "mean")
        else f"tl.{'maximum' if plan.reduce == 'max' else 'minimum'}(row, {{t}})"
    )
    L = [
        "pid_m = tl.program_id(0)",
        "bid = tl.program_id(1).to(tl.int64)",
        "rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)",
        "rk = tl.arange(0, BLOCK_K)",
        "ra = tl.where(rm < M, rm, 0)",
        f"row = tl.full((BLOCK_M,), {_RED_IDENTITY[plan.reduce or 'sum']}, tl.float32)",
        "for n0 in range(0, N, BLOCK_N):",
        "    rn = n0 + tl.arange(0, BLOCK_N)",
        "    rb = tl.where(rn < N, rn, 0)",
        "    a_ptrs = a_ptr + bid * s_ab + ra[:, None] * s_am + rk[None, :] * s_ak",
        "    b_ptrs = b_ptr + bid * s_bb + rk[:, None] * s_bk + rb[None, :] * s_bn",
        "    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)",
        *_k_loop(prec, "    "),
        *("    " + ln for ln in _bias_lines(plan)),
        "    cmask = (rm < M)[:, None] & (rn < N)[None, :]",
        *("    " + ln for ln in epi),
        "    row = " + comb.format(t=_row_combine(plan, last)),
        *(["row = row * inv_n"] if plan.reduce == "mean" else []),
        "tl.store(r_ptr + bid * M + rm, row.to(r_ptr.dtype.element_ty), mask=rm < M)",
    ]
    sig = (
        f"a_ptr, b_ptr, r_ptr{bias_sig}, M, N, K, s_ab, s_am, s_ak, s_bb, s_bk, s_bn, "
        f"inv_n{_epi_sig(plan)}, "
        "BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, EVEN_K: tl.constexpr"
    )
    return jit_source("gemm_rowband_kernel", sig, L)


def _rowreduce_kernel(plan: GemmPlan, with_epilogue: bool) -> str:
    """Reduce each row of a (batch, M, N) tensor (strided), optionally applying the elementwise
    epilogue on load (library matmul variant); accumulates a (BLOCK_M, BLOCK_N) fp32 tile."""
    ident = _RED_IDENTITY[plan.reduce or "sum"]
    if with_epilogue:
        epi, last = _epilogue_lines(plan, "x")
        esig = _epi_sig(plan)
    else:
        epi, last, esig = [], "x", ""
    if plan.reduce in ("sum", "mean"):
        upd, fin = f"acc = acc + tl.where(cmask, {last}, 0.0)", "tl.sum(acc, 1)"
    else:
        f = "maximum" if plan.reduce == "max" else "minimum"
        upd, fin = f"acc = tl.{f}(acc, tl.where(cmask, {last}, {ident}))", f"tl.{plan.reduce}(acc, 1)"
    L = [
        "pid_m = tl.program_id(0)",
        "bid = tl.program_id(1).to(tl.int64)",
        "rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)",
        f"acc = tl.full((BLOCK_M, BLOCK_N), {ident}, tl.float32)",
        "for n0 in range(0, N, BLOCK_N):",
        "    rn = n0 + tl.arange(0, BLOCK_N)",
        "    cmask = (rm < M)[:, None] & (rn < N)[None, :]",
        "    x = tl.load(x_ptr + bid * s_xb + rm[:, None] * s_xm + rn[None, :] * s_xn, mask=cmask, other=0.0)",
        "    x = x.to(tl.float32)",
        *("    " + ln for ln in epi),
        "    " + upd,
        f"row = {fin}",
        *(["row = row * inv_n"] if plan.reduce == "mean" else []),
        "tl.store(r_ptr + bid * M + rm, row.to(r_ptr.dtype.element_ty), mask=rm < M)",
    ]
    sig = f"x_ptr, r_ptr, M, N, s_xb, s_xm, s_xn, inv_n{esig}, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr"
    return jit_source("rowreduce_kernel", sig, L)


def _reduce_kernel(plan: GemmPlan) -> str:
    bias_sig = ", bias_ptr" if plan.bias_expr else ""
    epi, last = _epilogue_lines(plan, "acc")
    L = [
        "pid_m = tl.program_id(0)",
        "pid_n = tl.program_id(1)",
        "bid = tl.program_id(2).to(tl.int64)",
        "rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)",
        "rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)",
        "cmask = (rm < M)[:, None] & (rn < N)[None, :]",
        "acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)",
        "for sk in range(0, SPLIT_K):",
        "    w_ptrs = ws_ptr + ((sk * n_batch + bid) * M + rm[:, None]) * N + rn[None, :]",
        "    acc += tl.load(w_ptrs, mask=cmask, other=0.0)",
        *_bias_lines(plan),
        *epi,
        "c_ptrs = c_ptr + bid * s_cb + rm[:, None] * s_cm + rn[None, :] * s_cn",
        f"tl.store(c_ptrs, {last}.to(c_ptr.dtype.element_ty), mask=cmask)",
    ]
    sig = (
        f"ws_ptr, c_ptr{bias_sig}, M, N, n_batch, s_cb, s_cm, s_cn{_epi_sig(plan)}, "
        "BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, SPLIT_K: tl.constexpr"
    )
    return jit_source("gemm_reduce_kernel", sig, L)


TF32_SPLIT_KERNEL = kernel_source("tf32split.py", "tf32_split_kernel")
TF32_SPLIT = kernel_source("tf32split.py", "_tf32_split")

_SHAPES = '''
def _gemm_operands(a, b):
    """(a3, b3, batch, M, N, K, out_shape): both operands as 3-D (batch, rows, cols) views."""
    if a.dim() == 3 and b.dim() == 2 and a.is_contiguous():
        # (B, M, K) @ (K, N): one GEMM with B*M rows reads B once.
        out_shape = (a.shape[0], a.shape[1], b.shape[1])
        a = a.reshape(1, a.shape[0] * a.shape[1], a.shape[2])
    elif a.dim() > 2 and b.dim() == 2:
        out_shape = tuple(a.shape[:-1]) + (b.shape[1],)
        a = a.reshape(-1, a.shape[-1]).unsqueeze(0)
    else:
        bs = torch.broadcast_shapes(a.shape[:-2], b.shape[:-2])
        out_shape = tuple(bs) + (a.shape[-2], b.shape[-1])
        nb = 1
        for s in bs:
            nb *= s
        if len(bs) > 1:
            # (b, h, m, k) @ (b, h, k, n): the batch dims merge into one (a view when strides
            # allow, else a copy); broadcast batch dims are expanded first.
            a = a.expand(tuple(bs) + tuple(a.shape[-2:])).reshape(nb, a.shape[-2], a.shape[-1])
            b = b.expand(tuple(bs) + tuple(b.shape[-2:])).reshape(nb, b.shape[-2], b.shape[-1])
        a = a.expand(nb, a.shape[-2], a.shape[-1]) if a.dim() == 3 else a.unsqueeze(0).expand(nb, -1, -1)
        b = b.expand(nb, b.shape[-2], b.shape[-1]) if b.dim() == 3 else b.unsqueeze(0).expand(nb, -1, -1)
    if a.dim() == 2:
        a = a.unsqueeze(0)
    if b.dim() == 2:
        b = b.unsqueeze(0)
    if a.shape[2] != b.shape[1]:
        raise ValueError(f"inner dims differ: {tuple(a.shape)} @ {tuple(b.shape)}")
    nb = max(a.shape[0], b.shape[0])
    return a, b, nb, a.shape[1], b.shape[2], a.shape[2], out_shape


def _kmajor(t, kd, K, kp):
    """3-D operand `t` whose dim `kd` (1 or 2) is K, as a view of a buffer where K is the
    contiguous dim, zero-padded to kp, with 16-byte aligned lines; `t` itself when it already is.
    A broadcast batch (stride 0) stays broadcast: only one batch is copied."""
    ld = 3 - kd
    if t.stride(kd) == 1 and kp == K and (t.stride(ld) * t.element_size()) % 16 == 0:
        return t
    bcast = t.shape[0] > 1 and t.stride(0) == 0
    src = t[:1] if bcast else t
    buf = torch.empty((src.shape[0], t.shape[ld], kp), device=t.device, dtype=t.dtype)
    if kp > K:
        buf[:, :, K:] = 0
    buf[:, :, :K].copy_(src if kd == 2 else src.transpose(1, 2))
    out = buf if kd == 2 else buf.transpose(1, 2)
    return out.expand(t.shape[0], out.shape[1], out.shape[2]) if bcast else out


def _epi_view(t, out_shape, nb, M, N):
    """Broadcast strides of an epilogue operand over the (batch, M, N) output view."""
    e = t.expand(out_shape).reshape(nb, M, N)
    return e, e.stride(0), e.stride(1), e.stride(2)
'''


def _launch_head(plan: GemmPlan) -> tuple[list[str], str, list[str]]:
    """The launcher's first lines (operands as 3-D views, the output, the epilogue operands'
    broadcast strides), the epilogue kernel-argument suffix and the forward's call arguments."""
    tensors, scal = _leaf_args(plan.epilogue)
    sig = ", ".join(["a", "b"] + (["bias"] if plan.bias_expr else []) + tensors + scal)
    L = [
        f"def launch_gemm({sig}):",
        "    a3, b3, nb, M, N, K, out_shape = _gemm_operands(a, b)",
        "    out = torch.empty(out_shape, device=a.device, dtype=a.dtype)",
        "    if out.numel() == 0:",
        "        return out",
        "    c3 = out.view(nb, M, N)",
    ]
    leaf_lines, epi = leaf_launch_args(
        tensors, scal, "_epi_view({t}, out_shape, nb, M, N)", ("sb", "sm", "sn")
    )
    L += leaf_lines
    if plan.bias_expr:
        L.append("    bias = bias.contiguous()")
    leaf_exprs = [lf.expr for lf in plan.epilogue.tensor_leaves + plan.epilogue.scalar_leaves]
    call = [plan.a_expr, plan.b_expr] + ([plan.bias_expr] if plan.bias_expr else []) + leaf_exprs
    return L, epi, call


def generate(desc: TaskDescription, view: GraphView, plan: GemmPlan, params: dict[str, Any]) -> str:
    algo = params["algorithm"]
    if plan.reduce is not None:
        return _generate_rowreduce(desc, plan, params)
    if algo == "library+fused-epilogue":
        return _generate_library(desc, view, plan, params)
    if algo == GEMV:
        return _generate_gemv(desc, plan, params)
    precision = (params.get("PRECISION") or _precision(plan, algo)) if plan.dtype == "float32" else None
    split = algo == "split-k"
    persistent = algo == PERSISTENT
    presplit = precision == PRESPLIT_PRECISION
    bsplit = precision == BSPLIT_PRECISION
    if presplit and split:
        raise Unsupported("tf32x3-presplit operands with split-k")
    if bsplit and algo not in ("tiled", "split-k"):
        raise Unsupported(f"tf32x3-bsplit with {algo}")
    fresh = bool(params.get("FRESH_ACC", bsplit))
    kernels = [ewops.HELPERS, _gemm_kernel(plan, precision, split, persistent=persistent, fresh=fresh)]
    if split:
        kernels.append(_reduce_kernel(plan))
    if presplit or bsplit:
        kernels.append(TF32_SPLIT_KERNEL)
    bias_arg = ", bias" if plan.bias_expr else ""
    bm, bn, bk, gm = (int(params[k]) for k in ("BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M"))
    warps, stages = int(params["num_warps"]), int(params["num_stages"])
    L, epi, call = _launch_head(plan)
    lo_args = ""
    if presplit:
        L += [
            f"    kp = triton.cdiv(K, {bk}) * {bk}",
            "    a3, al3 = _tf32_split(a3, 2, K, kp)",
            "    b3, bl3 = _tf32_split(b3, 1, K, kp)",
            "    K = kp",
        ]
        lo_args = "al3, bl3, "
    elif bsplit:
        # B only, K-major and zero-padded to kp rows; A is read as it is (masked along K)
        L += [
            f"    kp = triton.cdiv(K, {bk}) * {bk}",
            "    b3, bl3 = _tf32_split(b3, 1, K, kp)",
        ]
        if params.get("KMAJOR"):
            # A too on whole 16-byte lines, zero-padded to kp like B's halves: no K masks
            L += ["    a3 = _kmajor(a3, 2, K, kp)", "    K = kp"]
        lo_args = "bl3, "
    elif params.get("KMAJOR"):
        # K-major, K-padded operand copies (layout only): 16-byte async copies into the TF32
        # MMA's shared-memory layout, and a K loop without masks.
        L += [
            f"    kp = triton.cdiv(K, {bk}) * {bk}",
            "    a3 = _kmajor(a3, 2, K, kp)",
            "    b3 = _kmajor(b3, 1, K, kp)",
            "    K = kp",
        ]
    strides = (
        "a3.stride(0) if a3.shape[0] > 1 else 0, a3.stride(1), a3.stride(2), "
        "b3.stride(0) if b3.shape[0] > 1 else 0, b3.stride(1), b3.stride(2)"
    )
    per_sm = int(params.get("PROGS_PER_SM", 1))
    sms = "    sms = torch.cuda.get_device_properties(a.device).multi_processor_count if a.is_cuda else 4"
    if split:
        sk = int(params["SPLIT_K"])
        L.append(f"    tiles = triton.cdiv(M, {bm}) * triton.cdiv(N, {bn}) * nb")
        if sk > 0:
            L.append(f"    split = max(1, min({sk}, triton.cdiv(K, {bk})))")
        else:
            # as many K chunks as fill the SMs, each at least 8 K steps long
            L += [
                sms,
                f"    split = max(1, min(triton.cdiv(sms * {per_sm}, tiles), triton.cdiv(K, {8 * bk}), 1024))",
            ]
        L += [
            f"    split = triton.cdiv(K, triton.cdiv(triton.cdiv(K, split), {bk}) * {bk})",
            "    ws = torch.empty((split, nb, M, N), device=a.device, dtype=torch.float32)",
            f"    grid = (triton.cdiv(M, {bm}) * triton.cdiv(N, {bn}), nb, split)",
            f"    gemm_splitk_kernel[grid](a3, b3, {lo_args}ws, M, N, K, nb, {strides}, BLOCK_M={bm}, BLOCK_N={bn}, "
            f"BLOCK_K={bk}, GROUP_M={gm}, SPLIT_K=split, num_warps={warps}, num_stages={stages})",
            "    rgrid = (triton.cdiv(M, 64), triton.cdiv(N, 64), nb)",
            f"    gemm_reduce_kernel[rgrid](ws, c3{bias_arg}, M, N, nb, c3.stride(0), c3.stride(1), "
            f"c3.stride(2){epi}, BLOCK_M=64, BLOCK_N=64, SPLIT_K=split, num_warps=4)",
            "    return out",
        ]
    elif persistent:
        L += [
            sms,
            f"    tiles = triton.cdiv(M, {bm}) * triton.cdiv(N, {bn}) * nb",
            f"    grid = (max(1, min(tiles, sms * {per_sm})),)",
            f"    gemm_kernel[grid](a3, b3, {lo_args}c3{bias_arg}, M, N, K, nb, {strides}, c3.stride(0), c3.stride(1), "
            f"c3.stride(2){epi}, BLOCK_M={bm}, BLOCK_N={bn}, BLOCK_K={bk}, GROUP_M={gm}, "
            f"EVEN_K=(K % {bk} == 0), num_warps={warps}, num_stages={stages})",
            "    return out",
        ]
    else:
        L += [
            f"    grid = (triton.cdiv(M, {bm}) * triton.cdiv(N, {bn}), nb)",
            f"    gemm_kernel[grid](a3, b3, {lo_args}c3{bias_arg}, M, N, K, {strides}, c3.stride(0), c3.stride(1), "
            f"c3.stride(2){epi}, BLOCK_M={bm}, BLOCK_N={bn}, BLOCK_K={bk}, GROUP_M={gm}, "
            f"EVEN_K=(K % {bk} == 0), num_warps={warps}, num_stages={stages})",
            "    return out",
        ]
    doc = f"EGG expert: gemm family ({plan.kind}), algorithm {algo}" + (
        f", precision {precision}." if precision else "."
    )
    return assemble(
        desc,
        "\n\n".join(kernels),
        _SHAPES + "\n\n" + (TF32_SPLIT + "\n\n" if presplit or bsplit else "") + "\n".join(L) + "\n",
        f"return launch_gemm({', '.join(call)})",
        doc,
    )


def _generate_library(desc: TaskDescription, view: GraphView, plan: GemmPlan, params: dict[str, Any]) -> str:
    if not plan.epilogue.nodes:
        raise Unsupported("library GEMM without an epilogue would be the reference itself")
    gleaf = Leaf(plan.gemm_node, f"t_{plan.gemm_node}", None)
    chain = Chain(
        nodes=plan.epilogue.nodes,
        tensor_leaves=[gleaf, *plan.epilogue.tensor_leaves],
        scalar_leaves=list(plan.epilogue.scalar_leaves),
    )
    ep = {k: v for k, v in params.items()}
    ep.setdefault("BLOCK", 2048)
    ep.setdefault("num_warps", 8)
    kernels = [ewops.HELPERS, ew._kernel("epilogue_kernel", chain, ep)]
    launchers = [ew.BCAST_HELPER, ew._launcher("epilogue_kernel", chain, ep)]
    if plan.kind == "linear":
        bias = plan.bias_expr or "None"
        w = plan.b_expr[: -len(".t()")]
        lib = f"t_{plan.gemm_node} = torch.nn.functional.linear({plan.a_expr}, {w}, {bias})"
    else:
        lib = f"t_{plan.gemm_node} = torch.matmul({plan.a_expr}, {plan.b_expr})"
    args = [lf.expr for lf in chain.tensor_leaves + chain.scalar_leaves]
    fwd = f"{lib}\nreturn launch_epilogue_kernel({', '.join(args)})"
    doc = (
        f"EGG expert: gemm family ({plan.kind}), algorithm library-{plan.kind}+fused-epilogue (mixed policy)."
    )
    return assemble(desc, "\n\n".join(kernels), "\n\n".join(launchers), fwd, doc)


def _generate_rowreduce(desc: TaskDescription, plan: GemmPlan, params: dict[str, Any]) -> str:
    """GEMM + elementwise epilogue + reduction over the output-feature dim (see the module doc)."""
    algo = params["algorithm"]
    if algo not in (ATOMIC, ATOMIC_IEEE, TWO_KERNEL, ROWBAND, LIB_REDUCE):
        raise Unsupported(f"algorithm {algo} does not apply to a GEMM with a row reduction")
    tensors, scal = _leaf_args(plan.epilogue)
    leaf_exprs = [lf.expr for lf in plan.epilogue.tensor_leaves + plan.epilogue.scalar_leaves]
    precision = None
    if plan.dtype == "float32":
        precision = "ieee" if "ieee" in algo else "tf32x3"
    red = plan.reduce or "sum"
    init = {"sum": "torch.zeros", "mean": "torch.zeros"}.get(red)
    fill = {"max": "float('-inf')", "min": "float('inf')"}.get(red)
    keep = " + (1,)" if plan.keepdim else ""
    lib = algo == LIB_REDUCE
    sig = ", ".join(
        (["t"] if lib else ["a", "b"]) + (["bias"] if plan.bias_expr and not lib else []) + tensors + scal
    )
    L = [f"def launch_gemm_rowreduce({sig}):"]
    if lib:
        # t: the library GEMM's output; reduce its rows as one (1, rows, N) batch.
        L += [
            "    out_shape = tuple(t.shape)",
            "    N = out_shape[-1]",
            "    nb, M = 1, t.numel() // max(N, 1)",
            "    x3 = t.reshape(1, M, N)",
            "    dtype, device = t.dtype, t.device",
        ]
    else:
        L += [
            "    a3, b3, nb, M, N, K, out_shape = _gemm_operands(a, b)",
            "    dtype, device = a.dtype, a.device",
        ]
    L.append(f"    red_shape = tuple(out_shape[:-1]){keep}")
    if algo in (ATOMIC, ATOMIC_IEEE):
        # Partial row results are combined atomically: start from the reduction's identity.
        if init:
            L.append(f"    r = {init}(red_shape, device=device, dtype=torch.float32)")
        else:
            L.append(f"    r = torch.full(red_shape, {fill}, device=device, dtype=torch.float32)")
    else:
        L.append("    r = torch.empty(red_shape, device=device, dtype=torch.float32)")
    L += [
        "    if r.numel() == 0 or N == 0:",
        "        return r.to(dtype)",
        "    inv_n = 1.0 / N",
    ]
    epi_call: list[str] = []
    for t in tensors:
        L.append(f"    {t}_e, {t}_sb, {t}_sm, {t}_sn = _epi_view({t}, out_shape, nb, M, N)")
        epi_call += [f"{t}_e", f"{t}_sb", f"{t}_sm", f"{t}_sn"]
    epi_call += [f"float({x})" for x in scal]
    epi = "".join(f", {x}" for x in epi_call)
    bias_arg = ", bias" if plan.bias_expr and not lib else ""
    if plan.bias_expr and not lib:
        L.append("    bias = bias.contiguous()")
    strides = (
        "a3.stride(0) if a3.shape[0] > 1 else 0, a3.stride(1), a3.stride(2), "
        "b3.stride(0) if b3.shape[0] > 1 else 0, b3.stride(1), b3.stride(2)"
    )
    bm, bn, bk = (int(params.get(k, 0)) for k in ("BLOCK_M", "BLOCK_N", "BLOCK_K"))
    gm = int(params.get("GROUP_M", 8))
    warps, stages = int(params.get("num_warps", 4)), int(params.get("num_stages", 3))
    even = f"EVEN_K=(K % {bk} == 0)" if bk else ""
    # Row-reduce kernel tiles (two-kernel and library variants): wide rows, a few rows per program.
    rtile = [
        "    rbn = min(512, max(16, triton.next_power_of_2(N)))",
        "    rbm = max(1, min(64, 4096 // rbn))",
        "    rgrid = (triton.cdiv(M, rbm), nb)",
    ]
    kernels = [ewops.HELPERS]
    if algo in (ATOMIC, ATOMIC_IEEE):
        kernels.append(_gemm_kernel(plan, precision, split=False, atomic=True))
        L += [
            f"    grid = (triton.cdiv(M, {bm}) * triton.cdiv(N, {bn}), nb)",
            f"    gemm_rowreduce_kernel[grid](a3, b3, r{bias_arg}, M, N, K, {strides}, inv_n{epi}, "
            f"BLOCK_M={bm}, BLOCK_N={bn}, BLOCK_K={bk}, GROUP_M={gm}, {even}, "
            f"num_warps={warps}, num_stages={stages})",
        ]
    elif algo == ROWBAND:
        kernels.append(_rowband_kernel(plan, precision))
        L += [
            f"    grid = (triton.cdiv(M, {bm}), nb)",
            f"    gemm_rowband_kernel[grid](a3, b3, r{bias_arg}, M, N, K, {strides}, inv_n{epi}, "
            f"BLOCK_M={bm}, BLOCK_N={bn}, BLOCK_K={bk}, {even}, num_warps={warps}, num_stages={stages})",
        ]
    elif algo == TWO_KERNEL:
        kernels += [_gemm_kernel(plan, precision, split=False), _rowreduce_kernel(plan, with_epilogue=False)]
        L += [
            # fp32 intermediate: the epilogue result is reduced at full precision.
            "    y = torch.empty((nb, M, N), device=device, dtype=torch.float32)",
            f"    grid = (triton.cdiv(M, {bm}) * triton.cdiv(N, {bn}), nb)",
            f"    gemm_kernel[grid](a3, b3, y{bias_arg}, M, N, K, {strides}, y.stride(0), y.stride(1), "
            f"y.stride(2){epi}, BLOCK_M={bm}, BLOCK_N={bn}, BLOCK_K={bk}, GROUP_M={gm}, {even}, "
            f"num_warps={warps}, num_stages={stages})",
            *rtile,
            "    rowreduce_kernel[rgrid](y, r, M, N, y.stride(0), y.stride(1), y.stride(2), inv_n, "
            "BLOCK_M=rbm, BLOCK_N=rbn, num_warps=4)",
        ]
    else:
        kernels.append(_rowreduce_kernel(plan, with_epilogue=True))
        L += [
            *rtile,
            "    rowreduce_kernel[rgrid](x3, r, M, N, x3.stride(0), x3.stride(1), x3.stride(2), "
            f"inv_n{epi}, BLOCK_M=rbm, BLOCK_N=rbn, num_warps=4)",
        ]
    L.append("    return r if dtype == torch.float32 else r.to(dtype)")
    if lib:
        if plan.kind == "linear":
            w = plan.b_expr[: -len(".t()")]
            gemm = f"torch.nn.functional.linear({plan.a_expr}, {w}, {plan.bias_expr or 'None'})"
        else:
            gemm = f"torch.matmul({plan.a_expr}, {plan.b_expr})"
        call = [f"t_{plan.gemm_node}", *leaf_exprs]
        fwd = f"t_{plan.gemm_node} = {gemm}\nreturn launch_gemm_rowreduce({', '.join(call)})"
    else:
        call = [plan.a_expr, plan.b_expr] + ([plan.bias_expr] if plan.bias_expr else []) + leaf_exprs
        fwd = f"return launch_gemm_rowreduce({', '.join(call)})"
    doc = f"EGG expert: gemm family ({plan.kind} + row {red}), algorithm {algo}" + (
        f", precision {precision}." if precision and not lib else "."
    )
    return assemble(desc, "\n\n".join(kernels), _SHAPES + "\n\n" + "\n".join(L) + "\n", fwd, doc)


# ---------------------------------------------------------------------------------------------
# GEMV: a matrix times a vector operand (N == 1 or M == 1), split over K
# ---------------------------------------------------------------------------------------------

# Tunables of the GEMV: the tile along the matrix's contiguous dim (BLOCK_V) and across it
# (BLOCK_R), the K split (0: sized at launch to fill the GPU) and the programs per SM it aims at.
GEMV_SPACE: dict[str, dict[str, list[Any]]] = {
    "mapping": {"SPLIT_K": [2, 4, 8, 16, 32], "PROGS_PER_SM": [4, 16, 2]},
    "tiling": {"BLOCK_V": [256, 1024, 128], "BLOCK_R": [4, 16, 2, 32]},
    "memory": {"num_warps": [8, 2, 16], "num_stages": [2, 3, 4]},
}

GEMV_KERNEL = """
@triton.jit
def gemv_kernel(mat_ptr, vec_ptr, ws_ptr, L, K, NV, s_mb, s_mi, s_mk, s_vb, s_vj, s_vk,
                ws_s, ws_b, ws_i, ws_j, k_per, EVEN_K: tl.constexpr, WIDE_K: tl.constexpr,
                CLAMP_I: tl.constexpr, BLOCK_I: tl.constexpr, BLOCK_K: tl.constexpr):
    # Partial dot products of BLOCK_I matrix lines with one vector over this program's K chunk:
    # fp32 FMAs on BLOCK_I x BLOCK_K tiles, one row reduction at the end.
    n_iblk = tl.cdiv(L, BLOCK_I)
    pid_i = tl.program_id(0) % n_iblk
    bj = tl.program_id(0) // n_iblk  # (batch, vector) pair: one grid axis, no 65535 limit
    sk = tl.program_id(1)
    bid = (bj // NV).to(tl.int64)
    j = bj % NV
    ri = pid_i * BLOCK_I + tl.arange(0, BLOCK_I)
    im = (ri < L)[:, None]
    if CLAMP_I:
        # Out-of-range lines re-read line 0 instead of masking every load; not when the lines
        # are the matrix's contiguous dim (clamping would hide that, and the 16-byte vectors).
        ri = tl.where(ri < L, ri, 0)
    rk = tl.arange(0, BLOCK_K)
    k_lo = sk * k_per
    k_hi = tl.minimum(K, k_lo + k_per)
    # Loop-invariant line pointers plus per-step offsets: no BLOCK_I x BLOCK_K tile of 64-bit
    # pointers carried through the loop (that alone would take most of the register file).
    m_rows = mat_ptr + bid * s_mb + ri[:, None].to(tl.int64) * s_mi
    v_base = vec_ptr + bid * s_vb
    if NV > 1:
        v_base += j * s_vj
    acc = tl.zeros((BLOCK_I, BLOCK_K), dtype=tl.float32)
    for k0 in range(k_lo, k_hi, BLOCK_K):
        kk = k0 + rk
        if WIDE_K:
            kk = kk.to(tl.int64)
        m_ptrs = m_rows + kk[None, :] * s_mk
        if EVEN_K:
            v = tl.load(v_base + kk * s_vk)
            if CLAMP_I:
                a = tl.load(m_ptrs)
            else:
                a = tl.load(m_ptrs, mask=im, other=0.0)
        else:
            km = kk < k_hi
            v = tl.load(v_base + kk * s_vk, mask=km, other=0.0)
            if CLAMP_I:
                a = tl.load(m_ptrs, mask=km[None, :], other=0.0)
            else:
                a = tl.load(m_ptrs, mask=im & km[None, :], other=0.0)
        acc += a.to(tl.float32) * v.to(tl.float32)[None, :]
    part = tl.sum(acc, 1)
    tl.store(ws_ptr + sk * ws_s + bid * ws_b + ri * ws_i + j * ws_j, part, mask=ri < L)
"""


def _generate_gemv(desc: TaskDescription, plan: GemmPlan, params: dict[str, Any]) -> str:
    bias_arg = ", bias" if plan.bias_expr else ""
    bv, br = int(params["BLOCK_V"]), int(params["BLOCK_R"])
    split, per_sm = int(params["SPLIT_K"]), int(params["PROGS_PER_SM"])
    warps, stages = int(params["num_warps"]), int(params["num_stages"])
    L, epi, call = _launch_head(plan)
    L += [
        "    sab = a3.stride(0) if a3.shape[0] > 1 else 0",
        "    sbb = b3.stride(0) if b3.shape[0] > 1 else 0",
        # The matrix is the operand with the longer free dim; each of the NV vectors (the other
        # operand's free dim, 1 for a true GEMV) is one output line of length L.
        "    if N <= M:",
        "        mat, s_mb, s_mi, s_mk, L = a3, sab, a3.stride(1), a3.stride(2), M",
        "        vec, s_vb, s_vj, s_vk, NV = b3, sbb, b3.stride(2), b3.stride(1), N",
        "        ws_i, ws_j = N, 1",
        "    else:",
        "        mat, s_mb, s_mi, s_mk, L = b3, sbb, b3.stride(2), b3.stride(1), N",
        "        vec, s_vb, s_vj, s_vk, NV = a3, sab, a3.stride(1), a3.stride(2), M",
        "        ws_i, ws_j = 1, N",
        # The long side of the tile runs along the matrix's contiguous dim: coalesced loads.
        f"    bi, bk = ({br}, {bv}) if s_mk == 1 or s_mi != 1 else ({bv}, {br})",
        "    bk = min(bk, max(16, triton.next_power_of_2(K)))",
        "    bi = min(bi, max(1, triton.next_power_of_2(L)))",
        "    lines = triton.cdiv(L, bi) * nb * NV",
    ]
    if split > 0:
        L.append(f"    split = max(1, min({split}, triton.cdiv(K, bk)))")
    else:
        L += [
            "    sms = torch.cuda.get_device_properties(a.device).multi_processor_count if a.is_cuda else 4",
            # split K only as far as filling the GPU needs, each chunk at least 4 tiles long
            f"    split = max(1, min(triton.cdiv(sms * {per_sm}, lines), triton.cdiv(K, 4 * bk), 65535))",
        ]
    L += [
        "    k_per = triton.cdiv(triton.cdiv(K, split), bk) * bk",
        "    split = triton.cdiv(K, k_per)",
        "    ws = torch.empty((split, nb, M, N), device=a.device, dtype=torch.float32)",
        "    gemv_kernel[(triton.cdiv(L, bi) * nb * NV, split)](mat, vec, ws, L, K, NV, s_mb, s_mi, s_mk, "
        "s_vb, s_vj, s_vk, nb * M * N, M * N, ws_i, ws_j, k_per, EVEN_K=(K % bk == 0), "
        "WIDE_K=(K + bk) * max(abs(s_mk), abs(s_vk)) >= 2**31, CLAMP_I=s_mi != 1, BLOCK_I=bi, "
        f"BLOCK_K=bk, num_warps={warps}, num_stages={stages})",
        "    rbm = max(16, min(128, triton.next_power_of_2(M)))",
        "    rbn = max(16, min(128, triton.next_power_of_2(N)))",
        "    rgrid = (triton.cdiv(M, rbm), triton.cdiv(N, rbn), nb)",
        f"    gemm_reduce_kernel[rgrid](ws, c3{bias_arg}, M, N, nb, c3.stride(0), c3.stride(1), "
        f"c3.stride(2){epi}, BLOCK_M=rbm, BLOCK_N=rbn, SPLIT_K=split, num_warps=4)",
        "    return out",
    ]
    doc = (
        f"EGG expert: gemm family ({plan.kind}), algorithm {GEMV}: a matrix-vector product split "
        "over K, fp32 FMA (precision ieee), then one reduce + epilogue kernel."
    )
    kernels = [ewops.HELPERS, GEMV_KERNEL, _reduce_kernel(plan)]
    return assemble(
        desc,
        "\n\n".join(kernels),
        _SHAPES + "\n\n" + "\n".join(L) + "\n",
        f"return launch_gemm({', '.join(call)})",
        doc,
    )
