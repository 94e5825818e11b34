"""Row-wise normalisations: elementwise DAGs mixed with keepdim reductions over the trailing dims,
plus layer_norm / rms_norm / var / std. Covers LayerNorm, RMSNorm (module or written out as
x / sqrt(mean(x**2) + eps)), L1/L2 row normalisation, row-wise standardisation, ...

Each row (the trailing reduced dims, flattened to R) is one program. Statistics are computed in
dependency levels (the variance needs the mean first):
  whole-row   the row is loaded once into registers and every level is computed from it
              (rows longer than WHOLE_ROW_MAX fall back, at run time, to the multi-pass kernel)
  multi-pass  one streaming pass over the row per level, then a final pass that writes
  split-row   few long rows: each row split into chunks over many programs, a launch per level
              writing chunk partials, then one that combines them and writes; with ORDER_CH
              (memory stage) a single ticket-ordered launch instead, whose later passes find a
              chunk in L2 (kernelfiles.ticket_head)
Operands: full-shape tensors, per-column tensors (weights over the normalised dims), per-row
tensors, and one-element tensors, classified at launch.

The normalised dims may also sit in the middle (e.g. RMSNorm over channels of (N, C, H, W)): the
tensor is viewed as (outer, R, inner) and a row is one (outer, inner) pair whose R elements lie
`inner` apart. With inner == 1 (trailing dims) Triton specialises the stride away.

The rowchain family reuses this DAG and these kernels with two additions: scan nodes (a cumsum
along the row; the multi-pass kernel carries it from tile to tile) and a per-row output (the
statistic stored once per row instead of a row-shaped tensor).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from graph.records import OpNode, TaskDescription

from .. import ewops
from ..graphview import GraphView, Leaf, Unsupported, arg_value, assemble, flit, is_node
from ..kernelfiles import jit_source, ticket_count, ticket_head, ticket_wait
from ..spaces import next_pow2

WHOLE_ROW_MAX = 16384
RED_KINDS = {"sum", "mean", "amax", "amin"}
_IDENT = {"sum": "0.0", "amax": "-float('inf')", "amin": "float('inf')"}
_RED_FN = {"sum": "tl.sum", "amax": "tl.max", "amin": "tl.min"}
_COMBINE = {"sum": "{a} + {b}", "amax": "tl.maximum({a}, {b})", "amin": "tl.minimum({a}, {b})"}


@dataclass
class DNode:
    name: str
    kind: str  # "ew" | "red" | "scan" (an inclusive cumsum along the row)
    deps: list[str]
    expr: Callable[[dict[str, str]], str] | None = None  # ew: env -> expression
    red: str = ""  # red: sum | amax | amin (mean = sum then an ew divide)
    level: int = 0
    # For the sum of squared deviations of a value from its own mean: (value, its sum node).
    # The split-row algorithm computes it in the same pass as that sum (shifted sums per chunk,
    # chunks combined with Chan's formula) instead of a pass of its own after the mean.
    welford: tuple[str, str] | None = None


@dataclass
class RowPlan:
    nodes: list[DNode]
    leaves: list[Leaf]  # tensor leaves
    scalars: list[Leaf]
    out: str
    ndims_reduced: int
    n_after: int  # dims after the normalised ones (0: trailing)
    x_leaf: Leaf  # a full-shape leaf that sizes the launch
    n_levels: int
    ops: list[str] = field(default_factory=list)
    # "full": the output is row-shaped; "row": one value per row (a reduced statistic)
    out_kind: str = "full"
    out_shape: list[int] | None = None  # the output's captured shape (per-row outputs)


def _reduced_dims(n: OpNode, rank: int) -> tuple[int, int]:
    """(number of reduced dims, number of dims after them); they must be adjacent."""
    d = arg_value(n, 1, "dim")
    if d is None or is_node(d):
        raise Unsupported(f"{n.op} without a constant dim")
    ds = sorted({int(x) % rank for x in (d if isinstance(d, list) else [d])})
    if ds != list(range(ds[0], ds[0] + len(ds))):
        raise Unsupported(f"{n.op} over dims {ds} is not over adjacent dims")
    return len(ds), rank - 1 - ds[-1]


class RowBuilder:
    # Whether a reduction may drop its reduced dims (a per-row result the chain keeps per row).
    flat_ok = False

    def __init__(self, view: GraphView):
        self.view = view
        self.nodes: list[DNode] = []
        self.leaves: list[Leaf] = []
        self.scalars: list[Leaf] = []
        self.known: set[str] = set()
        self.ndims: int | None = None
        self.n_after = 0
        self.k = 0

    def leaf(self, lf: Leaf) -> str:
        if lf.name not in self.known:
            self.known.add(lf.name)
            (self.scalars if lf.is_scalar else self.leaves).append(lf)
        return lf.name

    def ref(self, a: Any) -> str:
        name = self.view.resolve(a["node"])
        if name in self.known:
            return name
        lf = self.view.leaves.get(name)
        if lf is None:
            raise Unsupported(f"value {name} is not available")
        return self.leaf(lf)

    def fresh(self, tag: str) -> str:
        self.k += 1
        return f"{tag}{self.k}"

    def ew(self, name: str, deps: list[str], fn: Callable[[dict[str, str]], str]) -> str:
        self.nodes.append(DNode(name, "ew", deps, expr=fn))
        self.known.add(name)
        return name

    def red(self, name: str, src: str, kind: str) -> str:
        self.nodes.append(DNode(name, "red", [src], red=kind))
        self.known.add(name)
        return name

    def set_ndims(self, k: int, after: int = 0) -> None:
        if self.ndims is None:
            self.ndims, self.n_after = k, after
        elif (self.ndims, self.n_after) != (k, after):
            raise Unsupported("reductions over different dims")

    def mean(self, name: str, src: str) -> str:
        s = self.red(self.fresh("sum"), src, "sum")
        return self.ew(name, [s], lambda e, s=s: f"{e[s]} / R")

    def centered_sq(self, src: str) -> tuple[str, str]:
        """(mean, sum of squared deviations) of src: two levels, numerically stable."""
        s = self.red(self.fresh("sum"), src, "sum")
        mu = self.ew(self.fresh("mu"), [s], lambda e, s=s: f"{e[s]} / R")
        d = self.ew(self.fresh("dev"), [src, mu], lambda e, a=src, m=mu: f"({e[a]} - {e[m]})")
        d2 = self.ew(self.fresh("dev2"), [d], lambda e, d=d: f"{e[d]} * {e[d]}")
        ss = self.red(self.fresh("ss"), d2, "sum")
        self.nodes[-1].welford = (src, s)
        return mu, ss

    def plan(self, out: str, x_leaf: Leaf, ops: list[str], **kw: Any) -> RowPlan:
        """The plan of the DAG built so far, with its reductions' dependency levels: a reduction
        sits one level above the reductions it (transitively) reads."""
        assert self.ndims is not None
        level: dict[str, int] = {}
        for dn in self.nodes:
            lv = max((level.get(d, 0) for d in dn.deps), default=0)
            dn.level = lv + 1 if dn.kind == "red" else lv
            level[dn.name] = dn.level
        return RowPlan(
            nodes=self.nodes,
            leaves=self.leaves,
            scalars=self.scalars,
            out=out,
            ndims_reduced=self.ndims,
            n_after=self.n_after,
            x_leaf=x_leaf,
            n_levels=max((d.level for d in self.nodes if d.kind == "red"), default=0),
            ops=ops,
            **kw,
        )

    def add(self, n: OpNode) -> None:
        """Add graph node `n` (elementwise, a reduction, or a norm) to the DAG."""
        if ewops.is_elementwise(n):
            deps = [self.ref({"node": r}) for r in self.view.refs(n)]

            def fn(e: dict[str, str], n: OpNode = n) -> str:
                def val(a: Any) -> str:
                    if is_node(a):
                        return e[self.view.resolve(a["node"])]
                    return flit(a)

                return ewops.emit(n, val)

            self.ew(n.name, deps, fn)
            return
        src_ref = n.args[0] if n.args else n.kwargs.get("input")
        if not is_node(src_ref):
            raise Unsupported(f"{n.op} of a constant")
        src = self.ref(src_ref)
        src_rank = len(self.view.nodes[self.view.resolve(src_ref["node"])].shape or [])
        if n.op in RED_KINDS | {"var", "std", "norm"}:
            if n.op == "norm":
                p = arg_value(n, 1, "p", "fro")
                if p not in (2, 2.0, "fro"):
                    raise Unsupported(f"norm(p={p!r})")
                dim = n.kwargs.get("dim", n.args[2] if len(n.args) > 2 else None)
                keep = bool(n.kwargs.get("keepdim", n.args[3] if len(n.args) > 3 else False))
                k, after = (
                    _reduced_dims(n.model_copy(update={"args": [src_ref, dim]}), src_rank)
                    if dim is not None
                    else (src_rank, 0)
                )
            else:
                keep = bool(arg_value(n, 2, "keepdim", False))
                k, after = _reduced_dims(n, src_rank)
            # Reducing every dim gives a 0-d tensor, which broadcasts exactly like the keepdim
            # result (one row spanning the whole tensor); otherwise the dims would not line up.
            if not keep and k != src_rank and not self.flat_ok:
                raise Unsupported(f"{n.op} without keepdim inside a row normalisation")
            self.set_ndims(k, after)
            if n.op in ("sum", "amax", "amin"):
                self.red(n.name, src, n.op)
            elif n.op == "mean":
                self.mean(n.name, src)
            elif n.op == "norm":
                sq = self.ew(self.fresh("sq"), [src], lambda e, s=src: f"{e[s]} * {e[s]}")
                ss = self.red(self.fresh("ss"), sq, "sum")
                self.ew(n.name, [ss], lambda e, ss=ss: f"tl.sqrt({e[ss]})")
            else:
                corr = n.kwargs.get("correction")
                if corr is None:
                    unbiased = n.kwargs.get("unbiased", True)
                    corr = 1 if unbiased else 0
                _, ss = self.centered_sq(src)
                if n.op == "var":
                    self.ew(n.name, [ss], lambda e, ss=ss, c=corr: f"{e[ss]} / (R - {flit(c)})")
                else:
                    self.ew(n.name, [ss], lambda e, ss=ss, c=corr: f"tl.sqrt({e[ss]} / (R - {flit(c)}))")
            return
        if n.op in ("layer_norm", "rms_norm"):
            if n.kind == "call_module":
                shape = n.module_attrs.get("normalized_shape")
                eps = n.module_attrs.get("eps", 1e-5)
                affine = n.module_attrs.get("elementwise_affine", True)
                w = self.leaf(Leaf(f"{n.name}_w", f"self.{n.target}.weight", None)) if affine else None
                has_b = affine and n.op == "layer_norm" and n.module_attrs.get("bias", True)
                bias = self.leaf(Leaf(f"{n.name}_b", f"self.{n.target}.bias", None)) if has_b else None
            else:
                shape = arg_value(n, 1, "normalized_shape")
                wref = arg_value(n, 2, "weight")
                w = self.ref(wref) if is_node(wref) else None
                if n.op == "layer_norm":
                    bref = arg_value(n, 3, "bias")
                    bias = self.ref(bref) if is_node(bref) else None
                    eps = arg_value(n, 4, "eps", 1e-5)
                else:
                    bias = None
                    eps = arg_value(n, 3, "eps", None)
            if eps is None:
                eps = 1.1920928955078125e-07  # torch.finfo(float32).eps, RMSNorm's default
            k = len(shape) if isinstance(shape, list) else 1
            self.set_ndims(k)
            if n.op == "layer_norm":
                mu, ss = self.centered_sq(src)
                core = self.ew(
                    self.fresh("ln"),
                    [src, mu, ss],
                    lambda e, s=src, m=mu, q=ss, eps=eps: (
                        f"({e[s]} - {e[m]}) * tl.rsqrt({e[q]} / R + {flit(eps)})"
                    ),
                )
            else:
                sq = self.ew(self.fresh("sq"), [src], lambda e, s=src: f"{e[s]} * {e[s]}")
                ms = self.mean(self.fresh("ms"), sq)
                core = self.ew(
                    self.fresh("rms"),
                    [src, ms],
                    lambda e, s=src, m=ms, eps=eps: f"{e[s]} * tl.rsqrt({e[m]} + {flit(eps)})",
                )
            if w is not None:
                core = self.ew(self.fresh("wt"), [core, w], lambda e, c=core, w=w: f"{e[c]} * {e[w]}")
            if bias is not None:
                core = self.ew(self.fresh("bs"), [core, bias], lambda e, c=core, bb=bias: f"{e[c]} + {e[bb]}")
            self.ew(n.name, [core], lambda e, c=core: e[c])
            return
        if n.op == "instance_norm" and n.kind == "call_module":
            # per (sample, channel) over the spatial dims: a layer norm over the trailing rank-2 dims
            if n.module_attrs.get("affine") or n.module_attrs.get("track_running_stats"):
                raise Unsupported("instance_norm with affine weights or running stats")
            self.set_ndims(len(n.shape or []) - 2)
            mu, ss = self.centered_sq(src)
            eps = float(n.module_attrs.get("eps", 1e-5))
            core = self.ew(
                self.fresh("in"),
                [src, mu, ss],
                lambda e, s=src, m=mu, q=ss, eps=eps: (
                    f"({e[s]} - {e[m]}) * tl.rsqrt({e[q]} / R + {flit(eps)})"
                ),
            )
            self.ew(n.name, [core], lambda e, c=core: e[c])
            return
        raise Unsupported(f"{n.op} inside a row normalisation")


def match(view: GraphView) -> RowPlan | None:
    nodes = view.compute_nodes()
    special = {"layer_norm", "rms_norm", "var", "std", "instance_norm"}
    has_red = any(n.op in RED_KINDS | special | {"norm"} for n in nodes)
    if not has_red:
        return None
    out_node = view.nodes[view.output]
    b = RowBuilder(view)
    ops: list[str] = []
    for n in nodes:
        ops.append(n.op)
        b.add(n)
    out = view.output
    if out_node.shape is None or b.ndims is None:
        return None
    # The output must be row-shaped (not a reduced statistic) for this family.
    full = [lf for lf in b.leaves if lf.shape == out_node.shape]
    if not full:
        raise Unsupported("row normalisation whose output is not input-shaped")
    return b.plan(out, full[0], ops)


SPLIT = "split-row"
# Rows at least this long, and fewer rows than this many programs, make one program per row
# leave most of the GPU idle (an H200 has 132 SMs): the split-row algorithm goes first.
SPLIT_MIN_R = 16384
SPLIT_MAX_ROWS = 512


def rows_and_length(plan: RowPlan) -> tuple[int, int]:
    shape = list(plan.x_leaf.shape or [])
    hi = len(shape) - plan.n_after
    lo = hi - plan.ndims_reduced
    r = 1
    for d in shape[lo:hi]:
        r *= int(d)
    rows = 1
    for i, d in enumerate(shape):
        if not lo <= i < hi:
            rows *= int(d)
    return rows, r


def algorithms(plan: RowPlan) -> list[str]:
    rows, r = rows_and_length(plan)
    if r >= SPLIT_MIN_R and rows < SPLIT_MAX_ROWS and plan.n_after == 0:
        return [SPLIT, "multi-pass", "whole-row"]
    return ["whole-row", "multi-pass", SPLIT]


def defaults(plan: RowPlan, algorithm: str) -> dict[str, Any]:
    if algorithm == SPLIT:
        # 8 programs per SM keep enough 16-byte loads in flight to reach the bandwidth roof.
        return {"BLOCK_N": 4096, "num_warps": 8, "PROGS_PER_SM": 8, "ORDER_CH": 0}
    if algorithm == "whole-row":
        # ROW_WARPS 0: the whole-row kernel's warps follow the row length (emit); BLOCK_N and
        # num_warps size the multi-pass kernel kept for rows too long at run time
        return {"BLOCK_N": 4096, "num_warps": 8, "ROW_WARPS": 0}
    return {"BLOCK_N": 4096, "num_warps": 8}


def _row_warps(plan: RowPlan) -> list[int]:
    """Whole-row warps to try: those other than what the launcher picks for the captured row
    (emit's run-time rule: 4 up to 1024 elements, 8 up to 4096, else 16)."""
    shape = plan.x_leaf.shape or []
    hi = len(shape) - plan.n_after
    r = 1
    for d in shape[hi - plan.ndims_reduced : hi]:
        r *= d
    block = next_pow2(r)
    auto = 4 if block <= 1024 else (8 if block <= 4096 else 16)
    return [w for w in (8, 4, 16, 2) if w != auto]


def space(plan: RowPlan, params: dict[str, Any], stage: str, sp: dict[str, list]) -> dict[str, list]:
    sp = dict(sp)
    sp.pop("ROWS", None)
    if params["algorithm"] == "whole-row":
        # the timed kernel is the whole-row one: its warps, not the multi-pass kernel's
        sp.pop("BLOCK_N", None)
        sp.pop("num_warps", None)
        if stage == "memory":
            sp["ROW_WARPS"] = _row_warps(plan)[:2]
    if params["algorithm"] == SPLIT and stage == "mapping":
        sp["PROGS_PER_SM"] = [4, 16, 2, 32]
    # The ordered one-launch variant (ORDER_CH: a chunk's later passes read it from L2) is not
    # offered: on an H100 a LayerNorm with full-shape weights (16 rows of 4M elements) lost with
    # every chunk size in two sittings (0.35 to 0.57 ms against 0.29 for two launches), and in
    # the tuned runs of 2026-12-08 it was screened out at 0.45-0.46 ms against 0.28-0.29 (suite
    # nm10, KernelBench level1/40). Its kernel stays for a model (or a caller) that sets it.
    return sp


# ---------------------------------------------------------------------------------------------


# row = (outer, inner) pair; element r of the row is at base + r * inner.
_ROW_BASE = [
    "row = tl.program_id(0).to(tl.int64)",
    "base = (row // inner) * R * inner + row % inner",
]


def _loads(
    plan: RowPlan,
    cols: str,
    mask: str | None,
    per_row: str = "row",
    row_mask: str | None = None,
    rb: str | None = None,
) -> tuple[list[str], dict[str, str]]:
    """Loads of every leaf at `cols` (`mask` None: a whole chunk, unmasked). `rb`: the chunk's
    row offset `base + start * inner` as its own (alignment-hinted) value, see _chunks."""
    lines: list[str] = []
    env: dict[str, str] = {}
    m = f", mask={mask}, other=0.0" if mask else ""
    full = f"{rb} + cols0 * inner" if rb else f"base + {cols} * inner"
    for lf in plan.leaves:
        p = f"l_{lf.name}"
        v = f"x_{lf.name}"
        rm = f", mask={row_mask}, other=0.0" if row_mask else ""
        lines += [
            f"if {p}_MODE == 0:",
            f"    {v} = tl.load({p}_ptr + {full}{m}).to(tl.float32)",
            f"elif {p}_MODE == 1:",
            f"    {v} = tl.load({p}_ptr + {cols}{m}).to(tl.float32)",
            f"elif {p}_MODE == 2:",
            f"    {v} = tl.load({p}_ptr + {per_row}{rm}).to(tl.float32)",
            "else:",
            f"    {v} = tl.load({p}_ptr).to(tl.float32)",
        ]
        env[lf.name] = v
    for lf in plan.scalars:
        env[lf.name] = f"l_{lf.name}_val"
    return lines, env


def _needed(plan: RowPlan, targets: list[str]) -> list[DNode]:
    """ew and scan nodes needed (transitively, stopping at reductions) to compute `targets`."""
    by = {d.name: d for d in plan.nodes}
    need: set[str] = set()
    stack = list(targets)
    while stack:
        t = stack.pop()
        if t in need or t not in by:
            continue
        need.add(t)
        if by[t].kind != "red":
            stack.extend(by[t].deps)
    return [d for d in plan.nodes if d.name in need and d.kind != "red"]


def _elem_lines(nodes: list[DNode], env: dict[str, str], mask: str, axis: int) -> list[str]:
    """Statements computing ew / scan `nodes` on a tile; a scan adds the running carry
    `c_<node>` of the tiles before it (a whole row has none: its carry is 0) and updates it."""
    L = []
    for d in nodes:
        var = f"v_{d.name}"
        if d.kind == "scan":
            L += [
                f"w_{d.name} = tl.where({mask}, {env[d.deps[0]]}, 0.0)",
                f"{var} = tl.cumsum(w_{d.name}, {axis}) + c_{d.name}",
                f"c_{d.name} += tl.sum(w_{d.name}, {axis})",
            ]
        else:
            assert d.expr is not None
            L.append(f"{var} = {d.expr(env)}")
        env[d.name] = var
    return L


def _carries(nodes: list[DNode]) -> list[str]:
    return [f"c_{d.name} = tl.zeros([], dtype=tl.float32)" for d in nodes if d.kind == "scan"]


def _store(plan: RowPlan, val: str, row: str, mask: str | None, rb: str | None = None) -> str:
    """The output store: a row-shaped output at the tile's offsets, a per-row one at its row."""
    m = f", mask={mask}" if mask else ""
    if plan.out_kind == "row":
        return f"tl.store(out_ptr + {row}, {val}.to(out_ptr.dtype.element_ty){m})"
    full = f"{rb} + cols0 * inner" if rb else "base + cols * inner"
    return f"tl.store(out_ptr + {full}, {val}.to(out_ptr.dtype.element_ty){m})"


def _chunks(lo: str, hi: str, body: Callable[[bool], list[str]]) -> list[str]:
    """A loop over the row's elements [lo, hi) in chunks of BLOCK_N, `body(masked)` per chunk.

    With contiguous rows (inner == 1, ALIGN 16) the chunks start where the tensor's offset is a
    multiple of 16, not at `lo`, and only a chunk the range's ends cut is masked: the whole ones
    load and store 128-bit vectors even when the row length is not a multiple of 16 (a mask
    against such a length, or a row start Triton cannot prove aligned, makes every access one
    32-bit word). `mask` stays defined in both paths for the bodies' where()s."""
    return [
        # int32 like the row's own offsets (base is int64): the loop's `cols` keeps one type
        f"first = {lo} - ((base + {lo}) % ALIGN).to(tl.int32)",
        f"for start in range(first, {hi}, BLOCK_N):",
        "    cols = start + cols0",
        "    rb = tl.multiple_of(base + start * inner, ALIGN)",
        f"    if (start >= {lo}) & (start + BLOCK_N <= {hi}):",
        "        mask = cols0 < BLOCK_N",
        *("        " + x for x in body(False)),
        "    else:",
        f"        mask = (cols >= {lo}) & (cols < {hi})",
        *("        " + x for x in body(True)),
    ]


def _whole_row_kernel(plan: RowPlan, sig: str) -> str:
    """ROWS whole rows per program, each loaded once into registers: a (ROWS, BLOCK_N) tile, so
    short rows (a LayerNorm over 64 channels) fill the program's lanes instead of leaving most
    of them masked, and a launch has rows / ROWS programs instead of one per row."""
    L = [
        "row = tl.program_id(0).to(tl.int64) * ROWS + tl.arange(0, ROWS)",
        "base = ((row // inner) * R * inner + row % inner)[:, None]",
        "cols = tl.arange(0, BLOCK_N)[None, :]",
        "rmask = (row < n_rows)[:, None]",
        "mask = rmask & (cols < R)",
    ]
    loads, env = _loads(plan, "cols", "mask", per_row="row[:, None]", row_mask="rmask")
    L += loads
    for i, d in enumerate(plan.nodes):
        var = f"t{i}"
        if d.kind == "ew":
            assert d.expr is not None
            L.append(f"{var} = {d.expr(env)}")
        elif d.kind == "scan":
            L.append(f"{var} = tl.cumsum(tl.where(mask, {env[d.deps[0]]}, 0.0), 1)")
        else:
            src = env[d.deps[0]]
            L.append(f"{var} = {_RED_FN[d.red]}(tl.where(mask, {src}, {_IDENT[d.red]}), 1, keep_dims=True)")
        env[d.name] = var
    L.append(_store(plan, env[plan.out], "row[:, None]", "rmask" if plan.out_kind == "row" else "mask"))
    return jit_source("rn_whole_row_kernel", sig + ", n_rows, ROWS: tl.constexpr, BLOCK_N: tl.constexpr", L)


def _multi_pass_kernel(plan: RowPlan, sig: str) -> str:
    L = [*_ROW_BASE, "cols0 = tl.arange(0, BLOCK_N)"]
    stats: dict[str, str] = {}
    by_level: dict[int, list[DNode]] = {}
    for d in plan.nodes:
        if d.kind == "red":
            by_level.setdefault(d.level, []).append(d)
    for lv in sorted(by_level):
        reds = by_level[lv]
        for r in reds:
            L.append(f"acc_{r.name} = tl.full([BLOCK_N], {_IDENT[r.red]}, tl.float32)")
        needed = _needed(plan, [r.deps[0] for r in reds])

        def red_body(masked: bool, reds=reds, needed=needed) -> list[str]:
            loads, env = _loads(plan, "cols", "mask" if masked else None, rb="rb")
            env.update(stats)
            body = loads + _elem_lines(needed, env, "mask", 0)
            for r in reds:
                comb = _COMBINE[r.red].format(
                    a=f"acc_{r.name}", b=f"tl.where(mask, {env[r.deps[0]]}, {_IDENT[r.red]})"
                )
                body.append(f"acc_{r.name} = {comb}")
            return body

        L += _carries(needed)
        L += _chunks("0", "R", red_body)
        # Statistics of this level, and the ew values derived only from them, as scalars.
        for r in reds:
            L.append(f"s_{r.name} = {_RED_FN[r.red]}(acc_{r.name}, 0)")
            stats[r.name] = f"s_{r.name}"
    if plan.out_kind == "row":
        # One value per row, from the statistics alone: no pass over the row to write.
        env = dict(stats) | {lf.name: f"l_{lf.name}_val" for lf in plan.scalars}
        L += _elem_lines(_needed(plan, [plan.out]), env, "True", 0)
        L.append(_store(plan, env[plan.out], "row", None))
    else:
        needed = _needed(plan, [plan.out])

        def out_body(masked: bool) -> list[str]:
            loads, env = _loads(plan, "cols", "mask" if masked else None, rb="rb")
            env.update(stats)
            body = loads + _elem_lines(needed, env, "mask", 0)
            return [*body, _store(plan, env[plan.out], "row", "mask" if masked else None, rb="rb")]

        L += _carries(needed)
        L += _chunks("0", "R", out_body)
    return jit_source("rn_multi_pass_kernel", sig + ", ALIGN: tl.constexpr, BLOCK_N: tl.constexpr", L)


# -- split-row: each row split into chunks over many programs --------------------------------


def pass_levels(plan: RowPlan) -> dict[str, int]:
    """Pass (1-based) in which each reduction's chunk partials are computed; ew values get the
    pass after which they are available. A sum of squared deviations shares its mean's pass."""
    lv: dict[str, int] = {}
    for d in plan.nodes:
        if d.kind == "red" and d.welford is not None:
            lv[d.name] = lv.get(d.welford[0], 0) + 1
        else:
            base = max((lv.get(x, 0) for x in d.deps), default=0)
            lv[d.name] = base + 1 if d.kind == "red" else base
    return lv


_SPLIT_HEAD = [
    "row = tl.program_id(0).to(tl.int64)",
    "base = (row // inner) * R * inner + row % inner",
    "sid = tl.program_id(1)",
    "lo = sid * CH",
    "hi = tl.minimum(R, lo + CH)",
    "cols0 = tl.arange(0, BLOCK_N)",
]


def _ws(j: int, k: str) -> str:
    return f"ws_ptr + ({j} * rows + row) * NSPLIT + {k}"


def _combine(done: list[DNode], idx: dict[str, int], cg: bool = False) -> tuple[list[str], dict[str, str]]:
    """Lines folding every finished reduction's chunk partials into one value per row. `cg`: the
    loads skip L1 (partials of the same launch: a line cached while a neighbouring row's partials
    were read may be stale)."""
    if not done:
        return [], {}
    mod = ", cache_modifier='.cg'" if cg else ""
    L = ["kk = tl.arange(0, SPLIT_BLOCK)", "kmask = kk < NSPLIT"]
    env: dict[str, str] = {}
    for r in done:
        if r.welford is None:
            j = idx[r.name]
            L.append(f"p_{r.name} = tl.load({_ws(j, 'kk')}, mask=kmask, other={_IDENT[r.red]}{mod})")
            L.append(f"s_{r.name} = {_RED_FN[r.red]}(p_{r.name}, 0)")
            env[r.name] = f"s_{r.name}"
    wel = [r for r in done if r.welford is not None]
    if wel:
        # Chan et al.: M2 = sum_k M2_k + n_k * (mean_k - mean)^2 over the chunks k.
        L.append("n_k = tl.where(kmask, tl.minimum(CH, R - kk * CH), 1).to(tl.float32)")
    for r in wel:
        assert r.welford is not None
        pair = r.welford[1]
        j = idx[r.name]
        L += [
            f"p_{r.name} = tl.load({_ws(j, 'kk')}, mask=kmask, other=0.0{mod})",
            f"dm_{r.name} = p_{pair} / n_k - s_{pair} / R",
            f"s_{r.name} = tl.sum(tl.where(kmask, p_{r.name} + n_k * dm_{r.name} * dm_{r.name}, 0.0), 0)",
        ]
        env[r.name] = f"s_{r.name}"
    return L, env


def _values(
    plan: RowPlan, targets: list[str], stats: dict[str, str], masked: bool = True, rb: str | None = None
) -> tuple[list[str], dict[str, str]]:
    """Loads at `cols` (masked by `mask`, or a whole chunk) and the ew values for `targets`."""
    loads, env = _loads(plan, "cols", "mask" if masked else None, rb=rb)
    env.update(stats)
    lines = list(loads)
    for d in _needed(plan, targets):
        assert d.expr is not None
        lines.append(f"v_{d.name} = {d.expr(env)}")
        env[d.name] = f"v_{d.name}"
    return lines, env


def _split_pass_body(
    plan: RowPlan, p: int, lv: dict[str, int], idx: dict[str, int], ordered: bool = False
) -> list[str]:
    """Pass `p` of a chunk (`row`, `sid`, [lo, hi)): its reductions' partials into the workspace."""
    reds = [d for d in plan.nodes if d.kind == "red"]
    cur = [d for d in reds if lv[d.name] == p]
    wel = [d for d in cur if d.welford is not None]
    pairs = {d.welford[1] for d in wel if d.welford is not None}
    plain = [d for d in cur if d.welford is None and d.name not in pairs]
    cl, stats = _combine([d for d in reds if lv[d.name] < p], idx, cg=ordered)
    L = list(cl)
    for r in plain:
        L.append(f"acc_{r.name} = tl.full([BLOCK_N], {_IDENT[r.red]}, tl.float32)")
    srcs = [w.welford[0] for w in wel if w.welford is not None]
    if wel:
        # Shift by the mean of the chunk's first tile: sums of (v - c) and (v - c)^2 then do
        # not cancel catastrophically when the values sit far from zero.
        first, env = _values(plan, srcs, stats)
        L += [
            "cols = lo + cols0",
            "mask = cols < hi",
            *first,
            "n0 = tl.minimum(hi - lo, BLOCK_N).to(tl.float32)",
        ]
        for w in wel:
            assert w.welford is not None
            L += [
                f"c_{w.name} = tl.sum(tl.where(mask, {env[w.welford[0]]}, 0.0), 0) / n0",
                f"a1_{w.name} = tl.zeros([BLOCK_N], dtype=tl.float32)",
                f"a2_{w.name} = tl.zeros([BLOCK_N], dtype=tl.float32)",
            ]

    def pass_body(masked: bool) -> list[str]:
        body, env = _values(plan, [r.deps[0] for r in plain] + srcs, stats, masked, rb="rb")
        for r in plain:
            comb = _COMBINE[r.red].format(
                a=f"acc_{r.name}", b=f"tl.where(mask, {env[r.deps[0]]}, {_IDENT[r.red]})"
            )
            body.append(f"acc_{r.name} = {comb}")
        for w in wel:
            assert w.welford is not None
            body += [
                f"d_{w.name} = tl.where(mask, {env[w.welford[0]]} - c_{w.name}, 0.0)",
                f"a1_{w.name} += d_{w.name}",
                f"a2_{w.name} += d_{w.name} * d_{w.name}",
            ]
        return body

    L += _chunks("lo", "hi", pass_body)
    for r in plain:
        L.append(f"tl.store({_ws(idx[r.name], 'sid')}, {_RED_FN[r.red]}(acc_{r.name}, 0))")
    if wel:
        L.append("n_c = (hi - lo).to(tl.float32)")
    for w in wel:
        assert w.welford is not None
        pair = w.welford[1]
        L += [
            f"s1_{w.name} = tl.sum(a1_{w.name}, 0)",
            f"s2_{w.name} = tl.sum(a2_{w.name}, 0)",
            f"tl.store({_ws(idx[pair], 'sid')}, s1_{w.name} + n_c * c_{w.name})",
            f"tl.store({_ws(idx[w.name], 'sid')}, tl.maximum(s2_{w.name} - s1_{w.name} * s1_{w.name} / n_c, 0.0))",
        ]
    return L


def _split_out_body(plan: RowPlan, idx: dict[str, int], ordered: bool = False) -> list[str]:
    """The output pass of a chunk: every reduction's partials combined, the chunk written."""
    cl, stats = _combine([d for d in plan.nodes if d.kind == "red"], idx, cg=ordered)

    def out_body(masked: bool) -> list[str]:
        body, env = _values(plan, [plan.out], stats, masked, rb="rb")
        return [*body, _store(plan, env[plan.out], "row", "mask" if masked else None, rb="rb")]

    return [*cl, *_chunks("lo", "hi", out_body)]


# The ordered split-row kernel (kernelfiles.ticket_head): a row's pass-1 programs, then its
# pass-2 programs, ..., then its output programs, in one launch; pass p > 1 waits on the count of
# pass p - 1 in cnt_ptr[1 + row * PASSES + p - 2]. A chunk's later passes follow its first read
# within about a row's worth of traffic, so with chunks small enough that a row's programs fill
# about one wave, they re-read it from L2, not HBM: the passes cost one HBM read, not one each.
def _pass_count(passes: int, p: int) -> str:
    """The counter of pass `p` (1-based) of `row`."""
    return f"cnt_ptr + 1 + row * {passes} + {p - 1}"


def _split_ordered_kernel(
    plan: RowPlan, sig: str, passes: int, lv: dict[str, int], idx: dict[str, int]
) -> str:
    L = [
        *ticket_head("NPHASE"),
        "ph = k // NSPLIT",
        "base = (row // inner) * R * inner + row % inner",
        "lo = sid * CH",
        "hi = tl.minimum(R, lo + CH)",
        "cols0 = tl.arange(0, BLOCK_N)",
    ]
    for p in range(1, passes + 1):
        body = ticket_wait(_pass_count(passes, p - 1)) if p > 1 else []
        body += _split_pass_body(plan, p, lv, idx, ordered=True)
        body += ticket_count(_pass_count(passes, p))
        L += [f"{'if' if p == 1 else 'elif'} ph == {p - 1}:", *("    " + x for x in body)]
    body = [*ticket_wait(_pass_count(passes, passes)), *_split_out_body(plan, idx, ordered=True)]
    L += ["else:", *("    " + x for x in body)]
    return jit_source("rn_split_ordered_kernel", sig + ", NPHASE: tl.constexpr", L)


def _split_launch(plan: RowPlan, params: dict[str, Any], args: str, kw: str) -> tuple[list[str], list[str]]:
    """(kernel sources, launcher lines) of the split-row algorithm."""
    lv = pass_levels(plan)
    reds = [d for d in plan.nodes if d.kind == "red"]
    idx = {d.name: j for j, d in enumerate(reds)}
    passes = max(lv[d.name] for d in reds)
    parts = [f"l_{lf.name}_ptr" for lf in plan.leaves] + ["out_ptr", "R", "inner"]
    parts += [f"l_{lf.name}_val" for lf in plan.scalars]
    parts += ["ws_ptr", "rows", "CH", "NSPLIT"]
    parts += [f"l_{lf.name}_MODE: tl.constexpr" for lf in plan.leaves]
    parts += ["SPLIT_BLOCK: tl.constexpr", "ALIGN: tl.constexpr", "BLOCK_N: tl.constexpr"]
    block, warps, per_sm = (
        int(params["BLOCK_N"]),
        int(params["num_warps"]),
        int(params.get("PROGS_PER_SM", 8)),
    )
    order_ch = int(params.get("ORDER_CH", 0))
    if order_ch:
        sig = ", ".join([*parts[: parts.index("NSPLIT") + 1], "cnt_ptr", *parts[parts.index("NSPLIT") + 1 :]])
        L = [
            f"    block = max(16, min({block}, triton.next_power_of_2(R)))",
            # chunks of about ORDER_CH elements (whole tiles), at most 4096 a row
            f"    ch = max(triton.cdiv({order_ch}, block), triton.cdiv(R, 4096 * block)) * block",
            "    split = triton.cdiv(R, ch)",
            f"    ws = torch.empty(({len(reds)}, rows, split), device=out.device, dtype=torch.float32)",
            f"    cnt = torch.zeros(1 + rows * {passes}, device=out.device, dtype=torch.int32)",
            f"    rn_split_ordered_kernel[(rows * {passes + 1} * split,)]({args}, ws, rows, ch, split, cnt, "
            f"{kw}SPLIT_BLOCK=triton.next_power_of_2(split), ALIGN=align, BLOCK_N=block, NPHASE={passes + 1}, "
            f"num_warps={warps})",
            "    return out",
        ]
        return [_split_ordered_kernel(plan, sig, passes, lv, idx)], L
    sig = ", ".join(parts)
    kernels = [
        jit_source(f"rn_split_pass{p}_kernel", sig, [*_SPLIT_HEAD, *_split_pass_body(plan, p, lv, idx)])
        for p in range(1, passes + 1)
    ]
    kernels.append(jit_source("rn_split_out_kernel", sig, [*_SPLIT_HEAD, *_split_out_body(plan, idx)]))
    L = [
        "    sms = torch.cuda.get_device_properties(out.device).multi_processor_count if out.is_cuda else 4",
        f"    block = max(16, min({block}, triton.next_power_of_2(R)))",
        # chunks: enough programs for every SM, each chunk a whole number of tiles (ragged tail last)
        f"    split = max(1, min(triton.cdiv(sms * {per_sm}, rows), triton.cdiv(R, block), 4096))",
        "    ch = triton.cdiv(triton.cdiv(R, split), block) * block",
        "    split = triton.cdiv(R, ch)",
        f"    ws = torch.empty(({len(reds)}, rows, split), device=out.device, dtype=torch.float32)",
        "    sb = triton.next_power_of_2(split)",
    ]
    tail = f"ws, rows, ch, split, {kw}SPLIT_BLOCK=sb, ALIGN=align, BLOCK_N=block, num_warps={warps})"
    for p in range(1, passes + 1):
        L.append(f"    rn_split_pass{p}_kernel[(rows, split)]({args}, {tail}")
    L += [f"    rn_split_out_kernel[(rows, split)]({args}, {tail}", "    return out"]
    return kernels, L


def _out_shape(plan: RowPlan) -> str:
    """The launcher's expression of the output shape (from `shape`, `lo`, `hi`)."""
    if plan.out_kind != "row":
        return "shape"
    # one value per row: the reduced dims dropped, or kept as 1 (the node's captured rank says)
    kept = len(plan.out_shape or []) == len(plan.x_leaf.shape or [])
    return "shape[:lo] + (1,) * (hi - lo) + shape[hi:]" if kept else "shape[:lo] + shape[hi:]"


_MODE_HELPER = '''
def _row_mode(t, shape, lo, hi):
    """0 = full, 1 = per-column (varies only over the normalised dims [lo, hi)), 2 = per-row
    (varies only over the others), 3 = scalar."""
    if t.numel() == 1:
        return t.reshape(1), 3
    if tuple(t.shape) == tuple(shape):
        return t.contiguous(), 0
    dims = [1] * (len(shape) - t.dim()) + list(t.shape)
    if len(dims) == len(shape) and all(d in (1, s) for d, s in zip(dims, shape)):
        # A broadcast operand is expanded over the dims it is broadcast along, within its mode:
        # e.g. a per-channel (C, 1, 1, 1) factor of an instance norm over (N, C, D, H, W) rows
        # becomes N * C per-row values (small next to the rows themselves).
        v = t.reshape(dims)
        rest = list(range(lo)) + list(range(hi, len(shape)))
        if all(d == 1 for d in dims[lo:hi]):
            return v.expand([1 if lo <= i < hi else s for i, s in enumerate(shape)]).contiguous(), 2
        if all(dims[i] == 1 for i in rest):
            return v.expand([s if lo <= i < hi else 1 for i, s in enumerate(shape)]).contiguous(), 1
        return v.expand(shape).contiguous(), 0
    raise ValueError(f"operand of shape {tuple(t.shape)} cannot be read row-wise for {tuple(shape)}")
'''


def generate(desc: TaskDescription, view: GraphView, plan: RowPlan, params: dict[str, Any]) -> str:
    algo = params["algorithm"]
    doc = f"EGG expert: rownorm family ({', '.join(sorted(set(plan.ops)))}), algorithm {algo}."
    return emit(desc, plan, params, algo, doc, row_warps=int(params.get("ROW_WARPS", 0)))


def emit(
    desc: TaskDescription, plan: RowPlan, params: dict[str, Any], algo: str, doc: str, row_warps: int = 0
) -> str:
    """The candidate file of `plan` with algorithm `algo` (whole-row, multi-pass or split-row).
    `row_warps` sets the whole-row kernel's warps (0: from the row length)."""
    warps = int(params["num_warps"])
    parts = [f"l_{lf.name}_ptr" for lf in plan.leaves] + ["out_ptr", "R", "inner"]
    parts += [f"l_{lf.name}_val" for lf in plan.scalars]
    parts += [f"l_{lf.name}_MODE: tl.constexpr" for lf in plan.leaves]
    sig = ", ".join(parts)
    kernels = [ewops.HELPERS]
    if algo != SPLIT:
        kernels.append(_multi_pass_kernel(plan, sig))
    if algo == "whole-row":
        kernels.append(_whole_row_kernel(plan, sig))
    tens = [f"l_{lf.name}" for lf in plan.leaves]
    scal = [f"l_{lf.name}" for lf in plan.scalars]
    x = f"l_{plan.x_leaf.name}"
    L = [
        f"def launch_rownorm({', '.join(tens + scal)}):",
        f"    shape = tuple({x}.shape)",
        f"    hi = len(shape) - {plan.n_after}",
        f"    lo = hi - {plan.ndims_reduced}",
        "    R = 1",
        "    for s in shape[lo:hi]:",
        "        R *= s",
        "    inner = 1",
        "    for s in shape[hi:]:",
        "        inner *= s",
        "    rows = 1",
        "    for s in shape[:lo]:",
        "        rows *= s",
        "    rows *= inner",
        # contiguous rows: chunks start at 16-element offsets (_chunks); BLOCK_N >= 16 then
        "    align = 16 if inner == 1 else 1",
        f"    out = torch.empty({_out_shape(plan)}, device={x}.device, dtype={x}.dtype)",
        "    if out.numel() == 0:",
        "        return out",
    ]
    call, consts = [], []
    for t in tens:
        L.append(f"    {t}_c, {t}_mode = _row_mode({t}, shape, lo, hi)")
        call.append(f"{t}_c")
        consts.append(f"l_{t[2:]}_MODE={t}_mode")
    args = ", ".join([*call, "out", "R", "inner", *[f"float({s})" for s in scal]])
    kw = ", ".join(consts)
    kw = kw + ", " if kw else ""
    if algo == "whole-row":
        L += [
            "    block = triton.next_power_of_2(R)",
            f"    if block <= {WHOLE_ROW_MAX}:",
            "        warps = "
            + (str(row_warps) if row_warps else "4 if block <= 1024 else (8 if block <= 4096 else 16)"),
            # rows under 2048 elements share a program: about 2048 elements per tile
            "        nr = max(1, min(128, 2048 // block))",
            f"        rn_whole_row_kernel[(triton.cdiv(rows, nr),)]({args}, {kw}n_rows=rows, ROWS=nr, BLOCK_N=block, "
            "num_warps=warps)",
            "        return out",
        ]
    if algo == SPLIT:
        split_kernels, split_lines = _split_launch(plan, params, args, kw)
        kernels += split_kernels
        L += split_lines
    else:
        block = int(params.get("BLOCK_N", 4096))
        L += [
            f"    rn_multi_pass_kernel[(rows,)]({args}, {kw}ALIGN=align, "
            f"BLOCK_N=max(16, min({block}, triton.next_power_of_2(R))), "
            f"num_warps={warps})",
            "    return out",
        ]
    fwd_args = [lf.expr for lf in plan.leaves + plan.scalars]
    return assemble(
        desc,
        "\n\n".join(kernels),
        _MODE_HELPER + "\n\n" + "\n".join(L) + "\n",
        f"return launch_rownorm({', '.join(fwd_args)})",
        doc,
    )
