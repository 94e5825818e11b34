"""Inclusive scans (cumsum, cumprod) over any dim, reverse scans written as flip-scan-flip,
exclusive cumsum written as cumsum(cat([zeros_like(x[..., :1]), x[..., :-1]], dim)), with an
elementwise prologue over same-shape tensors (masked cumsum: cumsum(x * mask)) and a scalar
epilogue.

The scanned dim is viewed as (outer, R, inner) and walked in tiles [BLOCK_R, BLOCK_I]: each tile
is scanned in registers (tl.cumsum / tl.cumprod along axis 0) and offset by the running carry of
the tiles before it, so any R works in one pass (one read, one write).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from graph.records import TaskDescription

from .. import ewops
from ..chain import Chain, collect_chain
from ..graphview import GraphView, Leaf, Unsupported, arg_value, assemble, is_node
from ..kernelfiles import COLUMN_TILE_HEAD, jit_source

SCAN_OPS = {"cumsum", "cumprod"}


@dataclass
class ScanPlan:
    op: str
    dim: int
    reverse: bool
    prologue: Chain
    epilogue: Chain
    scan_node: str
    src_node: str
    scalars: list[Leaf]
    exclusive: bool = False


def match(view: GraphView) -> ScanPlan | None:
    nodes = view.compute_nodes()
    scans = [n for n in nodes if n.op in SCAN_OPS]
    if len(scans) != 1:
        return None
    s = scans[0]
    rank = len(s.shape or [])
    dim = arg_value(s, 1, "dim")
    if dim is None or is_node(dim) or rank == 0:
        raise Unsupported(f"{s.op} without a constant dim")
    d = int(dim) % rank
    if s.kwargs.get("dtype") is not None:
        raise Unsupported(f"{s.op} with a dtype")
    flips = [n for n in nodes if n.op == "flip"]
    reverse = False
    if flips:

        def fdims(f: Any) -> list[int]:
            ds = f.args[1:] if len(f.args) > 2 else arg_value(f, 1, "dims", [])
            return [int(x) % rank for x in (ds if isinstance(ds, list) else [ds])]

        dims_ok = all(fdims(f) == [d] for f in flips)
        if len(flips) != 2 or not dims_ok:
            raise Unsupported("flip other than a reverse scan (flip, scan, flip over the scan dim)")
        # flip commutes with the elementwise ops around the scan: drop both, scan in reverse.
        alias = dict(view.alias)
        for f in flips:
            alias[f.name] = view.resolve(f.args[0]["node"])
        view = dataclasses.replace(view, alias=alias)
        view.output = view.resolve(view.output)
        nodes = view.compute_nodes()
        reverse = True
    exclusive = False
    first_src = view.refs(s)[0] if view.refs(s) else ""
    if view.nodes.get(first_src) is not None and view.nodes[first_src].op == "cat":
        shifted = _exclusive_shift(view, view.nodes[first_src], d, rank)
        if shifted is None or s.op != "cumsum" or reverse:
            raise Unsupported("cat other than the shift of a forward exclusive cumsum")
        # The shifted copy is never built: the kernel scans x and subtracts each element.
        alias = dict(view.alias)
        alias[first_src] = shifted
        view = dataclasses.replace(view, alias=alias)
        nodes = view.compute_nodes()
        exclusive = True
    i = [n.name for n in nodes].index(s.name)
    pro, epi = nodes[:i], nodes[i + 1 :]
    prologue = collect_chain(view, pro, internal=set())
    srcs = view.refs(s)
    if not pro:
        lf = view.leaves.get(srcs[0])
        if lf is None or lf.is_scalar:
            raise Unsupported(f"{s.op} input is not a tensor argument or parameter")
        prologue.tensor_leaves.append(lf)
    for lf in prologue.tensor_leaves:
        if lf.shape != s.shape:
            raise Unsupported("scan prologue reads tensors of another shape")
    for n in pro + epi:
        if n.shape != s.shape:
            raise Unsupported("scan prologue/epilogue changes the shape")
    epilogue = collect_chain(view, epi, internal={s.name})
    if epilogue.tensor_leaves:
        raise Unsupported("scan epilogue reads other tensors")
    scalars: list[Leaf] = []
    for lf in prologue.scalar_leaves + epilogue.scalar_leaves:
        if lf.name not in [x.name for x in scalars]:
            scalars.append(lf)
    return ScanPlan(
        op=s.op,
        dim=int(dim),
        reverse=reverse,
        prologue=prologue,
        epilogue=epilogue,
        scan_node=s.name,
        src_node=srcs[0],
        scalars=scalars,
        exclusive=exclusive,
    )


def _slices(view: GraphView, n: Any, rank: int) -> tuple[str, list[Any]] | None:
    """(source, per-dim [start, stop, step]) of a getitem made only of slices, else None."""
    if n is None or n.op != "getitem" or len(n.args) != 2 or not is_node(n.args[0]):
        return None
    idx = n.args[1] if isinstance(n.args[1], list) else [n.args[1]]
    if len(idx) > rank or not all(isinstance(x, dict) and set(x) == {"slice"} for x in idx):
        return None
    sl = [x["slice"] for x in idx] + [[None, None, None]] * (rank - len(idx))
    return view.resolve(n.args[0]["node"]), sl


def _exclusive_shift(view: GraphView, cat: Any, d: int, rank: int) -> str | None:
    """x when `cat` is cat([zeros_like(x[..., :1]), x[..., :-1]], dim=d) (slices on dim d only)."""
    parts = cat.args[0] if cat.args else cat.kwargs.get("tensors")
    cdim = arg_value(cat, 1, "dim", 0)
    if not isinstance(parts, list) or len(parts) != 2 or not all(is_node(p) for p in parts):
        return None
    if not isinstance(cdim, int) or cdim % rank != d:
        return None
    z = view.nodes.get(view.resolve(parts[0]["node"]))
    if z is None or z.op != "zeros_like" or z.kwargs or len(z.args) != 1 or not is_node(z.args[0]):
        return None
    head = _slices(view, view.nodes.get(view.resolve(z.args[0]["node"])), rank)
    body = _slices(view, view.nodes.get(view.resolve(parts[1]["node"])), rank)
    if head is None or body is None or head[0] != body[0]:
        return None
    full = [None, None, None]
    for k in range(rank):
        want_h, want_b = ([None, 1, None], [None, -1, None]) if k == d else (full, full)
        if head[1][k] not in (want_h, [0, 1, None]) or body[1][k] not in (want_b, [0, -1, None]):
            return None
    return head[0]


def algorithms(plan: ScanPlan) -> list[str]:
    return ["tiled-carry"]


def defaults(plan: ScanPlan, algorithm: str) -> dict[str, Any]:
    return {"BLOCK_N": 1024, "num_warps": 4}


def space(plan: ScanPlan, params: dict[str, Any], stage: str, sp: dict[str, list]) -> dict[str, list]:
    return {"tiling": {"BLOCK_N": [2048, 512, 4096]}, "memory": {"num_warps": [8, 2]}}.get(stage, {})


def _kernel(plan: ScanPlan, ev: str) -> str:
    tens = "".join(f"l_{lf.name}_ptr, " for lf in plan.prologue.tensor_leaves)
    scal = "".join(f", l_{lf.name}_val" for lf in plan.scalars)
    prod = plan.op == "cumprod"
    ident = "1.0" if prod else "0.0"
    env: dict[str, str] = {}
    loads = []
    for lf in plan.prologue.tensor_leaves:
        loads.append(
            f"x_{lf.name} = tl.load(l_{lf.name}_ptr + offs, mask=mask, other={ident}{ev}).to(tl.float32)"
        )
        env[lf.name] = f"x_{lf.name}"
    for lf in plan.scalars:
        env[lf.name] = f"l_{lf.name}_val"
    body, last = plan.prologue.body(env, var_prefix="p_")
    v = env.get(plan.src_node, last)
    eenv = {plan.scan_node: "cs", **{lf.name: f"l_{lf.name}_val" for lf in plan.scalars}}
    epi, elast = plan.epilogue.body(eenv, var_prefix="e_")
    ridx = "R - 1 - (start + rr)" if plan.reverse else "start + rr"
    scan = "tl.cumprod(v, 0)" if prod else "tl.cumsum(v, 0)"
    comb = "cs * carry[None, :]" if prod else "cs + carry[None, :]"
    if plan.exclusive:
        comb += " - v"  # exclusive: everything before the element (only for cumsum)
    upd = "carry = carry * tl.reduce(v, 0, _scan_mul)" if prod else "carry = carry + tl.sum(v, 0)"
    L = [
        *COLUMN_TILE_HEAD,
        f"carry = tl.full([BLOCK_I], {ident}, tl.float32)",
        "for start in range(0, R, BLOCK_R):",
        f"    r = {ridx}",
        "    mask = ((start + rr) < R)[:, None] & cmask[None, :]",
        "    offs = base + r[:, None] * inner + ci[None, :]",
        *["    " + x for x in loads + body],
        f"    v = tl.where(mask, {v}, {ident})",
        f"    cs = {scan}",
        f"    cs = {comb}",
        *["    " + x for x in epi],
        f"    tl.store(out_ptr + offs, {elast or 'cs'}.to(out_ptr.dtype.element_ty), mask=mask)",
        f"    {upd}",
    ]
    sig = f"{tens}out_ptr, R, inner{scal}, BLOCK_R: tl.constexpr, BLOCK_I: tl.constexpr"
    helper = "@triton.jit\ndef _scan_mul(a, b):\n    return a * b\n\n\n"
    return helper + jit_source("scan_kernel", sig, L)


def generate(desc: TaskDescription, view: GraphView, plan: ScanPlan, params: dict[str, Any]) -> str:
    ev = f', eviction_policy="{params["EVICT"]}"' if params.get("EVICT") else ""
    block = int(params.get("BLOCK_N", 1024))
    warps = int(params["num_warps"])
    leaves = [f"l_{lf.name}" for lf in plan.prologue.tensor_leaves]
    scal = [f"l_{lf.name}" for lf in plan.scalars]
    first = leaves[0]
    scall = "".join(f", float({s})" for s in scal)
    L = [
        f"def launch_scan({', '.join(leaves + scal)}):",
        *[f"    {t} = {t}.contiguous()" for t in leaves],
        f"    shape = list({first}.shape)",
        f"    d = {plan.dim} % len(shape)",
        "    R = shape[d]",
        "    inner = 1",
        "    for s in shape[d + 1:]:",
        "        inner *= s",
        f"    out = torch.empty(shape, device={first}.device, dtype={first}.dtype)",
        "    if out.numel() == 0:",
        "        return out",
        "    outer = out.numel() // (R * inner)",
        # Rows along the last dim: one program per row, long contiguous tiles. Otherwise tiles of
        # columns keep the loads coalesced along the contiguous inner dim.
        "    if inner == 1:",
        f"        block_r, block_i = min({block}, triton.next_power_of_2(R)), 1",
        "    else:",
        "        block_i = min(64, triton.next_power_of_2(inner))",
        "        block_r = max(1, min(64, 2048 // block_i))",
        f"    scan_kernel[(outer * triton.cdiv(inner, block_i),)]({', '.join(leaves)}, out, R, inner{scall}, "
        f"BLOCK_R=block_r, BLOCK_I=block_i, num_warps={warps})",
        "    return out",
    ]
    call = [lf.expr for lf in plan.prologue.tensor_leaves] + [lf.expr for lf in plan.scalars]
    kind = "reverse " if plan.reverse else "exclusive " if plan.exclusive else ""
    doc = f"EGG expert: scan family ({kind}{plan.op}, dim={plan.dim}), algorithm {params['algorithm']}."
    return assemble(
        desc,
        ewops.HELPERS + "\n\n" + _kernel(plan, ev),
        "\n".join(L) + "\n",
        f"return launch_scan({', '.join(call)})",
        doc,
    )
