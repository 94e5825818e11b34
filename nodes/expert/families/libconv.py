"""Convolution (1d/2d/3d, transposed) + an elementwise epilogue.

Algorithms (the seeds):
  library-conv+fused-epilogue  the conv stays a library call (mixed policy only: the algorithm
                 name says so) and the whole epilogue is one Triton kernel: the conv output is
                 written once by the library and read once by the epilogue kernel, instead of once
                 per epilogue op in eager mode. Per-channel operands (bias/scale of shape (C, 1, 1))
                 are read in place through the elementwise family's broadcast modes.
  the conv family's algorithms (implicit-gemm, implicit-gemm-flatk, direct) with the epilogue
                 fused into the conv kernel's store: no library call, the output written once
                 (also what the strict policy keeps).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from graph.records import TaskDescription

from .. import ewops
from ..chain import Chain, collect_chain
from ..graphview import GraphView, Leaf, Unsupported, assemble, is_node
from . import conv as convfam
from . import elementwise as ew

LIB_OPS = {"conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d", "conv_transpose3d"}


@dataclass
class ConvPlan:
    call: str  # Python expression (forward scope) computing the conv output
    conv_node: str
    op: str
    epilogue: Chain
    # The same conv + epilogue as a Triton conv-family plan (None where that family cannot do it).
    triton_plan: convfam.ConvPlan | None = None


def library_call(view: GraphView, c: Any) -> str:
    """The PyTorch call that computes library op node `c` (a conv module or torch.* function)."""
    if c.kind == "call_module":
        src = c.args[0] if c.args else None
        if not is_node(src):
            raise Unsupported(f"{c.op} input")
        return f"self.{c.target}({convfam.operand_expr(view, src, as_list=True)})"
    if c.kind == "call_function" and str(c.target).startswith("torch."):
        args = [convfam.operand_expr(view, a, as_list=True) for a in c.args]
        args += [f"{k}={convfam.operand_expr(view, v, as_list=True)}" for k, v in c.kwargs.items()]
        return f"{c.target}({', '.join(args)})"
    raise Unsupported(f"{c.op} called as {c.target}")


def match(view: GraphView) -> ConvPlan | None:
    nodes = view.compute_nodes()
    convs = [n for n in nodes if n.op in LIB_OPS]
    if len(convs) != 1 or nodes[0].name != convs[0].name:
        return None
    c = convs[0]
    epi = nodes[1:]
    if not epi:
        raise Unsupported(f"a lone {c.op} is the library call itself: nothing to write in Triton")
    epilogue = collect_chain(view, epi, internal={c.name})
    call = library_call(view, c)
    try:
        triton_plan = convfam.plan_conv(view, c, epi)
    except Unsupported:
        triton_plan = None
    return ConvPlan(call=call, conv_node=c.name, op=c.op, epilogue=epilogue, triton_plan=triton_plan)


LIBRARY = "library-conv+fused-epilogue"


def algorithms(plan: ConvPlan) -> list[str]:
    extra = convfam.algorithms(plan.triton_plan) if plan.triton_plan is not None else []
    return [LIBRARY, *extra]


def defaults(plan: ConvPlan, algorithm: str) -> dict[str, Any]:
    if algorithm != LIBRARY and plan.triton_plan is not None:
        return convfam.defaults(plan.triton_plan, algorithm)
    return {"BLOCK": 2048, "num_warps": 8, "EVICT": "", "PERSISTENT": False}


def valid(plan: ConvPlan, params: dict[str, Any]) -> str | None:
    if params["algorithm"] != LIBRARY and plan.triton_plan is not None:
        return convfam.valid(plan.triton_plan, params)
    return None


def space(plan: ConvPlan, params: dict[str, Any], stage: str, sp: dict[str, list]) -> dict[str, list]:
    from ..spaces import SPACES

    if params["algorithm"] != LIBRARY and plan.triton_plan is not None:
        return convfam.space(plan.triton_plan, params, stage, sp)
    return SPACES["elementwise"].get(stage, {})


def refinements(plan: ConvPlan, params: dict[str, Any]) -> list[tuple[str, dict[str, Any], str]]:
    if params["algorithm"] != LIBRARY and plan.triton_plan is not None:
        return convfam.refinements(plan.triton_plan, params)
    return []


def safer(plan: ConvPlan, params: dict[str, Any], rule: str) -> list[tuple[str, dict[str, Any], str]]:
    if params["algorithm"] != LIBRARY and plan.triton_plan is not None:
        return convfam.safer(plan.triton_plan, params, rule)
    return []


def generate(desc: TaskDescription, view: GraphView, plan: ConvPlan, params: dict[str, Any]) -> str:
    if params["algorithm"] != LIBRARY:
        if plan.triton_plan is None:
            raise Unsupported(f"{plan.op}: no Triton conv kernel for this call")
        return convfam.generate(desc, view, plan.triton_plan, params)
    gleaf = Leaf(plan.conv_node, f"t_{plan.conv_node}", None)
    chain = Chain(
        nodes=plan.epilogue.nodes,
        tensor_leaves=[gleaf, *plan.epilogue.tensor_leaves],
        scalar_leaves=list(plan.epilogue.scalar_leaves),
    )
    kernels = [ewops.HELPERS, ew._kernel("epilogue_kernel", chain, params)]
    launchers = [ew.BCAST_HELPER, ew._launcher("epilogue_kernel", chain, params)]
    args = [lf.expr for lf in chain.tensor_leaves + chain.scalar_leaves]
    fwd = f"t_{plan.conv_node} = {plan.call}\nreturn launch_epilogue_kernel({', '.join(args)})"
    ops = ", ".join(n.op for n in plan.epilogue.nodes)
    doc = f"EGG expert: libconv family, algorithm library-{plan.op}+fused-epilogue ({ops}; mixed policy)."
    return assemble(desc, "\n\n".join(kernels), "\n\n".join(launchers), fwd, doc)
