"""Concatenation (torch.cat, torch.stack): one copy kernel launch per input into its slice of
the output (kernels/cat.py). In a partitioned network this is the join of parallel branches
(Inception, DenseNet, Fire modules)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from graph.records import TaskDescription

from ..graphview import GraphView, Unsupported, arg_value, assemble, is_node
from ..kernelfiles import kernel_source

KERNELS = kernel_source("cat.py", "cat_copy_kernel")
# cat_buffer: for producers that write their ranges of the output themselves (assemble.cat_in_place)
LAUNCH = (
    kernel_source("layout.py", "_memory_order") + "\n\n" + kernel_source("cat.py", "launch_cat", "cat_buffer")
)


@dataclass
class CatPlan:
    inputs: list[str]  # forward expressions
    dim: int
    stack: bool


def match(view: GraphView) -> CatPlan | None:
    nodes = view.compute_nodes()
    if len(nodes) != 1 or nodes[0].op not in ("cat", "concat", "concatenate", "stack"):
        return None
    n = nodes[0]
    xs = arg_value(n, 0, "tensors")
    dim = arg_value(n, 1, "dim", 0)
    if not isinstance(xs, list) or not xs or not all(is_node(x) for x in xs):
        raise Unsupported(f"{n.op} of a computed list")
    if not isinstance(dim, int):
        raise Unsupported(f"{n.op} along a computed dim")
    exprs = []
    for x in xs:
        lf = view.leaf_of(x["node"])
        if lf is None or lf.is_scalar:
            raise Unsupported(f"{n.op} input is computed inside the group")
        exprs.append(lf.expr)
    return CatPlan(inputs=exprs, dim=dim, stack=n.op == "stack")


def algorithms(plan: CatPlan) -> list[str]:
    return ["copy"]


def generate(desc: TaskDescription, view: GraphView, plan: CatPlan, params: dict[str, Any]) -> str:
    if plan.stack:
        xs = ", ".join(f"{x}.unsqueeze({plan.dim})" for x in plan.inputs)
    else:
        xs = ", ".join(plan.inputs)
    doc = f"EGG expert: cat family ({'stack' if plan.stack else 'cat'} along dim {plan.dim}), algorithm copy."
    return assemble(desc, KERNELS, LAUNCH, f"return launch_cat([{xs}], {plan.dim})", doc)
