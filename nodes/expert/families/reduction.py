"""Reductions over any contiguous set of dims (sum, mean, max, min, amax, amin, prod, argmax,
argmin, logsumexp; keepdim; dim=None) with an elementwise prologue over same-shape tensors (so
losses such as mean((a - b) ** 2), mse/l1/smooth-l1/huber reduce in one pass) and a scalar
epilogue.

The reduced dims are viewed as (outer, R, inner):
  inner == 1: row kernel; each row may be split into chunks (two stages) when there are too few
              rows to fill the GPU — algorithm "split-row" (sum/mean/max/min/prod only)
  inner  > 1: column-tiled kernel, tiles [BLOCK_R, BLOCK_I] with coalesced loads along inner
Algorithms (seeds): "split-row" (chunked when rows are few, else one pass), "one-pass" (one
program per row, no second stage), "multi-row" (short rows, R <= MULTI_ROW_MAX: ROW_TILE elements
of [BLOCK_M rows, BLOCK_N columns] per program, reduced along the columns; one program per row of
64 values loaded 256 bytes with 256 threads and reached 13% of the bandwidth roof, H100 suite
rd07, 2026-12-06).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from graph.records import TaskDescription

from .. import ewops
from ..chain import Chain, collect_chain
from ..graphview import GraphView, Leaf, Unsupported, arg_value, assemble, flit, is_node
from ..kernelfiles import COLUMN_TILE_HEAD, jit_source, kernel_source
from ..spaces import distinct_launches, next_pow2

RED_OPS = {"sum", "mean", "max", "min", "amax", "amin", "prod", "argmax", "argmin", "logsumexp"}
LOSS_OPS = {"mse_loss", "l1_loss", "smooth_l1_loss", "huber_loss", "kl_div"}
SPLITTABLE = {"sum", "mean", "batchmean", "max", "min", "amax", "amin", "prod"}

# identity, vector combine, final tl reduction
_COMB = {
    "sum": ("0.0", "{a} + {b}", "tl.sum({a}, {ax})"),
    "prod": ("1.0", "{a} * {b}", "tl.reduce({a}, {ax}, _red_mul)"),
    "max": ("-float('inf')", "tl.maximum({a}, {b})", "tl.max({a}, {ax})"),
    "min": ("float('inf')", "tl.minimum({a}, {b})", "tl.min({a}, {ax})"),
}

HELPERS = kernel_source("reduce.py", "_red_mul")


@dataclass
class RedPlan:
    op: str  # canonical: sum | mean | max | min | prod | argmax | argmin | logsumexp
    dims: list[int] | None  # None = all dims
    keepdim: bool
    src_node: str  # the value reduced (a leaf or prologue node name)
    prologue: Chain
    epilogue: Chain
    red_node: str
    first: Leaf  # a tensor leaf with the reduced input's shape (sizes the launch)
    rank: int
    outer: int
    rlen: int
    inner: int
    loss_expr: str | None = None  # for *_loss ops: expression over two env names "{a}", "{b}"
    loss_args: tuple[str, str] | None = None


def _kind(op: str) -> str:
    return {"amax": "max", "amin": "min"}.get(op, op)


def _dims(n, rank: int) -> list[int] | None:
    d = arg_value(n, 1, "dim", None) if n.op not in LOSS_OPS else None
    if d is None:
        return None
    if is_node(d):
        raise Unsupported(f"{n.op} with a tensor dim")
    ds = sorted({int(x) % rank for x in (d if isinstance(d, list) else [d])})
    if ds != list(range(ds[0], ds[-1] + 1)):
        raise Unsupported(f"{n.op} over non-adjacent dims {ds}")
    return ds


def _prod(xs: list[int]) -> int:
    p = 1
    for x in xs:
        p *= x
    return p


def match(view: GraphView) -> RedPlan | None:
    nodes = view.compute_nodes()
    reds = [n for n in nodes if n.op in RED_OPS | LOSS_OPS]
    # torch.max(x, dim) gives (values, indices): a getitem picks one
    getitems = [n for n in nodes if n.op in ("getitem", "getattr")]
    if len(reds) != 1:
        return None
    r = reds[0]
    i = nodes.index(r)
    pro = nodes[:i]
    epi = [n for n in nodes[i + 1 :] if n not in getitems]
    op = _kind(r.op)
    tuple_out = r.op in ("max", "min") and arg_value(r, 1, "dim") is not None
    red_name = r.name
    if tuple_out:
        if len(getitems) != 1 or view.refs(getitems[0]) != [r.name]:
            raise Unsupported(f"{r.op}(dim=...) result used as a tuple")
        g = getitems[0]
        idx = g.args[1] if len(g.args) > 1 else None
        if idx in (1, "indices"):
            op = "argmax" if op == "max" else "argmin"
        elif idx not in (0, "values"):
            raise Unsupported(f"{r.op} tuple element {idx!r}")
        red_name = g.name
    elif getitems:
        return None
    srcs = view.refs(r)
    src_shape = view.nodes[srcs[0]].shape if srcs else None
    if not src_shape:
        raise Unsupported(f"{r.op} of a scalar")
    rank = len(src_shape)
    prologue = collect_chain(view, pro, internal=set())
    for n in pro:
        if n.shape != src_shape:
            raise Unsupported("reduction prologue broadcasts")
    produced = {n.name for n in pro}
    for s in srcs:
        if s in produced:
            continue
        lf = view.leaves.get(s)
        if lf is None or lf.is_scalar:
            raise Unsupported(f"{r.op} input is not a tensor argument or parameter")
        if lf.name not in [x.name for x in prologue.tensor_leaves]:
            prologue.tensor_leaves.append(lf)
    for lf in prologue.tensor_leaves:
        if lf.shape != src_shape:
            raise Unsupported("reduction prologue reads tensors of another shape")
    internal = {r.name, red_name}
    epilogue = collect_chain(view, epi, internal=internal)
    if epilogue.tensor_leaves:
        raise Unsupported("reduction epilogue reads other tensors")
    dims = _dims(r, rank)
    keepdim = bool(arg_value(r, 2, "keepdim", False)) if r.op not in LOSS_OPS else False
    lo, hi = (dims[0], dims[-1]) if dims else (0, rank - 1)
    plan = RedPlan(
        op=op if r.op not in LOSS_OPS else "mean",
        dims=dims,
        keepdim=keepdim,
        src_node=srcs[0],
        prologue=prologue,
        epilogue=epilogue,
        red_node=red_name,
        first=prologue.tensor_leaves[0],
        rank=rank,
        outer=_prod(src_shape[:lo]),
        rlen=_prod(src_shape[lo : hi + 1]),
        inner=_prod(src_shape[hi + 1 :]),
    )
    if r.op in LOSS_OPS:
        if len(srcs) != 2:
            raise Unsupported(f"{r.op} needs two tensor inputs")
        red = r.kwargs.get("reduction", r.module_attrs.get("reduction", "mean"))
        if red not in ("mean", "sum") and r.op != "kl_div":
            raise Unsupported(f"{r.op}(reduction={red!r})")
        plan.op = red
        plan.loss_args = (srcs[0], srcs[1])
        if r.op == "kl_div":
            if r.kwargs.get("log_target", r.module_attrs.get("log_target", False)):
                raise Unsupported("kl_div with log_target=True")
            red = r.kwargs.get("reduction", r.module_attrs.get("reduction", "mean"))
            if red not in ("mean", "sum", "batchmean"):
                raise Unsupported(f"kl_div(reduction={red!r})")
            plan.op = red
            # torch's own formula, xlogy(target, target) - target * input: 0 * log(0) is 0, but a
            # negative or NaN target gives NaN, and so does target 0 against input -inf (log of a
            # zero probability), as in the reference (the check's NaN-parity trials hold it to that)
            plan.loss_expr = "tl.where({b} == 0.0, 0.0, {b} * tl.log({b})) - {b} * {a}"
        elif r.op == "mse_loss":
            plan.loss_expr = "({a} - {b}) * ({a} - {b})"
        elif r.op == "l1_loss":
            plan.loss_expr = "tl.abs({a} - {b})"
        else:
            key = "beta" if r.op == "smooth_l1_loss" else "delta"
            beta = flit(r.kwargs.get(key, r.module_attrs.get(key, 1.0)))
            if r.op == "smooth_l1_loss":
                plan.loss_expr = (
                    f"tl.where(tl.abs({{a}} - {{b}}) < {beta}, 0.5 * ({{a}} - {{b}}) * ({{a}} - {{b}}) / {beta}, "
                    f"tl.abs({{a}} - {{b}}) - 0.5 * {beta})"
                )
            else:
                plan.loss_expr = (
                    f"tl.where(tl.abs({{a}} - {{b}}) < {beta}, 0.5 * ({{a}} - {{b}}) * ({{a}} - {{b}}), "
                    f"{beta} * (tl.abs({{a}} - {{b}}) - 0.5 * {beta}))"
                )
    return plan


SMS = 132  # an H200's SMs: shapes are sized against it (the launchers read the real count)


# Rows up to this long are offered the multi-row kernel (a whole row in one [BLOCK_M, BLOCK_N]
# tile); longer rows fill a program on their own.
MULTI_ROW_MAX = 1024


def _multi_row(plan: RedPlan) -> bool:
    """Whether the multi-row kernel covers this reduction: rows (inner == 1) of at most
    MULTI_ROW_MAX values, enough of them to fill more than one tile, and an op it reduces."""
    kind = "sum" if plan.op in ("mean", "batchmean") else plan.op
    return (
        plan.inner == 1
        and plan.rlen <= MULTI_ROW_MAX
        and plan.outer > 1
        and (kind in _COMB or kind in ("argmax", "argmin"))
    )


def algorithms(plan: RedPlan) -> list[str]:
    if _multi_row(plan):
        # many short rows: a tile of rows per program first; one row per program stays a seed
        return ["multi-row", "one-pass"]
    if plan.inner > 1:
        if plan.op not in SPLITTABLE:
            return ["columns"]
        # One program per 128 columns: few column blocks over long columns (a sum over dim 0 of
        # an 8192 x 8192 matrix is 64 programs) leave most SMs idle unless R is split too.
        few = plan.outer * -(-plan.inner // 128) < 2 * SMS and plan.rlen >= 1024
        return ["split-columns", "columns"] if few else ["columns", "split-columns"]
    if plan.op in SPLITTABLE:
        # Few long rows (e.g. a loss to a scalar) need the split to use more than a few SMs.
        return ["split-row", "one-pass"] if plan.outer < 1024 else ["one-pass", "split-row"]
    return ["one-pass"]


def defaults(plan: RedPlan, algorithm: str) -> dict[str, Any]:
    out = {"BLOCK_N": 2048 if plan.inner == 1 else 1024, "num_warps": 8, "ROWS": 1}
    if algorithm.startswith("split-"):
        out["PROGS_PER_SM"] = 4  # the split aims at 4 programs per SM
    if algorithm == "multi-row":
        out.update(ROW_TILE=4096, num_warps=4)  # elements per program: 16 KiB of fp32
    if plan.inner > 1:
        # a middle dim: the column kernels' tile (BLOCK_I columns, a cap) and warps
        out.update(BLOCK_I=128, num_warps=4)
    return out


def valid(plan: RedPlan, params: dict[str, Any]) -> str | None:
    if params.get("ROWS", 1) != 1:
        return "ROWS is not used by reductions"
    bi = params.get("BLOCK_I", 128)
    if not isinstance(bi, int) or bi < 16 or bi & (bi - 1):
        return "BLOCK_I must be a power of two >= 16"
    return None


def space(plan: RedPlan, params: dict[str, Any], stage: str, sp: dict[str, list]) -> dict[str, list]:
    sp = dict(sp)
    sp.pop("ROWS", None)
    if params["algorithm"].startswith("split-") and stage == "mapping":
        sp["PROGS_PER_SM"] = [8, 2, 16]
    if params["algorithm"] == "multi-row":
        sp.pop("BLOCK_N", None)  # a whole row per tile: BLOCK_N is the row's power of two
        if stage == "mapping":
            sp["ROW_TILE"] = [2048, 8192, 16384]
    if plan.inner == 1 and "BLOCK_N" in sp and plan.rlen > 0:
        # the row kernels take min(BLOCK_N, the row's power of two): only blocks that give
        # another one than the current (a 2048-long row made 4096 and 8192 the same kernel)
        row = next_pow2(plan.rlen)
        sp["BLOCK_N"] = distinct_launches(
            sp["BLOCK_N"], int(params.get("BLOCK_N", 2048)), lambda b: min(b, row)
        )
    if plan.inner > 1:
        # the column kernels run: their tile and warps (the row kernel's BLOCK_N and warps,
        # swept before, timed the same column launch three times over per task)
        sp.pop("BLOCK_N", None)
        if stage == "tiling":
            sp["BLOCK_I"] = [64, 256, 32]
        if stage == "memory":
            sp["num_warps"] = [8, 2]
    return sp


# ---------------------------------------------------------------------------------------------


def _leaf_sig(plan: RedPlan) -> tuple[str, str]:
    tens = "".join(f"l_{lf.name}_ptr, " for lf in plan.prologue.tensor_leaves)
    scal = "".join(f", l_{lf.name}_val" for lf in _scalars(plan))
    return tens, scal


def _scalars(plan: RedPlan) -> list[Leaf]:
    out: list[Leaf] = []
    for lf in plan.prologue.scalar_leaves + plan.epilogue.scalar_leaves:
        if lf.name not in [x.name for x in out]:
            out.append(lf)
    return out


def _value_lines(plan: RedPlan, offs: str, mask: str) -> tuple[list[str], str]:
    """Loads of every prologue leaf at `offs`, then the prologue; returns the reduced value."""
    lines: list[str] = []
    env: dict[str, str] = {}
    for lf in plan.prologue.tensor_leaves:
        lines.append(
            f"x_{lf.name} = tl.load(l_{lf.name}_ptr + {offs}, mask={mask}, other=0.0).to(tl.float32)"
        )
        env[lf.name] = f"x_{lf.name}"
    for lf in _scalars(plan):
        env[lf.name] = f"l_{lf.name}_val"
    body, last = plan.prologue.body(env, var_prefix="p_")
    lines += body
    if plan.loss_expr is not None and plan.loss_args is not None:
        a, b = (env[x] for x in plan.loss_args)
        lines.append(f"v = {plan.loss_expr.format(a=a, b=b)}")
        return lines, "v"
    return lines, env.get(plan.src_node, last or "")


def _epi(plan: RedPlan, var: str) -> tuple[list[str], str]:
    env = {plan.red_node: var}
    for lf in _scalars(plan):
        env[lf.name] = f"l_{lf.name}_val"
    lines, last = plan.epilogue.body(env, var_prefix="e_")
    return lines, last or var


def _final_value(plan: RedPlan, r: str, count: str) -> str:
    # `div` is a kernel argument: R for mean, the batch size for kl_div's batchmean
    return f"{r} / div" if plan.op in ("mean", "batchmean") else r


def _row_kernel(plan: RedPlan) -> str:
    tens, scal = _leaf_sig(plan)
    op = plan.op
    L = [
        "row = tl.program_id(0).to(tl.int64)",
        "c = tl.program_id(1)",
        "cols = tl.arange(0, BLOCK_N)",
        "lo = c * chunk",
        "hi = tl.minimum(R, lo + chunk)",
        "base = row * R",
    ]
    vals, v = _value_lines(plan, "base + offs", "mask")
    loop_head = ["for start in range(lo, hi, BLOCK_N):", "    offs = start + cols", "    mask = offs < hi"]
    if op in ("argmax", "argmin"):
        better = ">" if op == "argmax" else "<"
        ident = "-float('inf')" if op == "argmax" else "float('inf')"
        L += [
            f"best = tl.full([BLOCK_N], {ident}, tl.float32)",
            "besti = tl.zeros([BLOCK_N], dtype=tl.int64)",
            *loop_head,
            *["    " + x for x in vals],
            f"    v = tl.where(mask, {v}, {ident})",
            # strict comparison keeps the first index per lane (rows are walked in order)
            f"    take = v {better} best",
            "    besti = tl.where(take, offs.to(tl.int64), besti)",
            "    best = tl.where(take, v, best)",
            f"m = {'tl.max' if op == 'argmax' else 'tl.min'}(best, 0)",
            "r = tl.min(tl.where(best == m, besti, R), 0)",
            "tl.store(out_ptr + row, r)",
        ]
    elif op == "logsumexp":
        L += [
            "m = tl.full([], -float('inf'), tl.float32)",
            "s = tl.zeros([], dtype=tl.float32)",
            *loop_head,
            *["    " + x for x in vals],
            f"    v = tl.where(mask, {v}, -float('inf'))",
            "    m_new = tl.maximum(m, tl.max(v, 0))",
            "    s = s * tl.exp(m - m_new) + tl.sum(tl.exp(v - m_new), 0)",
            "    m = m_new",
        ]
        epi, last = _epi(plan, "r")
        L += ["r = m + tl.log(s)", *epi, f"tl.store(out_ptr + row, {last}.to(out_ptr.dtype.element_ty))"]
    else:
        kind = "sum" if op in ("mean", "batchmean") else op
        ident, comb, red = _COMB[kind]
        L += [
            f"acc = tl.full([BLOCK_N], {ident}, tl.float32)",
            *loop_head,
            *["    " + x for x in vals],
            f"    v = tl.where(mask, {v}, {ident})",
            "    acc = " + comb.format(a="acc", b="v"),
            "r = " + red.format(a="acc", ax=0),
        ]
        epi, last = _epi(plan, "rf")
        L += [
            "if FINAL:",
            f"    rf = {_final_value(plan, 'r', 'R')}",
            *["    " + x for x in epi],
            f"    tl.store(out_ptr + row, {last}.to(out_ptr.dtype.element_ty))",
            "else:",
            "    tl.store(part_ptr + row * n_chunks + c, r)",
        ]
    sig = (
        f"{tens}out_ptr, part_ptr, R, chunk, n_chunks, div{scal}, BLOCK_N: tl.constexpr, FINAL: tl.constexpr"
    )
    return jit_source("red_row_kernel", sig, L)


def _rows_kernel(plan: RedPlan) -> str:
    """The multi-row kernel: BLOCK_M whole rows (BLOCK_N >= R) per program, reduced along axis 1
    of the tile; the prologue and epilogue are elementwise, so they apply to tiles as to rows."""
    tens, scal = _leaf_sig(plan)
    op = plan.op
    L = [
        "rows = tl.program_id(0).to(tl.int64) * BLOCK_M + tl.arange(0, BLOCK_M).to(tl.int64)",
        "cols = tl.arange(0, BLOCK_N)",
        "rmask = rows < n_rows",
        "mask = rmask[:, None] & (cols[None, :] < R)",
        "offs = rows[:, None] * R + cols[None, :]",
    ]
    vals, v = _value_lines(plan, "offs", "mask")
    L += vals
    if op in ("argmax", "argmin"):
        ident = "-float('inf')" if op == "argmax" else "float('inf')"
        L += [
            f"v = tl.where(mask, {v}, {ident})",
            f"m = {'tl.max' if op == 'argmax' else 'tl.min'}(v, 1)",
            # the first index holding the extreme value, as torch returns
            "idx = cols[None, :].to(tl.int64) + tl.zeros([BLOCK_M, BLOCK_N], tl.int64)",
            "r = tl.min(tl.where(v == m[:, None], idx, R), 1)",
            "tl.store(out_ptr + rows, r, mask=rmask)",
        ]
    else:
        kind = "sum" if op in ("mean", "batchmean") else op
        L += [
            f"v = tl.where(mask, {v}, {_COMB[kind][0]})",
            *_reduce_and_store(plan, kind, "v", 1, "rows", "rmask"),
        ]
    sig = f"{tens}out_ptr, n_rows, R, div{scal}, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr"
    return jit_source("red_rows_kernel", sig, L)


def _reduce_and_store(
    plan: RedPlan, kind: str, src: str, ax: int, at: str, mask: str | None = None
) -> list[str]:
    """Kernel lines: `src` reduced along `ax`, the final value (mean's division), the epilogue,
    stored at out_ptr + `at`."""
    epi, last = _epi(plan, "rf")
    masked = f", mask={mask}" if mask else ""
    return [
        "r = " + _COMB[kind][2].format(a=src, ax=ax),
        f"rf = {_final_value(plan, 'r', 'R')}",
        *epi,
        f"tl.store(out_ptr + {at}, {last}.to(out_ptr.dtype.element_ty){masked})",
    ]


def _final_kernel(plan: RedPlan) -> str:
    """Second stage of split-row: combine each row's chunk partials, then the epilogue."""
    kind = "sum" if plan.op in ("mean", "batchmean") else plan.op
    if kind not in _COMB:
        return ""
    _, scal = _leaf_sig(plan)
    L = [
        "row = tl.program_id(0).to(tl.int64)",
        "offs = tl.arange(0, BLOCK_C)",
        "mask = offs < n_chunks",
        f"p = tl.load(part_ptr + row * n_chunks + offs, mask=mask, other={_COMB[kind][0]})",
        *_reduce_and_store(plan, kind, "p", 0, "row"),
    ]
    sig = f"part_ptr, out_ptr, R, n_chunks, div{scal}, BLOCK_C: tl.constexpr"
    return jit_source("red_final_kernel", sig, L)


def _col_kernel(plan: RedPlan) -> str:
    tens, scal = _leaf_sig(plan)
    op = plan.op
    L = [
        *COLUMN_TILE_HEAD,
        # this program's run of the reduced dim (all of it unless the columns are split)
        "c = tl.program_id(1)",
        "r_lo = c * chunk",
        "r_hi = tl.minimum(R, r_lo + chunk)",
    ]
    vals, v = _value_lines(plan, "base + r[:, None] * inner + ci[None, :]", "mask")
    head = [
        "for start in range(r_lo, r_hi, BLOCK_R):",
        "    r = start + rr",
        "    mask = (r < r_hi)[:, None] & cmask[None, :]",
    ]
    store_idx = "o * inner + ci"
    if op in ("argmax", "argmin"):
        better = ">" if op == "argmax" else "<"
        ident = "-float('inf')" if op == "argmax" else "float('inf')"
        L += [
            f"best = tl.full([BLOCK_R, BLOCK_I], {ident}, tl.float32)",
            "besti = tl.zeros([BLOCK_R, BLOCK_I], dtype=tl.int64)",
            *head,
            *["    " + x for x in vals],
            f"    v = tl.where(mask, {v}, {ident})",
            f"    take = v {better} best",
            "    besti = tl.where(take, r[:, None].to(tl.int64) + tl.zeros([BLOCK_R, BLOCK_I], tl.int64), besti)",
            "    best = tl.where(take, v, best)",
            f"m = {'tl.max' if op == 'argmax' else 'tl.min'}(best, 0)",
            "res = tl.min(tl.where(best == m[None, :], besti, R), 0)",
            f"tl.store(out_ptr + {store_idx}, res, mask=cmask)",
        ]
    elif op == "logsumexp":
        L += [
            "m = tl.full([BLOCK_I], -float('inf'), tl.float32)",
            "s = tl.zeros([BLOCK_I], dtype=tl.float32)",
            *head,
            *["    " + x for x in vals],
            # columns past `inner` hold 0 so their running max stays finite
            f"    v = tl.where(mask, {v}, -float('inf'))",
            "    v = tl.where(cmask[None, :], v, 0.0)",
            "    m_new = tl.maximum(m, tl.max(v, 0))",
            "    s = s * tl.exp(m - m_new) + tl.sum(tl.exp(v - m_new[None, :]), 0)",
            "    m = m_new",
        ]
        epi, last = _epi(plan, "res")
        L += [
            "res = m + tl.log(s)",
            *epi,
            f"tl.store(out_ptr + {store_idx}, {last}.to(out_ptr.dtype.element_ty), mask=cmask)",
        ]
    else:
        kind = "sum" if op in ("mean", "batchmean") else op
        ident, comb, red = _COMB[kind]
        epi, last = _epi(plan, "rf")
        L += [
            f"acc = tl.full([BLOCK_R, BLOCK_I], {ident}, tl.float32)",
            *head,
            *["    " + x for x in vals],
            f"    v = tl.where(mask, {v}, {ident})",
            "    acc = " + comb.format(a="acc", b="v"),
            "res = " + red.format(a="acc", ax=0),
            "if FINAL:",
            f"    rf = {_final_value(plan, 'res', 'R')}",
            *["    " + x for x in epi],
            f"    tl.store(out_ptr + {store_idx}, {last}.to(out_ptr.dtype.element_ty), mask=cmask)",
            "else:",
            f"    tl.store(part_ptr + c * n_out + {store_idx}, res, mask=cmask)",
        ]
    sig = (
        f"{tens}out_ptr, part_ptr, R, inner, chunk, n_out, div{scal}, BLOCK_R: tl.constexpr, "
        "BLOCK_I: tl.constexpr, FINAL: tl.constexpr"
    )
    return jit_source("red_col_kernel", sig, L)


def _col_final_kernel(plan: RedPlan) -> str:
    """Second stage of split-columns: combine each output's chunk partials, then the epilogue."""
    kind = "sum" if plan.op in ("mean", "batchmean") else plan.op
    if kind not in _COMB:
        return ""
    ident, comb, _ = _COMB[kind]
    _, scal = _leaf_sig(plan)
    epi, last = _epi(plan, "rf")
    L = [
        "offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)",
        "mask = offs < n_out",
        f"acc = tl.full([BLOCK], {ident}, tl.float32)",
        "for c in range(0, n_chunks):",
        f"    p = tl.load(part_ptr + c * n_out + offs, mask=mask, other={ident})",
        "    acc = " + comb.format(a="acc", b="p"),
        f"rf = {_final_value(plan, 'acc', 'R')}",
        *epi,
        f"tl.store(out_ptr + offs, {last}.to(out_ptr.dtype.element_ty), mask=mask)",
    ]
    sig = f"part_ptr, out_ptr, n_chunks, n_out, div{scal}, BLOCK: tl.constexpr"
    return jit_source("red_col_final_kernel", sig, L)


def generate(desc: TaskDescription, view: GraphView, plan: RedPlan, params: dict[str, Any]) -> str:
    algo = params["algorithm"]
    block = int(params.get("BLOCK_N", 2048))
    warps = int(params["num_warps"])
    # the column kernels' warps: tuned where the reduced dim is a middle one, else 4
    col_warps = warps if plan.inner > 1 else 4
    leaves = [f"l_{lf.name}" for lf in plan.prologue.tensor_leaves]
    leaves0 = leaves[0]
    split = plan.op in SPLITTABLE
    kernels = [ewops.HELPERS, HELPERS, _row_kernel(plan), _col_kernel(plan)]
    if algo == "multi-row":
        kernels.append(_rows_kernel(plan))
    for fin in (_final_kernel(plan), _col_final_kernel(plan)):
        if fin:
            kernels.append(fin)
    per_sm = int(params.get("PROGS_PER_SM", 4))
    sms = f"torch.cuda.get_device_properties({leaves0}.device).multi_processor_count if {leaves0}.is_cuda else 4"
    scal = [f"l_{lf.name}" for lf in _scalars(plan)]
    first = leaves[0]
    out_dtype = "torch.int64" if plan.op in ("argmax", "argmin") else f"{first}.dtype"
    dims = "None" if plan.dims is None else repr(plan.dims)
    scall = "".join(f", float({s})" for s in scal)
    L = [
        f"def launch_reduce({', '.join(leaves + scal)}):",
        *[f"    {t} = {t}.contiguous()" for t in leaves],
        *[
            f"    if {t}.shape != {first}.shape:\n        raise ValueError('prologue operands differ in shape')"
            for t in leaves[1:]
        ],
        f"    shape = list({first}.shape)",
        f"    dims = {dims}",
        "    if dims is None:",
        "        dims = list(range(len(shape)))",
        "    dims = sorted(d % len(shape) for d in dims)",
        "    lo, hi = dims[0], dims[-1]",
        "    outer = 1",
        "    for s in shape[:lo]:",
        "        outer *= s",
        "    R = 1",
        "    for s in shape[lo:hi + 1]:",
        "        R *= s",
        "    inner = 1",
        "    for s in shape[hi + 1:]:",
        "        inner *= s",
        f"    if {plan.keepdim!r}:",
        "        out_shape = [1 if i in dims else s for i, s in enumerate(shape)]",
        "    else:",
        "        out_shape = [s for i, s in enumerate(shape) if i not in dims]",
        f"    out = torch.empty(out_shape, device={first}.device, dtype={out_dtype})",
        "    div = float(shape[0])" if plan.op == "batchmean" else "    div = float(R)",
        "    if R == 0 or out.numel() == 0:",
        "        raise ValueError('empty reduction')",
        "    if inner > 1:",
        f"        block_i = min({int(params.get('BLOCK_I', 128))}, triton.next_power_of_2(inner))",
        "        block_r = max(1, min(64, 4096 // block_i))",
        "        cols = outer * triton.cdiv(inner, block_i)",
        (
            # split the reduced dim too until the SMs are busy, each run at least 8 tiles long
            f"        n_chunks = max(1, min(triton.cdiv(({sms}) * {per_sm}, cols), triton.cdiv(R, 8 * block_r), 4096))"
            if algo == "split-columns" and plan.op in SPLITTABLE
            else "        n_chunks = 1"
        ),
        "        chunk = triton.cdiv(triton.cdiv(R, n_chunks), block_r) * block_r",
        "        n_chunks = triton.cdiv(R, chunk)",
        "        n_out = outer * inner",
        "        if n_chunks == 1:",
        f"            red_col_kernel[(cols, 1)]({', '.join(leaves)}, out, out, R, inner, chunk, n_out, div{scall}, "
        f"BLOCK_R=block_r, BLOCK_I=block_i, FINAL=True, num_warps={col_warps})",
        "            return out",
    ]
    if split:  # (an op that does not split never has more than one chunk: no second kernel)
        L += [
            f"        part = torch.empty((n_chunks, n_out), device={first}.device, dtype=torch.float32)",
            f"        red_col_kernel[(cols, n_chunks)]({', '.join(leaves)}, out, part, R, inner, chunk, n_out, "
            f"div{scall}, BLOCK_R=block_r, BLOCK_I=block_i, FINAL=False, num_warps={col_warps})",
            f"        red_col_final_kernel[(triton.cdiv(n_out, 1024),)](part, out, n_chunks, n_out, div{scall}, "
            "BLOCK=1024, num_warps=4)",
            "        return out",
        ]
    if algo == "multi-row":
        tile = int(params.get("ROW_TILE", 4096))
        L += [
            # whole rows per tile (shapes other than the described one may have longer rows:
            # those take the one-pass kernel below)
            f"    if R <= {MULTI_ROW_MAX}:",
            "        block_n = triton.next_power_of_2(R)",
            f"        block_m = max(1, {tile} // block_n)",
            f"        red_rows_kernel[(triton.cdiv(outer, block_m),)]({', '.join(leaves)}, out, outer, R, div{scall}, "
            f"BLOCK_M=block_m, BLOCK_N=block_n, num_warps={warps})",
            "        return out",
        ]
    L += [f"    block = min({block}, triton.next_power_of_2(R))"]
    if algo == "split-row" and plan.op in SPLITTABLE:
        L += [
            # PROGS_PER_SM programs per SM, each chunk at least 4 blocks long.
            f"    n_chunks = max(1, min(triton.cdiv(R, 4 * block), triton.cdiv(({sms}) * {per_sm}, outer)))",
        ]
    else:
        L += ["    n_chunks = 1"]
    L += [
        "    chunk = triton.cdiv(triton.cdiv(R, n_chunks), block) * block",
        "    n_chunks = triton.cdiv(R, chunk)",
        "    if n_chunks == 1:",
        f"        red_row_kernel[(outer, 1)]({', '.join(leaves)}, out, out, R, chunk, 1, div{scall}, "
        f"BLOCK_N=block, FINAL=True, num_warps={warps})",
        "        return out",
    ]
    if split:
        L += [
            f"    part = torch.empty((outer, n_chunks), device={first}.device, dtype=torch.float32)",
            f"    red_row_kernel[(outer, n_chunks)]({', '.join(leaves)}, out, part, R, chunk, n_chunks, div{scall}, "
            f"BLOCK_N=block, FINAL=False, num_warps={warps})",
            f"    red_final_kernel[(outer,)](part, out, R, n_chunks, div{scall}, "
            "BLOCK_C=triton.next_power_of_2(n_chunks), num_warps=4)",
        ]
    L += ["    return out"]
    call = [lf.expr for lf in plan.prologue.tensor_leaves] + [lf.expr for lf in _scalars(plan)]
    doc = f"EGG expert: reduction family ({plan.op}, dims={plan.dims}), algorithm {algo}."
    return assemble(
        desc, "\n\n".join(kernels), "\n".join(L) + "\n", f"return launch_reduce({', '.join(call)})", doc
    )
