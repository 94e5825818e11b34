"""Convolution (1d/2d/3d, transposed) as a library call + the whole elementwise epilogue fused
into one Triton kernel (mixed policy only: the algorithm name says so).

The conv output is written once by the library and read once by the epilogue kernel, instead of
once per epilogue op in eager mode. Per-channel operands (bias/scale of shape (C, 1, 1)) are read
in place through the elementwise family's broadcast modes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from graph.records import TaskDescription

from .. import ewops
from ..chain import Chain, collect_chain
from ..graphview import GraphView, Leaf, Unsupported, assemble, is_node
from . import elementwise as ew

LIB_OPS = {"conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d", "conv_transpose3d"}


@dataclass
class ConvPlan:
    call: str  # Python expression (forward scope) computing the conv output
    conv_node: str
    op: str
    epilogue: Chain


def _arg_expr(view: GraphView, a: Any) -> str:
    if is_node(a):
        lf = view.leaves.get(view.resolve(a["node"]))
        if lf is None:
            raise Unsupported("conv operand is computed, not an argument or parameter")
        return lf.expr
    if isinstance(a, list):
        return "[" + ", ".join(_arg_expr(view, x) for x in a) + "]"
    if isinstance(a, dict):
        raise Unsupported(f"conv argument {a!r}")
    return repr(a)


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
    if c.kind == "call_module":
        src = c.args[0] if c.args else None
        if not is_node(src):
            raise Unsupported(f"{c.op} input")
        call = f"self.{c.target}({_arg_expr(view, src)})"
    elif c.kind == "call_function" and c.target.startswith("torch."):
        args = [_arg_expr(view, a) for a in c.args]
        args += [f"{k}={_arg_expr(view, v)}" for k, v in c.kwargs.items()]
        call = f"{c.target}({', '.join(args)})"
    else:
        raise Unsupported(f"{c.op} called as {c.target}")
    return ConvPlan(call=call, conv_node=c.name, op=c.op, epilogue=epilogue)


def algorithms(plan: ConvPlan) -> list[str]:
    return ["library-conv+fused-epilogue"]


def defaults(plan: ConvPlan, algorithm: str) -> dict[str, Any]:
    return {"BLOCK": 2048, "num_warps": 8, "EVICT": "", "PERSISTENT": False}


def space(plan: ConvPlan, params: dict[str, Any], stage: str, sp: dict[str, list]) -> dict[str, list]:
    from ..spaces import SPACES

    return SPACES["elementwise"].get(stage, {})


def generate(desc: TaskDescription, view: GraphView, plan: ConvPlan, params: dict[str, Any]) -> str:
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
