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
from ..kernelfiles import kernel_source
from . import conv as convfam
from .libconv import CL_HELPERS, LIB_OPS, library_call, split_call

GEMM_OPS = {"linear", "matmul"}
ALGORITHM = "library"
# A 2-d/3-d conv in channels-last: the input turned around by Triton, cuDNN without the bias (it
# adds a bias in a pass of its own), then the bias added on the way back to a contiguous output,
# so the groups after it read the layout they expect. Three passes instead of one, each at full
# bandwidth; cuDNN's channels-last TF32 conv is so much faster that it pays on large outputs
# (KernelBench level2/17's conv: NCHW 2.72 ms, channels-last 1.62 ms of which the bias pass
# about 0.5 ms; H200, docs/results).
CL_ALGORITHM = "library-channels-last"
ALGORITHMS = (ALGORITHM, CL_ALGORITHM)
# Output elements from which the channels-last call is the first choice: below it the two extra
# launches weigh more than the bytes they save (small feature maps of the networks).
CL_FIRST_NUMEL = 1 << 22


@dataclass
class LibPlan:
    op: str
    call: str
    # (the conv call without its bias on a channels-last input, the bias or None)
    split_cl: tuple[str, str | None] | None = None
    out_numel: int = 0


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
    split = split_call(view, n, "to_channels_last") if n.op in LIB_OPS and int(n.op[-2]) > 1 else None
    numel = 1
    for d in n.shape or []:
        numel *= int(d)
    return LibPlan(op=n.op, call=call, split_cl=split, out_numel=numel)


def algorithms(plan: LibPlan) -> list[str]:
    if plan.split_cl is None:
        return [ALGORITHM]
    return [CL_ALGORITHM, ALGORITHM] if plan.out_numel >= CL_FIRST_NUMEL else [ALGORITHM, CL_ALGORITHM]


def generate(desc: TaskDescription, view: GraphView, plan: LibPlan, params: dict[str, Any]) -> str:
    if params.get("algorithm") == CL_ALGORITHM and plan.split_cl is not None:
        call, bias = plan.split_cl
        return assemble(
            desc,
            kernel_source("layout.py", "nchw_to_nhwc_kernel", "nhwc_to_nchw_kernel"),
            kernel_source("layout.py", *CL_HELPERS, "to_contiguous"),
            f"t_cl = {call}\nreturn to_contiguous(t_cl, {bias or 'None'})",
            f"library {plan.op} in channels-last, bias and layout back in one Triton pass (mixed policy)",
        )
    return assemble(desc, "", "", f"return {plan.call}", f"library {plan.op} (mixed policy)")
