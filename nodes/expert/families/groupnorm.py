"""GroupNorm (module or F.group_norm), optionally followed by an elementwise epilogue of constants.

For a contiguous (N, C, *spatial) input, group g of sample n is one contiguous row of
R = (C / G) * prod(spatial) elements, so one program per (n, g) streams its row three times:
mean, then the sum of squared deviations around it (exact two-pass variance, no cancellation),
then the normalised, per-channel affine and epilogue write. The channel of row element r is
g * (C / G) + r // HW, which indexes the weight and bias.

The group count and eps of a module are read from it at run time (not baked from the capture).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from graph.records import TaskDescription

from .. import ewops
from ..chain import Chain, collect_chain
from ..graphview import GraphView, Unsupported, arg_value, assemble, flit, is_node


@dataclass
class GnPlan:
    x_expr: str
    groups: str  # forward expression
    eps: str  # forward expression
    weight: str | None
    bias: str | None
    node: str
    epilogue: Chain


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
    return GnPlan(x_expr, groups, eps, weight, bias, n.name, epilogue)


def algorithms(plan: GnPlan) -> list[str]:
    return ["group-rows-two-pass"]


def defaults(plan: GnPlan, algorithm: str) -> dict[str, Any]:
    return {"BLOCK_N": 2048, "num_warps": 8}


def space(plan: GnPlan, params: dict[str, Any], stage: str, sp: dict[str, list]) -> dict[str, list]:
    return {"tiling": {"BLOCK_N": [4096, 1024]}, "memory": {"num_warps": [4, 16]}}.get(stage, {})


def _kernel(plan: GnPlan) -> str:
    epi, last = plan.epilogue.body({plan.node: "y"}, var_prefix="e_")
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
        "for start in range(0, R, BLOCK_N):",
        "    cols = start + cols0",
        "    mask = cols < R",
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
    sig = "x_ptr, w_ptr, b_ptr, out_ptr, G, CPG, HW, eps, HAS_W: tl.constexpr, BLOCK_N: tl.constexpr"
    return "@triton.jit\ndef gn_kernel(" + sig + "):\n" + "\n".join("    " + x for x in L) + "\n"


LAUNCH = """
def launch_group_norm(x, groups, eps, w, b, block_n, warps):
    x = x.contiguous()
    N, C = x.shape[0], x.shape[1]
    if C % groups:
        raise ValueError(f"{C} channels do not split into {groups} groups")
    HW = x.numel() // (N * C) if N * C else 0
    out = torch.empty_like(x)
    if out.numel() == 0:
        return out
    has_w = w is not None
    if has_w:
        w, b = w.contiguous(), b.contiguous()
    else:
        w, b = x, x  # never read (HAS_W=False)
    R = (C // groups) * HW
    gn_kernel[(N * groups,)](x, w, b, out, groups, C // groups, HW, eps, HAS_W=has_w,
                             BLOCK_N=min(block_n, triton.next_power_of_2(R)), num_warps=warps)
    return out
"""


def generate(desc: TaskDescription, view: GraphView, plan: GnPlan, params: dict[str, Any]) -> str:
    w = plan.weight or "None"
    b = plan.bias or "None"
    call = (
        f"return launch_group_norm({plan.x_expr}, {plan.groups}, {plan.eps}, {w}, {b}, "
        f"{int(params['BLOCK_N'])}, {int(params['num_warps'])})"
    )
    doc = f"EGG expert: groupnorm family, algorithm {params['algorithm']}."
    return assemble(desc, ewops.HELPERS + "\n\n" + _kernel(plan), LAUNCH, call, doc)
