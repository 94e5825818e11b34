"""GroupNorm (module or F.group_norm), optionally followed by an elementwise epilogue of constants.

For a contiguous (N, C, *spatial) input, group g of sample n is one contiguous row of
R = (C / G) * prod(spatial) elements, so one program per (n, g) streams its row three times:
mean, then the sum of squared deviations around it (exact two-pass variance, no cancellation),
then the normalised, per-channel affine and epilogue write. The channel of row element r is
g * (C / G) + r // HW, which indexes the weight and bias.

The group count and eps of a module are read from it at run time (not baked from the capture).

Algorithms:
  group-split-rows    each row split into chunks over enough programs to fill the GPU: a
                      statistics pass (per chunk, sums of x - s and of (x - s)^2 around the row's
                      first element s, so long rows do not cancel), then one pass that folds the
                      row's chunk sums into mean and 1 / std and writes its chunk normalised:
                      the input is read twice and the output written once (first for rows longer
                      than SPLIT_MIN_R, which no longer stay in cache between the passes);
                      with ORDER_CH (memory stage) both passes are one ticket-ordered launch, a
                      row's apply chunks right after its statistics chunks (the re-read from L2)
  group-rows-two-pass one program per row: mean, then squared deviations around it, then the
                      write (three reads: exact variance, best for short rows that stay cached)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from graph.records import TaskDescription

from .. import ewops
from ..chain import Chain, collect_chain
from ..graphview import GraphView, Unsupported, arg_value, assemble, flit, is_node
from ..kernelfiles import jit_source, ticket_count, ticket_head, ticket_wait


@dataclass
class GnPlan:
    x_expr: str
    groups: str  # forward expression
    eps: str  # forward expression
    weight: str | None
    bias: str | None
    node: str
    epilogue: Chain
    shape: list[int] | None = None  # the norm's captured shape (seed order only)
    n_groups: int | None = None  # the captured group count (seed order only)


def _leaf_expr(view: GraphView, a: Any, what: str) -> str:
    lf = view.leaf_of(a["node"]) if is_node(a) else None
    if lf is None or lf.is_scalar:
        raise Unsupported(f"group_norm {what} is not a tensor argument or parameter")
    return lf.expr


def match(view: GraphView) -> GnPlan | None:
    nodes = view.compute_nodes()
    gns = [n for n in nodes if n.op == "group_norm"]
    if len(gns) != 1:
        return None
    n = gns[0]
    if nodes[0].name != n.name:
        raise Unsupported("group_norm input is computed (only an elementwise epilogue is fused)")
    x_expr = _leaf_expr(view, n.args[0] if n.args else n.kwargs.get("input"), "input")
    if len(n.shape or []) < 2:
        raise Unsupported("group_norm of a tensor with fewer than 2 dims")
    if n.kind == "call_module":
        m = f"self.{n.target}"
        affine = bool(n.module_attrs.get("affine", True))
        groups, eps = f"int({m}.num_groups)", f"float({m}.eps)"
        weight, bias = (f"{m}.weight", f"{m}.bias") if affine else (None, None)
    else:
        g = arg_value(n, 1, "num_groups")
        if not isinstance(g, int):
            raise Unsupported("group_norm with a non-constant group count")
        groups, eps = str(g), flit(arg_value(n, 4, "eps", 1e-5))
        w, b = arg_value(n, 2, "weight"), arg_value(n, 3, "bias")
        weight = _leaf_expr(view, w, "weight") if w is not None else None
        bias = _leaf_expr(view, b, "bias") if b is not None else None
        if (weight is None) != (bias is None):
            raise Unsupported("group_norm with only one of weight / bias")
    epilogue = collect_chain(view, nodes[1:], internal={n.name})
    if epilogue.tensor_leaves or epilogue.scalar_leaves:
        raise Unsupported("group_norm epilogue reads other tensors or arguments")
    if any(e.shape != n.shape for e in nodes[1:]):
        raise Unsupported("group_norm epilogue changes the shape")
    n_groups = n.module_attrs.get("num_groups") if n.kind == "call_module" else arg_value(n, 1, "num_groups")
    return GnPlan(
        x_expr,
        groups,
        eps,
        weight,
        bias,
        n.name,
        epilogue,
        shape=[int(d) for d in n.shape or []],
        n_groups=n_groups if isinstance(n_groups, int) else None,
    )


TWO_PASS = "group-rows-two-pass"
SPLIT = "group-split-rows"
# Rows longer than this (elements) go to the split algorithm first: a 64 KB fp32 row read three
# times by one program no longer comes back from cache when hundreds of rows are in flight.
SPLIT_MIN_R = 16384
# Chunk partials per row at most (the apply pass folds them in one tile).
MAX_SPLIT = 1024


def row_length(plan: GnPlan) -> int | None:
    """Elements per (sample, group) row at the captured shape, where the group count is known."""
    shape = list(plan.shape or [])
    if len(shape) < 2 or plan.n_groups is None or plan.n_groups <= 0:
        return None
    n = 1
    for d in shape[1:]:
        n *= int(d)
    return n // plan.n_groups


def algorithms(plan: GnPlan) -> list[str]:
    r = row_length(plan)
    if r is not None and r >= SPLIT_MIN_R:
        return [SPLIT, TWO_PASS]
    return [TWO_PASS, SPLIT]


def defaults(plan: GnPlan, algorithm: str) -> dict[str, Any]:
    if algorithm == SPLIT:
        # 8 programs per SM keep enough 16-byte loads in flight for the bandwidth roof
        return {"BLOCK_N": 4096, "num_warps": 8, "PROGS_PER_SM": 8, "ORDER_CH": 0}
    return {"BLOCK_N": 2048, "num_warps": 8}


def space(plan: GnPlan, params: dict[str, Any], stage: str, sp: dict[str, list]) -> dict[str, list]:
    if params.get("algorithm") == SPLIT:
        return {
            "mapping": {"PROGS_PER_SM": [4, 16, 2]},
            "tiling": {"BLOCK_N": [2048, 8192, 1024]},
            # the ordered one-launch variant (ORDER_CH) is not offered: KernelBench level1/35 on
            # an H100 (2026-12-08) screened it at 9.05 ms against 7.54 for two launches (and see
            # rownorm.space)
            "memory": {"num_warps": [4, 16]},
        }.get(stage, {})
    return {"tiling": {"BLOCK_N": [4096, 1024]}, "memory": {"num_warps": [4, 16]}}.get(stage, {})


def _write_loop(lo: str, hi: str, plan: GnPlan) -> list[str]:
    """Kernel lines writing row elements [lo, hi) normalised (mean, rstd), with the per-channel
    affine and the epilogue: the last pass of both algorithms."""
    epi, last = plan.epilogue.body({plan.node: "y"}, var_prefix="e_")
    return [
        f"for start in range({lo}, {hi}, BLOCK_N):",
        "    cols = start + cols0",
        f"    mask = cols < {hi}",
        "    x = tl.load(x_ptr + base + cols, mask=mask, other=0.0).to(tl.float32)",
        "    y = (x - mean) * rstd",
        "    if HAS_W:",
        "        ch = g * CPG + cols // HW",
        "        w = tl.load(w_ptr + ch, mask=mask, other=1.0).to(tl.float32)",
        "        b = tl.load(b_ptr + ch, mask=mask, other=0.0).to(tl.float32)",
        "        y = y * w + b",
        *["    " + x for x in epi],
        f"    tl.store(out_ptr + base + cols, {last or 'y'}.to(out_ptr.dtype.element_ty), mask=mask)",
    ]


def _kernel(plan: GnPlan) -> str:
    L = [
        "row = tl.program_id(0).to(tl.int64)",
        "g = row % G",
        "R = CPG * HW",
        "base = row * R",
        "cols0 = tl.arange(0, BLOCK_N)",
        "acc = tl.zeros([BLOCK_N], dtype=tl.float32)",
        "for start in range(0, R, BLOCK_N):",
        "    cols = start + cols0",
        "    mask = cols < R",
        "    acc += tl.load(x_ptr + base + cols, mask=mask, other=0.0).to(tl.float32)",
        "mean = tl.sum(acc, 0) / R",
        "acc2 = tl.zeros([BLOCK_N], dtype=tl.float32)",
        "for start in range(0, R, BLOCK_N):",
        "    cols = start + cols0",
        "    mask = cols < R",
        "    d = tl.load(x_ptr + base + cols, mask=mask, other=0.0).to(tl.float32) - mean",
        "    acc2 += tl.where(mask, d * d, 0.0)",
        "rstd = 1.0 / tl.sqrt(tl.sum(acc2, 0) / R + eps)",
        *_write_loop("0", "R", plan),
    ]
    sig = "x_ptr, w_ptr, b_ptr, out_ptr, G, CPG, HW, eps, HAS_W: tl.constexpr, BLOCK_N: tl.constexpr"
    return jit_source("gn_kernel", sig, L)


PREP = """
def gn_prepare(x, groups, w, b):
    x = x.contiguous()
    N, C = x.shape[0], x.shape[1]
    if C % groups:
        raise ValueError(f"{C} channels do not split into {groups} groups")
    HW = x.numel() // (N * C) if N * C else 0
    has_w = w is not None
    if has_w:
        w, b = w.contiguous(), b.contiguous()
    else:
        w, b = x, x  # never read (HAS_W=False)
    return x, torch.empty_like(x), w, b, has_w, N, C, HW
