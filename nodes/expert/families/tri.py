"""torch.tril / torch.triu of a tensor (e.g. the product of triangular matrices): one pass that
keeps the triangle, computed from each element's row and column (kernels/tri.py)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from graph.records import TaskDescription

from ..graphview import GraphView, Unsupported, arg_value, assemble, is_node
from ..kernelfiles import kernel_source

KERNELS = kernel_source("tri.py", "tri_kernel")
LAUNCH = kernel_source("tri.py", "launch_tri")


@dataclass
class TriPlan:
    x: str
    diagonal: int
    upper: bool


def match(view: GraphView) -> TriPlan | None:
    nodes = view.compute_nodes()
    if len(nodes) != 1 or nodes[0].op not in ("tril", "triu"):
        return None
    n = nodes[0]
    src = arg_value(n, 0, "input")
    d = arg_value(n, 1, "diagonal", 0)
    lf = view.leaf_of(src["node"]) if is_node(src) else None
    if lf is None or lf.is_scalar:
        raise Unsupported(f"{n.op} of a computed value inside the group")
    if not isinstance(d, int) or isinstance(d, bool):
        raise Unsupported(f"{n.op} with a computed diagonal")
    return TriPlan(x=lf.expr, diagonal=d, upper=n.op == "triu")


def algorithms(plan: TriPlan) -> list[str]:
    return ["masked-copy"]


def generate(desc: TaskDescription, view: GraphView, plan: TriPlan, params: dict[str, Any]) -> str:
    op = "triu" if plan.upper else "tril"
    doc = f"EGG expert: {op} (diagonal {plan.diagonal}), algorithm masked-copy."
    return assemble(desc, KERNELS, LAUNCH, f"return launch_tri({plan.x}, {plan.diagonal}, {plan.upper})", doc)
