"""Turning a run of elementwise op-graph nodes into Triton statements.

Shared by every family: the elementwise family's whole body, and the prologues/epilogues fused
into softmax and GEMM kernels.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from graph.records import OpNode

from . import ewops
from .graphview import GraphView, Leaf, Unsupported, flit, is_node


@dataclass
class Chain:
    """Elementwise nodes (topological) and the leaves they read besides the chain's own input."""

    nodes: list[OpNode]
    tensor_leaves: list[Leaf] = field(default_factory=list)
    scalar_leaves: list[Leaf] = field(default_factory=list)

    def body(self, env: dict[str, str], var_prefix: str = "v_") -> tuple[list[str], str | None]:
        """Statements computing the chain; `env` maps already-available node names to variables.

        Returns (lines, variable of the last node) and adds each node's variable to `env`."""
        lines: list[str] = []
        last = None

        def val(a: Any) -> str:
            if is_node(a):
                name = a["node"]
                if name not in env:
                    raise Unsupported(f"operand {name} is not available to the fused chain")
                return env[name]
            return flit(a)

        for n in self.nodes:
            var = f"{var_prefix}{n.name}"
            lines.append(f"{var} = {ewops.emit(n, val)}")
            env[n.name] = var
            last = var
        return lines, last


def collect_chain(view: GraphView, nodes: list[OpNode], internal: set[str]) -> Chain:
    """Check that `nodes` are elementwise and gather the leaves they read.

    `internal` names values produced inside the kernel (e.g. the GEMM accumulator)."""
    chain = Chain(nodes=[])
    seen: set[str] = set(internal)
    for n in nodes:
        if not ewops.is_elementwise(n):
            raise Unsupported(f"{n.op} is not elementwise")
        chain.nodes.append(n)
        for r in view.refs(n):
            if r in seen:
                continue
            leaf = view.leaves.get(r)
            if leaf is None:
                raise Unsupported(f"{n.op} reads {r}, which the fused chain does not produce")
            seen.add(r)
            (chain.scalar_leaves if leaf.is_scalar else chain.tensor_leaves).append(leaf)
        seen.add(n.name)
    # Node references inside args were resolved through passthroughs by view.refs; rewrite the
    # args the same way so emit() sees the resolved names.
    chain.nodes = [_resolved(view, n) for n in chain.nodes]
    return chain


def _resolved(view: GraphView, n: OpNode) -> OpNode:
    def fix(x: Any) -> Any:
        if is_node(x):
            return {"node": view.resolve(x["node"])}
        if isinstance(x, list):
            return [fix(y) for y in x]
        if isinstance(x, dict):
            return {k: fix(y) for k, y in x.items()}
        return x

    return n.model_copy(update={"args": fix(n.args), "kwargs": fix(n.kwargs)})


def leaf_launch_args(
    tensors: list[str], scalars: list[str], view_call: str, strides: tuple[str, str, str]
) -> tuple[list[str], str]:
    """Launcher lines turning each epilogue tensor leaf `t` into `t_e` and three strides (named
    `t_<stride>`) with `view_call` (a format string over {t}), and the `, a, b, ...` suffix
    of kernel arguments: those four per tensor, then every scalar leaf as a float."""
    lines: list[str] = []
    args: list[str] = []
    for t in tensors:
        names = [f"{t}_e", *(f"{t}_{st}" for st in strides)]
        lines.append(f"    {', '.join(names)} = {view_call.format(t=t)}")
        args += names
    args += [f"float({x})" for x in scalars]
    return lines, "".join(f", {a}" for a in args)
