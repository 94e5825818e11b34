"""A read-only view of a TaskDescription's op graph plus the source helpers every family needs.

Nothing here imports torch: the expert runs in the agent process and only writes text.
"""

from __future__ import annotations

import ast
import math
from dataclasses import dataclass, field
from typing import Any

from graph.records import OpNode, ScalarInfo, TaskDescription

# Ops that only rename/copy a tensor (no arithmetic); the planner looks through them.
PASSTHROUGH = {
    "identity",
    "contiguous",
    "clone",
    "detach",
    "dropout",
    "dropout1d",
    "dropout2d",
    "dropout3d",
    "alpha_dropout",
    "feature_alpha_dropout",
}


class Unsupported(Exception):
    """The expert has no family for this graph; the message names the op(s)."""


@dataclass
class Leaf:
    """A tensor or scalar the generated forward() passes to a kernel."""

    name: str  # op-graph node name
    expr: str  # Python expression inside ModelNew.forward (an argument name or self.<path>)
    shape: list[int] | None
    is_scalar: bool = False


@dataclass
class GraphView:
    desc: TaskDescription
    nodes: dict[str, OpNode] = field(default_factory=dict)
    order: list[str] = field(default_factory=list)
    users: dict[str, list[str]] = field(default_factory=dict)
    alias: dict[str, str] = field(default_factory=dict)  # passthrough node -> what it passes
    forward_args: list[str] = field(default_factory=list)
    leaves: dict[str, Leaf] = field(default_factory=dict)
    output: str = ""
    # Every value forward returns, in order (one for most tasks; `output` is the first).
    outputs: list[str] = field(default_factory=list)
    tuple_output: bool = False  # forward returns a tuple (even of one value)
    # A group's sub-view names its values canonically; this maps them back to the graph's names.
    origin: dict[str, str] = field(default_factory=dict)

    @classmethod
    def of(cls, desc: TaskDescription) -> GraphView:
        if not desc.op_graph:
            raise Unsupported(f"no op graph captured ({desc.capture_error or 'unknown reason'})")
        v = cls(desc=desc)
        v.forward_args = forward_arg_names(desc.source)
        placeholder_i = 0
        for n in desc.op_graph:
            if n.kind in ("call_module", "get_attr"):
                # `layer1.0.conv` -> `layer1[0].conv`, so `self.{target}` is valid Python
                n = n.model_copy(update={"target": module_path(n.target)})
            v.nodes[n.name] = n
            v.order.append(n.name)
            if n.kind == "placeholder":
                info = desc.inputs[placeholder_i] if placeholder_i < len(desc.inputs) else None
                arg = v.forward_args[placeholder_i] if placeholder_i < len(v.forward_args) else n.target
                placeholder_i += 1
                v.leaves[n.name] = Leaf(
                    n.name, arg, n.shape, is_scalar=isinstance(info, ScalarInfo) or n.shape is None
                )
            elif n.kind == "get_attr":
                v.leaves[n.name] = Leaf(n.name, f"self.{n.target}", n.shape)
            elif (
                n.kind == "call_module"
                and n.op in PASSTHROUGH
                or (n.kind != "call_module" and n.op in PASSTHROUGH)
            ):
                if "dropout" in n.op and n.kind != "call_module":
                    # A Dropout module is the identity in eval mode (how the checker runs both
                    # models); the functional form drops unless told it is not training.
                    p = arg_value(n, 1, "p", 0.5)
                    training = arg_value(n, 2, "training", True)
                    if p not in (0, 0.0) and training is not False:
                        raise Unsupported(f"{n.op}(p={p}, training=True) is random")
                src = n.args[0] if n.args else None
                if isinstance(src, dict) and "node" in src:
                    v.alias[n.name] = src["node"]
            elif n.kind == "output":
                outs = n.args[0] if n.args else None
                if isinstance(outs, dict) and "node" in outs:
                    v.outputs = [outs["node"]]
                elif isinstance(outs, list) and outs and all(is_node(o) for o in outs):
                    v.outputs = [o["node"] for o in outs]
                    v.tuple_output = True
                else:
                    raise Unsupported(f"the forward returns {outs!r}, not tensors")
        v.outputs = [v.resolve(o) for o in v.outputs]
        v.output = v.outputs[0] if v.outputs else ""
        for name in v.order:
            n = v.nodes[name]
            if n.kind in ("call_function", "call_method", "call_module") and name not in v.alias:
                for r in v.refs(n):
                    v.users.setdefault(r, []).append(name)
        return v

    def resolve(self, name: str) -> str:
        while name in self.alias:
            name = self.alias[name]
        return name

    def refs(self, n: OpNode) -> list[str]:
        return [self.resolve(r) for r in node_refs(n)]

    def compute_nodes(self) -> list[OpNode]:
        """The live call_* nodes in topological order (passthroughs removed)."""
        live: set[str] = set()
        stack = list(self.outputs) if len(self.outputs) > 1 else [self.output]
        while stack:
            name = stack.pop()
            if name in live or (name in self.leaves and name != self.output):
                continue
            live.add(name)
            stack.extend(self.refs(self.nodes[name]))
        return [
            self.nodes[n]
            for n in self.order
            if n in live and n not in self.alias and self.nodes[n].kind.startswith("call_")
        ]

    def leaf_of(self, name: str) -> Leaf | None:
        return self.leaves.get(self.resolve(name))