"""

LAUNCH = (
    PREP
    + """
def launch_group_norm(x, groups, eps, w, b, block_n, warps):
    x, out, w, b, has_w, N, C, HW = gn_prepare(x, groups, w, b)
    if out.numel() == 0:
        return out
    R = (C // groups) * HW
    gn_kernel[(N * groups,)](x, w, b, out, groups, C // groups, HW, eps, HAS_W=has_w,
                             BLOCK_N=min(block_n, triton.next_power_of_2(R)), num_warps=warps)
    return out
"""
)


_SPLIT_ROW = [
    "base = row * R",
    "lo = sid * CH",
    "hi = tl.minimum(R, lo + CH)",
    "cols0 = tl.arange(0, BLOCK_N)",
    # the row's first element: sums around it do not cancel on long rows of large values
    "shift = tl.load(x_ptr + base).to(tl.float32)",
]
_STATS = [
    "a1 = tl.zeros([BLOCK_N], dtype=tl.float32)",
    "a2 = tl.zeros([BLOCK_N], dtype=tl.float32)",
    "for start in range(lo, hi, BLOCK_N):",
    "    cols = start + cols0",
    "    mask = cols < hi",
    "    d = tl.where(mask, tl.load(x_ptr + base + cols, mask=mask, other=0.0).to(tl.float32) - shift, 0.0)",
    "    a1 += d",
    "    a2 += d * d",
    "tl.store(ws_ptr + row * NSPLIT + sid, tl.sum(a1, 0))",
    "tl.store(ws_ptr + (ROWS + row) * NSPLIT + sid, tl.sum(a2, 0))",
]


def _apply(plan: GnPlan, cg: bool) -> list[str]:
    """Fold the row's chunk sums into mean and 1 / std, write the chunk. `cg`: partials of the
    same launch, read past L1."""
    mod = ", cache_modifier='.cg'" if cg else ""
    return [
        "g = row % G",
        "kk = tl.arange(0, SPLIT_BLOCK)",
        "kmask = kk < NSPLIT",
        f"s1 = tl.sum(tl.load(ws_ptr + row * NSPLIT + kk, mask=kmask, other=0.0{mod}), 0) / R",
        f"s2 = tl.sum(tl.load(ws_ptr + (ROWS + row) * NSPLIT + kk, mask=kmask, other=0.0{mod}), 0) / R",
        "mean = shift + s1",
        "rstd = 1.0 / tl.sqrt(tl.maximum(s2 - s1 * s1, 0.0) + eps)",
        *_write_loop("lo", "hi", plan),
    ]


_ASIG = (
    "x_ptr, w_ptr, b_ptr, out_ptr, ws_ptr, G, CPG, HW, R, ROWS, CH, NSPLIT, eps, "
    "HAS_W: tl.constexpr, SPLIT_BLOCK: tl.constexpr, BLOCK_N: tl.constexpr"
)


def _split_kernels(plan: GnPlan) -> str:
    head = ["row = tl.program_id(0).to(tl.int64)", "sid = tl.program_id(1)", *_SPLIT_ROW]
    ssig = "x_ptr, ws_ptr, R, ROWS, CH, NSPLIT, BLOCK_N: tl.constexpr"
    return (
        jit_source("gn_stats_kernel", ssig, [*head, *_STATS])
        + "\n\n"
        + jit_source("gn_apply_kernel", _ASIG, [*head, *_apply(plan, cg=False)])
    )


def _ordered_kernel(plan: GnPlan) -> str:
    """Both passes in one ticket-ordered launch (kernelfiles.ticket_head): a row's statistics
    chunks, then its apply chunks, which wait on the row's count and re-read their chunk from L2."""
    L = [*ticket_head(2), *_SPLIT_ROW, "if k < NSPLIT:"]
    L += ["    " + x for x in [*_STATS, *ticket_count("cnt_ptr + 1 + row")]]
    L += ["else:", *("    " + x for x in [*ticket_wait("cnt_ptr + 1 + row"), *_apply(plan, cg=True)])]
    return jit_source("gn_ordered_kernel", _ASIG.replace("ws_ptr, ", "ws_ptr, cnt_ptr, "), L)


_ROWS = (
    PREP
    + """
def gn_rows(x, groups, w, b, block_n):
    x, out, w, b, has_w, N, C, HW = gn_prepare(x, groups, w, b)
    rows, R = N * groups, (C // groups) * HW
    return x, out, w, b, has_w, C // groups, HW, rows, R, min(block_n, triton.next_power_of_2(max(R, 1)))
"""
)

SPLIT_LAUNCH = (
    _ROWS
    + f"""
def launch_group_norm_split(x, groups, eps, w, b, block_n, warps, per_sm):
    x, out, w, b, has_w, cpg, HW, rows, R, block = gn_rows(x, groups, w, b, block_n)
    if out.numel() == 0:
        return out
    # chunks per row: enough programs for per_sm per SM, each chunk whole tiles
    want = max(1, min({MAX_SPLIT}, triton.cdiv(per_sm * _sm_count(x), rows), triton.cdiv(R, block)))
    ch = triton.cdiv(triton.cdiv(R, want), block) * block
    split = triton.cdiv(R, ch)
    ws = torch.empty((2, rows, split), device=x.device, dtype=torch.float32)
    grid = (rows, split)
    gn_stats_kernel[grid](x, ws, R, rows, ch, split, BLOCK_N=block, num_warps=warps)
    gn_apply_kernel[grid](x, w, b, out, ws, groups, cpg, HW, R, rows, ch, split, eps, HAS_W=has_w,
                          SPLIT_BLOCK=triton.next_power_of_2(split), BLOCK_N=block, num_warps=warps)
    return out


def _sm_count(x):
    if x.is_cuda:
        return torch.cuda.get_device_properties(x.device).multi_processor_count
    return 132
"""
)

ORDERED_LAUNCH = (
    _ROWS
    + f"""
def launch_group_norm_ordered(x, groups, eps, w, b, block_n, warps, order_ch):
    x, out, w, b, has_w, cpg, HW, rows, R, block = gn_rows(x, groups, w, b, block_n)
    if out.numel() == 0:
        return out
    # chunks of about order_ch elements (whole tiles), at most {MAX_SPLIT} a row
    ch = max(triton.cdiv(order_ch, block), triton.cdiv(R, {MAX_SPLIT} * block)) * block
    split = triton.cdiv(R, ch)
    ws = torch.empty((2, rows, split), device=x.device, dtype=torch.float32)
    cnt = torch.zeros(1 + rows, device=x.device, dtype=torch.int32)
    gn_ordered_kernel[(rows * 2 * split,)](x, w, b, out, ws, cnt, groups, cpg, HW, R, rows, ch, split, eps,
                                           HAS_W=has_w, SPLIT_BLOCK=triton.next_power_of_2(split),
                                           BLOCK_N=block, num_warps=warps)
    return out
"""
)


def generate(desc: TaskDescription, view: GraphView, plan: GnPlan, params: dict[str, Any]) -> str:
    w = plan.weight or "None"
    b = plan.bias or "None"
    if params["algorithm"] == SPLIT and params.get("ORDER_CH"):
        call = (
            f"return launch_group_norm_ordered({plan.x_expr}, {plan.groups}, {plan.eps}, {w}, {b}, "
            f"{int(params['BLOCK_N'])}, {int(params['num_warps'])}, {int(params['ORDER_CH'])})"
        )
        doc = f"EGG expert: groupnorm family, algorithm {SPLIT}, ticket-ordered (one launch)."
        return assemble(desc, ewops.HELPERS + "\n\n" + _ordered_kernel(plan), ORDERED_LAUNCH, call, doc)
    if params["algorithm"] == SPLIT:
        call = (
            f"return launch_group_norm_split({plan.x_expr}, {plan.groups}, {plan.eps}, {w}, {b}, "
            f"{int(params['BLOCK_N'])}, {int(params['num_warps'])}, {int(params['PROGS_PER_SM'])})"
        )
        doc = f"EGG expert: groupnorm family, algorithm {SPLIT}."
        return assemble(desc, ewops.HELPERS + "\n\n" + _split_kernels(plan), SPLIT_LAUNCH, call, doc)
    call = (
        f"return launch_group_norm({plan.x_expr}, {plan.groups}, {plan.eps}, {w}, {b}, "
        f"{int(params['BLOCK_N'])}, {int(params['num_warps'])})"
    )
    doc = f"EGG expert: groupnorm family, algorithm {params['algorithm']}."
    return assemble(desc, ewops.HELPERS + "\n\n" + _kernel(plan), LAUNCH, call, doc)
