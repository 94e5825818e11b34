"""A lone convolution or GEMM left to the library (mixed policy only), as one group of a
partitioned graph: the group's forward line is the PyTorch call itself and it has no kernel.

Never a whole-graph family (a candidate needs a Triton kernel of its own, and the checker refuses
a task that is only library ops); the partition planner offers it as an extra algorithm of a
conv/GEMM group when other groups of the same graph run in Triton.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from graph.records import TaskDescription

from ..graphview import GraphView, Unsupported, assemble, is_node
from . import conv as convfam
from .libconv import LIB_OPS, library_call

GEMM_OPS = {"linear", "matmul"}
ALGORITHM = "library"


@dataclass
class LibPlan:
    op: str
    call: str


def match(view: GraphView) -> LibPlan | None:
    nodes = view.compute_nodes()
    if len(nodes) != 1 or nodes[0].op not in LIB_OPS | GEMM_OPS:
        return None
    n = nodes[0]
    if n.op == "matmul" and n.kind != "call_module":
        a = n.args[0] if n.args else n.kwargs.get("input")
        b = n.args[1] if len(n.args) > 1 else n.kwargs.get("other", n.kwargs.get("mat2"))
        if not (is_node(a) and is_node(b)):
            raise Unsupported("matmul with a constant operand")
        call = f"torch.matmul({convfam.operand_expr(view, a)}, {convfam.operand_expr(view, b)})"
    else:
        call = library_call(view, n)
    return LibPlan(op=n.op, call=call)


def algorithms(plan: LibPlan) -> list[str]:
    return [ALGORITHM]


def generate(desc: TaskDescription, view: GraphView, plan: LibPlan, params: dict[str, Any]) -> str:
    return assemble(desc, "", "", f"return {plan.call}", f"library {plan.op} (mixed policy)")
