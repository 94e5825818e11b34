"""Row-pair losses over the last dim: cosine similarity (optionally followed by an elementwise
chain of constants, e.g. 1 - cos, and a mean / sum over everything) and the triplet margin loss
(p = 2, reduction none / mean / sum).

One program per row streams the row of every input once, accumulating the dot products / squared
distances it needs in fp32, and writes one value per row; a reduced loss then sums those values in
a fixed order in one small program (deterministic). Margin and eps of a loss module are read from
it at run time.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from graph.records import TaskDescription

from .. import ewops
from ..chain import Chain, collect_chain
from ..graphview import GraphView, Unsupported, arg_value, assemble, flit, is_node
from ..kernelfiles import jit_source, kernel_source

ROW_LOSS_OPS = {"cosine_similarity", "triplet_margin_loss"}


@dataclass
class RlPlan:
    kind: int  # 0 cosine, 1 triplet
    inputs: list[str]  # forward expressions
    eps: str
    margin: str
    node: str
    epilogue: Chain
    reduce: str  # "none" | "mean" | "sum"
    module: str | None  # forward expression of a loss module (run-time checks)


def _inputs(view: GraphView, n: Any, k: int) -> list[str]:
    out = []
    for a in n.args[:k]:
        lf = view.leaf_of(a["node"]) if is_node(a) else None
        if lf is None or lf.is_scalar:
            raise Unsupported(f"{n.op} input is computed (only leaf tensors are read)")
        out.append(lf.expr)
    if len(out) != k:
        raise Unsupported(f"{n.op} with inputs given by keyword")
    return out


def match(view: GraphView) -> RlPlan | None:
    nodes = view.compute_nodes()
    hits = [n for n in nodes if n.op in ROW_LOSS_OPS]
    if len(hits) != 1:
        return None
    n = hits[0]
    if nodes[0].name != n.name:
        raise Unsupported(f"{n.op} of computed inputs")
    rest = nodes[1:]
    reduce = "none"
    module = None
    if n.op == "cosine_similarity":
        xs = _inputs(view, n, 2)
        rank = len(view.nodes[view.resolve(n.args[0]["node"])].shape or [])
        dim = arg_value(n, 2, "dim", 1)
        if not isinstance(dim, int) or rank == 0 or dim % rank != rank - 1:
            raise Unsupported("cosine_similarity over a dim other than the last")
        eps = flit(arg_value(n, 3, "eps", 1e-8))
        kind, margin = 0, "0.0"
        if rest and rest[-1].op in ("mean", "sum") and rest[-1].shape == []:
            last = rest[-1]
            if len(last.args) > 1 or set(last.kwargs) - {"dtype"} or last.kwargs.get("dtype") is not None:
                raise Unsupported(f"{last.op} over some dims of a row loss")
            reduce, rest = last.op, rest[:-1]
        epilogue = collect_chain(view, rest, internal={n.name})
        if epilogue.tensor_leaves or epilogue.scalar_leaves:
            raise Unsupported("row-loss epilogue reads other tensors or arguments")
    else:
        xs = _inputs(view, n, 3)
        if rest:
            raise Unsupported("triplet_margin_loss followed by other ops")
        if n.kind == "call_module":
            module = f"self.{n.target}"
            p = n.module_attrs.get("p", 2.0)
            reduce = n.module_attrs.get("reduction", "mean")
            eps, margin = f"float({module}.eps)", f"float({module}.margin)"
        else:
            p = arg_value(n, 4, "p", 2.0)
            reduce = arg_value(n, 7, "reduction", "mean")
            if arg_value(n, 6, "swap", False):
                raise Unsupported("triplet_margin_loss with swap=True")
            eps, margin = flit(arg_value(n, 5, "eps", 1e-6)), flit(arg_value(n, 3, "margin", 1.0))
        if p not in (2, 2.0):
            raise Unsupported(f"triplet_margin_loss with p={p}")
        if reduce not in ("none", "mean", "sum"):
            raise Unsupported(f"triplet_margin_loss reduction {reduce!r}")
        kind = 1
        epilogue = Chain(nodes=[], tensor_leaves=[], scalar_leaves=[])
    return RlPlan(kind, xs, eps, margin, n.name, epilogue, reduce, module)


def algorithms(plan: RlPlan) -> list[str]:
    return ["row-stream+ordered-sum"]


def defaults(plan: RlPlan, algorithm: str) -> dict[str, Any]:
    return {"BLOCK_N": 1024, "num_warps": 4}


def space(plan: RlPlan, params: dict[str, Any], stage: str, sp: dict[str, list]) -> dict[str, list]:
    return {"tiling": {"BLOCK_N": [2048, 512]}, "memory": {"num_warps": [8, 2]}}.get(stage, {})


def _kernel(plan: RlPlan) -> str:
    epi, last = plan.epilogue.body({plan.node: "v"}, var_prefix="e_")
    L = [
        "row = tl.program_id(0).to(tl.int64)",
        "base = row * D",
        "cols0 = tl.arange(0, BLOCK_N)",
        "s1 = tl.zeros([BLOCK_N], dtype=tl.float32)",
        "s2 = tl.zeros([BLOCK_N], dtype=tl.float32)",
        "s3 = tl.zeros([BLOCK_N], dtype=tl.float32)",
        "for start in range(0, D, BLOCK_N):",
        "    cols = start + cols0",
        "    mask = cols < D",
        "    a = tl.load(a_ptr + base + cols, mask=mask, other=0.0).to(tl.float32)",
        "    b = tl.load(b_ptr + base + cols, mask=mask, other=0.0).to(tl.float32)",
        "    if KIND == 0:",
        "        s1 += a * b",
        "        s2 += a * a",
        "        s3 += b * b",
        "    else:",
        "        c = tl.load(c_ptr + base + cols, mask=mask, other=0.0).to(tl.float32)",
        # pairwise_distance adds eps to the difference before the norm
        "        d1 = tl.where(mask, a - b + eps, 0.0)",
        "        d2 = tl.where(mask, a - c + eps, 0.0)",
        "        s1 += d1 * d1",
        "        s2 += d2 * d2",
        "if KIND == 0:",
        # each norm is clamped to eps separately, as torch.cosine_similarity does
        "    na = tl.maximum(tl.sqrt(tl.sum(s2, 0)), eps)",
        "    nb = tl.maximum(tl.sqrt(tl.sum(s3, 0)), eps)",
        "    v = tl.sum(s1, 0) / (na * nb)",
        "else:",
        "    v = tl.maximum(margin + tl.sqrt(tl.sum(s1, 0)) - tl.sqrt(tl.sum(s2, 0)), 0.0)",
        *epi,
        f"tl.store(out_ptr + row, {last or 'v'})",
    ]
    sig = "a_ptr, b_ptr, c_ptr, out_ptr, D, eps, margin, KIND: tl.constexpr, BLOCK_N: tl.constexpr"
    return jit_source("rl_row_kernel", sig, L)


SUM_KERNEL = kernel_source("rowloss.py", "rl_sum_kernel")

LAUNCH = """
def launch_row_loss(xs, kind, eps, margin, reduce, block_n, warps):
    xs = [x.contiguous() for x in xs]
    for x in xs[1:]:
        if x.shape != xs[0].shape:
            raise ValueError("row-loss inputs of different shapes (broadcast) are not handled")
    a = xs[0]
    D = a.shape[-1]
    rows = a.numel() // D if D else 0
    vals = torch.empty(a.shape[:-1], device=a.device, dtype=torch.float32)
    if rows:
        c = xs[2] if kind == 1 else xs[1]
        rl_row_kernel[(rows,)](a, xs[1], c, vals, D, eps, margin, KIND=kind,
                               BLOCK_N=min(block_n, triton.next_power_of_2(max(D, 1))), num_warps=warps)
    if reduce == "none":
        return vals.to(a.dtype)
    out = torch.empty((), device=a.device, dtype=torch.float32)
    scale = 1.0 / rows if reduce == "mean" and rows else (float("nan") if reduce == "mean" else 1.0)
    rl_sum_kernel[(1,)](vals, out, rows, scale, BLOCK=1024, num_warps=4)
    return out.to(a.dtype)
"""


def generate(desc: TaskDescription, view: GraphView, plan: RlPlan, params: dict[str, Any]) -> str:
    fwd = []
    if plan.module is not None:
        # What the capture could not see: refuse instead of computing another loss.
        fwd += [
            f"if getattr({plan.module}, 'swap', False) or float({plan.module}.p) != 2.0:",
            "    raise ValueError('triplet_margin_loss with swap or p != 2 is not what this kernel computes')",
        ]
    fwd.append(
        f"return launch_row_loss([{', '.join(plan.inputs)}], {plan.kind}, {plan.eps}, {plan.margin}, "
        f"{plan.reduce!r}, {int(params['BLOCK_N'])}, {int(params['num_warps'])})"
    )
    doc = f"EGG expert: rowloss family, algorithm {params['algorithm']}."
    return assemble(
        desc, ewops.HELPERS + "\n\n" + _kernel(plan) + "\n\n" + SUM_KERNEL, LAUNCH, "\n".join(fwd), doc
    )