def module_path(target: str) -> str:
    """`layer1.0.conv1` -> `layer1[0].conv1`: a submodule path as a Python expression tail."""
    parts = target.split(".")
    out = ""
    for p in parts:
        if p.isdigit():
            out += f"[{p}]"
        elif p.isidentifier():
            out += f".{p}" if out else p
        else:
            out += f"[{p!r}]"
    return out


def arg_value(n: OpNode, pos: int, key: str, default: Any = None) -> Any:
    """An argument given positionally or by keyword (or a module constructor attribute)."""
    if key in n.kwargs:
        return n.kwargs[key]
    if len(n.args) > pos:
        return n.args[pos]
    if key in n.module_attrs:
        return n.module_attrs[key]
    return default


def numel(shape: list[int] | None) -> int:
    """Elements of a captured shape (1 for a scalar's empty shape)."""
    return math.prod(int(s) for s in shape or [])


def is_node(x: Any) -> bool:
    return isinstance(x, dict) and set(x) == {"node"}


def node_refs(n: OpNode) -> list[str]:
    """The node names `n`'s args and kwargs read, in order (nested lists and dicts included)."""
    out: list[str] = []

    def walk(x: Any) -> None:
        if is_node(x):
            out.append(x["node"])
        elif isinstance(x, list | tuple):
            for y in x:
                walk(y)
        elif isinstance(x, dict):
            for y in x.values():
                walk(y)

    walk(n.args)
    walk(n.kwargs)
    return out


# ---------------------------------------------------------------------------------------------
# Source helpers (ast over the reference file)
# ---------------------------------------------------------------------------------------------


def _model_class(source: str) -> ast.ClassDef:
    tree = ast.parse(source)
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == "Model":
            return node
    raise Unsupported("the task file has no class Model")


def forward_arg_names(source: str) -> list[str]:
    cls = _model_class(source)
    for item in cls.body:
        if isinstance(item, ast.FunctionDef) and item.name == "forward":
            names = [a.arg for a in item.args.posonlyargs + item.args.args][1:]
            if item.args.vararg is not None:
                raise Unsupported("forward(*args) is not supported")
            return names
    raise Unsupported("class Model has no forward")


def assemble(desc: TaskDescription, kernels: str, launchers: str, forward_body: str, doc: str) -> str:
    """A whole candidate file from one family's kernels, launchers and forward lines. The text
    also carries them as a Piece, so the partition planner can place it among other groups."""
    from .assemble import Assembled, Part, Piece, render

    piece = Piece(kernels=kernels, launchers=launchers, forward=forward_body, doc=doc)
    return Assembled(render(desc, [Part(piece)], doc), piece)


def flit(v: Any) -> str:
    """A Python/Triton float literal for a JSON constant."""
    if isinstance(v, dict) and "float" in v:
        r = v["float"]
        return {"inf": "float('inf')", "-inf": "float('-inf')", "nan": "float('nan')"}.get(r, r)
    if isinstance(v, bool):
        return "1.0" if v else "0.0"
    if isinstance(v, (int, float)):
        return repr(float(v))
    raise Unsupported(f"non-numeric constant {v!r}")
