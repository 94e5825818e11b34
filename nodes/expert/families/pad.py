"""Padding: F.pad in every mode and the nn.*Pad* modules, as one gather pass over the output
(kernels/pad.py). In a partitioned network this is the pad before a shifted window or a conv
written with explicit padding."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from graph.records import TaskDescription

from ..graphview import GraphView, Unsupported, arg_value, assemble, flit, is_node
from ..kernelfiles import kernel_source

KERNELS = kernel_source("pad.py", "_pad_src", "pad_kernel")
LAUNCH = kernel_source("layout.py", "_memory_order") + "\n\n" + kernel_source("pad.py", "launch_pad")

# nn module op names (snake case of the class) -> mode
_MODULES = {
    **{f"zero_pad{d}d": "constant" for d in (1, 2, 3)},
    **{f"constant_pad{d}d": "constant" for d in (1, 2, 3)},
    **{f"reflection_pad{d}d": "reflect" for d in (1, 2, 3)},
    **{f"replication_pad{d}d": "replicate" for d in (1, 2, 3)},
    **{f"circular_pad{d}d": "circular" for d in (1, 2, 3)},
}
_MODES = ("constant", "reflect", "replicate", "circular")


@dataclass
class PadPlan:
    x: str  # forward expression of the padded tensor
    pad: list[int]
    mode: str
    value: str  # a float literal


def literal_ints(v: Any) -> list[int] | None:
    if isinstance(v, list) and all(isinstance(p, int) and not isinstance(p, bool) for p in v):
        return list(v)
    return None


def match(view: GraphView) -> PadPlan | None:
    nodes = view.compute_nodes()
    if len(nodes) != 1:
        return None
    n = nodes[0]
    if n.kind == "call_module" and n.op in _MODULES:
        mode = _MODULES[n.op]
        pad = literal_ints(n.module_attrs.get("padding"))
        value = n.module_attrs.get("value", 0.0) if mode == "constant" else 0.0
    elif n.kind != "call_module" and n.op == "pad":
        pad = literal_ints(arg_value(n, 1, "pad"))
        mode = arg_value(n, 2, "mode", "constant")
        value = arg_value(n, 3, "value", None)
        value = 0.0 if value is None else value
    else:
        return None
    src = n.args[0] if n.args else n.kwargs.get("input")
    lf = view.leaf_of(src["node"]) if is_node(src) else None
    if lf is None or lf.is_scalar:
        raise Unsupported(f"{n.op} of a value computed inside the group")
    if pad is None or len(pad) % 2:
        raise Unsupported(f"{n.op} with padding {pad!r} (a computed or odd-length list)")
    if mode not in _MODES:
        raise Unsupported(f"{n.op} mode {mode!r}")
    if is_node(value):
        raise Unsupported(f"{n.op} with a computed fill value")
    return PadPlan(x=lf.expr, pad=pad, mode=mode, value=flit(value))


def algorithms(plan: PadPlan) -> list[str]:
    return ["gather"]


def generate(desc: TaskDescription, view: GraphView, plan: PadPlan, params: dict[str, Any]) -> str:
    doc = f"EGG expert: pad family ({plan.mode}, pad {plan.pad}), algorithm gather."
    call = f"return launch_pad({plan.x}, {plan.pad!r}, {plan.mode!r}, {plan.value})"
    return assemble(desc, KERNELS, LAUNCH, call, doc)
