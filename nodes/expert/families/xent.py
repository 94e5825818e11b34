"""Cross-entropy over class logits (N, C) with integer targets (N,), reduction mean or sum
(F.cross_entropy / nn.CrossEntropyLoss without weights, label smoothing or ignored indices).

Per row: loss = logsumexp(x_row) - x_row[target], streamed with a running max / rescaled sum
(any C); each program writes its row's loss, and one more program adds them up in a fixed order
(deterministic, no atomics).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from graph.records import TaskDescription

from ..graphview import GraphView, Unsupported, arg_value, assemble, is_node
from ..kernelfiles import kernel_source


@dataclass
class XentPlan:
    logits: str
    target: str
    reduction: str


def match(view: GraphView) -> XentPlan | None:
    nodes = view.compute_nodes()
    if len(nodes) != 1 or nodes[0].op != "cross_entropy":
        return None
    n = nodes[0]
    if n.kind == "call_module":
        attrs = n.module_attrs
        red = attrs.get("reduction", "mean")
        if attrs.get("label_smoothing", 0.0) not in (0, 0.0):
            raise Unsupported("cross_entropy with label smoothing")
    else:
        red = n.kwargs.get("reduction", "mean")
        for k in ("weight", "label_smoothing"):
            v = n.kwargs.get(k)
            if v not in (None, 0, 0.0):
                raise Unsupported(f"cross_entropy with {k}")
        if n.kwargs.get("ignore_index", -100) != -100:
            raise Unsupported("cross_entropy with a custom ignore_index")
    if red not in ("mean", "sum"):
        raise Unsupported(f"cross_entropy(reduction={red!r})")
    a, t = n.args[0], (n.args[1] if len(n.args) > 1 else arg_value(n, 1, "target"))
    if not (is_node(a) and is_node(t)):
        raise Unsupported("cross_entropy operands")
    la, lt = view.leaves.get(view.resolve(a["node"])), view.leaves.get(view.resolve(t["node"]))
    if la is None or lt is None or la.shape is None or len(la.shape) != 2:
        raise Unsupported("cross_entropy over other than (N, C) logits")
    return XentPlan(la.expr, lt.expr, red)


def algorithms(plan: XentPlan) -> list[str]:
    return ["row-online+ordered-sum"]


def defaults(plan: XentPlan, algorithm: str) -> dict[str, Any]:
    return {"BLOCK_N": 1024, "num_warps": 4}


def space(plan: XentPlan, params: dict[str, Any], stage: str, sp: dict[str, list]) -> dict[str, list]:
    return {"tiling": {"BLOCK_N": [4096, 256]}, "memory": {"num_warps": [8, 2]}}.get(stage, {})


KERNELS = kernel_source("xent.py", "xent_row_kernel", "xent_sum_kernel")


def generate(desc: TaskDescription, view: GraphView, plan: XentPlan, params: dict[str, Any]) -> str:
    block = int(params["BLOCK_N"])
    warps = int(params["num_warps"])
    scale = "1.0 / N" if plan.reduction == "mean" else "1.0"
    launcher = f"""
def launch_xent(x, t):
    if x.dim() != 2 or t.dim() != 1 or t.shape[0] != x.shape[0]:
        raise ValueError(f"cross_entropy expects (N, C) logits and (N,) targets, got {{tuple(x.shape)}}, {{tuple(t.shape)}}")
    x = x.contiguous()
    t = t.contiguous()
    N, C = x.shape
    out = torch.empty((), device=x.device, dtype=x.dtype)
    loss = torch.empty((N,), device=x.device, dtype=torch.float32)
    xent_row_kernel[(N,)](x, t, loss, C, x.stride(0), BLOCK_N=min({block}, triton.next_power_of_2(C)),
                          num_warps={warps})
    xent_sum_kernel[(1,)](loss, out, N, {scale}, BLOCK=1024, num_warps=4)
    return out
"""
    doc = f"EGG expert: cross-entropy family (reduction {plan.reduction}), algorithm row-online+ordered-sum."
    return assemble(desc, KERNELS, launcher, f"return launch_xent({plan.logits}, {plan.target})", doc)
