"""Recurrent modules (nn.LSTM, nn.GRU, nn.RNN): every layer and direction as one input-projection
GEMM plus one fused step kernel per time step (kernels/rnn.py), all in Triton under either
policy. Layers, directions, hidden size, batch_first and bias are read from the module at run
time; the group's value is what the module returns ((output, (h_n, c_n)) or (output, h_n)),
which the forward's getitem lines unpack."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from graph.records import TaskDescription

from ..graphview import GraphView, Unsupported, arg_value, assemble, is_node
from ..kernelfiles import kernel_source

RNN_OPS = {"lstm": ("lstm_step_kernel", 4), "gru": ("gru_step_kernel", 3), "rnn": ("rnn_step_kernel", 1)}
KERNELS = kernel_source(
    "rnn.py",
    "rnn_linear_kernel",
    "_rnn_gate",
    "_rnn_sigmoid",
    "_rnn_tanh",
    "_rnn_pre",
    "lstm_step_kernel",
    "gru_step_kernel",
    "rnn_step_kernel",
    "recurrent_seq_kernel",
)
LAUNCH = kernel_source("rnn.py", "_rnn_linear", "launch_recurrent")


@dataclass
class RnnPlan:
    op: str
    module: str
    x: str
    hx: str
    relu: bool


def _expr(view: GraphView, a: Any) -> str:
    if a is None:
        return "None"
    if is_node(a):
        lf = view.leaf_of(a["node"])
        if lf is None or lf.is_scalar:
            raise Unsupported("recurrent module input computed inside the group")
        return lf.expr
    if isinstance(a, list):
        return "(" + ", ".join(_expr(view, x) for x in a) + ")"
    raise Unsupported(f"recurrent module argument {a!r}")


def match(view: GraphView) -> RnnPlan | None:
    nodes = view.compute_nodes()
    if len(nodes) != 1 or nodes[0].op not in RNN_OPS:
        return None
    n = nodes[0]
    if n.kind != "call_module":
        raise Unsupported(f"{n.op} called as a function")
    if n.module_attrs.get("proj_size"):
        raise Unsupported("LSTM with proj_size")
    x = _expr(view, arg_value(n, 0, "input"))
    hx = _expr(view, arg_value(n, 1, "hx"))
    relu = n.module_attrs.get("nonlinearity", "tanh") == "relu"
    return RnnPlan(op=n.op, module=f"self.{n.target}", x=x, hx=hx, relu=relu)


# The per-step kernel's launch (kernels/rnn.py launch_recurrent; BLOCK_H 0: the launcher narrows
# it until a step has about 64 programs). Tuned by the tiling and memory stages (spaces.py).
STEP_PARAMS = ("BLOCK_B", "BLOCK_H", "BLOCK_K", "num_warps", "num_stages")


def algorithms(plan: RnnPlan) -> list[str]:
    return ["projection-gemm+fused-steps"]


def generate(desc: TaskDescription, view: GraphView, plan: RnnPlan, params: dict[str, Any]) -> str:
    step, gates = RNN_OPS[plan.op]
    extra = f"{{'RELU': {plan.relu}}}" if plan.op == "rnn" else "{}"
    cfg = {k: params[k] for k in STEP_PARAMS if k in params}
    call = f"return launch_recurrent({plan.module}, {plan.x}, {plan.hx}, {step}, {gates}, {extra}, {cfg!r})"
    doc = f"EGG expert: rnn family ({plan.op}), algorithm projection-gemm+fused-steps."
    return assemble(desc, KERNELS, LAUNCH, call, doc)
