"""Random tensors drawn in forward (torch.randn / torch.rand with a shape, e.g. an RNN's initial
state when none is given): a Philox kernel (kernels/random.py), shape and device from the run."""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from typing import Any

from graph.records import TaskDescription

from ..graphview import GraphView, Unsupported, assemble, is_node
from ..hostops import named_sizes
from ..kernelfiles import kernel_source

RANDOM_OPS = {"randn": True, "rand": False}
KERNELS = kernel_source("random.py", "random_kernel")
LAUNCH = kernel_source("random.py", "launch_random")


@dataclass
class RandomPlan:
    shape: list[str]
    device: str
    dtype: str
    normal: bool
    seed: int


def _value(view: GraphView, a: Any, what: str) -> str:
    if is_node(a):
        lf = view.leaf_of(a["node"])
        if lf is None or not lf.is_scalar:
            raise Unsupported(f"random tensor {what} computed inside the group")
        return lf.expr
    if isinstance(a, int) and not isinstance(a, bool):
        # a size the model holds (`self.hidden_size`) is read from it: other sizes keep working
        return named_sizes(view, inputs=False).get(a, str(a))
    raise Unsupported(f"random tensor {what} {a!r}")


def match(view: GraphView) -> RandomPlan | None:
    nodes = view.compute_nodes()
    if len(nodes) != 1 or nodes[0].op not in RANDOM_OPS or nodes[0].kind != "call_function":
        return None
    n = nodes[0]
    dims = n.args[0] if len(n.args) == 1 and isinstance(n.args[0], list) else n.args
    if set(n.kwargs) - {"device", "dtype", "requires_grad", "layout", "pin_memory"}:
        raise Unsupported(f"{n.op} with {sorted(n.kwargs)}")
    dev = n.kwargs.get("device")
    device = _value(view, dev, "device") if is_node(dev) else "None"
    dt = n.kwargs.get("dtype")
    dtype = f"torch.{dt['dtype']}" if isinstance(dt, dict) and "dtype" in dt else "None"
    shape = [_value(view, d, "size") for d in dims]
    # A fixed seed per draw site: each draw is as valid as any other of the same distribution.
    seed = zlib.crc32(f"{view.origin.get(n.name, n.name)}".encode()) & 0x7FFFFFFF
    return RandomPlan(shape=shape, device=device, dtype=dtype, normal=RANDOM_OPS[n.op], seed=seed)


def algorithms(plan: RandomPlan) -> list[str]:
    return ["philox"]


def generate(desc: TaskDescription, view: GraphView, plan: RandomPlan, params: dict[str, Any]) -> str:
    shape = "(" + ", ".join(plan.shape) + ("," if len(plan.shape) == 1 else "") + ")"
    call = f"return launch_random({shape}, {plan.device}, {plan.dtype}, {plan.normal}, {plan.seed})"
    return assemble(desc, KERNELS, LAUNCH, call, "EGG expert: random tensor (philox).")
