"""The partition planner: cut an op graph that no single family covers into groups, each one
lowered by a family on its own sub-view.

Groups are found backwards from the outputs. For a value y that must exist as a tensor (an
output, or an input of a group already chosen), the candidate group is the largest region
ending in y whose other values are used only inside it (`_closure`): the anchor, its fusable
prologue and epilogue, and nothing another group needs. Families are asked for that region and
then for ever smaller suffixes of it (in topological order), so the first acceptance is the
largest group some family fuses: a GEMM with its epilogue, a softmax with its prologue, a
library conv with batch norm and an activation, a whole attention. Everything the chosen group
reads from outside becomes a value to materialise, and is planned the same way. Views and size
arithmetic are host lines of `forward` (no kernel). A value no family can produce even alone is
"unsupported", naming that op and its place in the graph.

Each family sees a sub-view whose outside values are leaves (tensors `v_<node>` computed by
earlier groups), so its match/generate code is the same as for a whole graph.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

from graph.records import OpNode

from . import ewops
from .families import FAMILIES
from .families import library as libfam
from .graphview import GraphView, Leaf, Unsupported, is_node, numel
from .hostops import is_host, is_scalar

# A candidate group holds at most this many non-elementwise ops and nodes (bounds the search;
# no family fuses more than an attention's three anchors).
MAX_ANCHORS = 3
MAX_NODES = 48
LIBRARY_OPS = libfam.GEMM_OPS | {"conv1d", "conv2d", "conv3d"} | {f"conv_transpose{d}d" for d in (1, 2, 3)}


@dataclass
class Group:
    index: int
    nodes: list[str]  # topological order
    output: str
    host: bool = False
    family: str = ""
    fam: ModuleType | None = None
    plan: Any = None
    view: GraphView | None = None
    # The same group as a library call (mixed policy; a lone conv/GEMM), offered as an algorithm.
    library: Any = None
    inputs: list[str] = field(default_factory=list)  # outside values read (node names)

    @property
    def tag(self) -> str:
        return f"g{self.index}"


@dataclass
class Partition:
    view: GraphView
    groups: list[Group]
    outputs: list[str]

    def kernel_groups(self) -> list[Group]:
        return [g for g in self.groups if not g.host]


def value_var(view: GraphView, name: str) -> str:
    """The forward expression of value `name`: a leaf's own expression, else `v_<name>`."""
    lf = view.leaves.get(name)
    return lf.expr if lf is not None else f"v_{name}"


def sub_view(view: GraphView, nodes: list[str], output: str) -> GraphView:
    """`view` restricted to `nodes` ending in `output`: every value read from outside is a leaf
    (a forward argument / parameter as before, or an earlier group's tensor `v_<node>`).

    Names are canonical (outside values i0, i1, ...; the group's nodes n0, n1, ... in order;
    `origin` maps them back), so two groups of the same structure generate the same text and the
    file keeps one kernel for both."""
    inside = set(nodes)
    ext: list[str] = []
    for name in nodes:
        for r in view.refs(view.nodes[name]):
            if r not in inside and r not in ext:
                ext.append(r)
    names = {r: f"i{k}" for k, r in enumerate(ext)} | {n: f"n{k}" for k, n in enumerate(nodes)}

    def fix(x: Any) -> Any:
        if is_node(x):
            return {"node": names[view.resolve(x["node"])]}
        if isinstance(x, list):
            return [fix(y) for y in x]
        if isinstance(x, dict):
            return {k: fix(y) for k, y in x.items()}
        return x

    new: dict[str, OpNode] = {}
    leaves: dict[str, Leaf] = {}
    users: dict[str, list[str]] = {}
    for r in ext:
        src, lf, c = view.nodes[r], view.leaves.get(r), names[r]
        new[c] = src.model_copy(update={"name": c, "args": [], "kwargs": {}})
        scalar = lf.is_scalar if lf is not None else src.shape is None
        leaves[c] = Leaf(c, lf.expr if lf is not None else f"v_{r}", src.shape, is_scalar=scalar)
    for n in nodes:
        src = view.nodes[n]
        new[names[n]] = src.model_copy(
            update={"name": names[n], "args": fix(src.args), "kwargs": fix(src.kwargs)}
        )
        for r in view.refs(src):
            users.setdefault(names[r], []).append(names[n])
    return GraphView(
        desc=view.desc,
        nodes=new,
        order=[names[x] for x in ext + nodes],
        users=users,
        alias={},
        forward_args=view.forward_args,
        leaves=leaves,
        output=names[output],
        outputs=[names[output]],
        origin={c: o for o, c in names.items()},
    )


def allowed_algorithms(fam: ModuleType, plan: Any, policy: str) -> list[str]:
    algos = list(fam.algorithms(plan))
    if policy == "strict":
        algos = [a for a in algos if not a.startswith("library")]
    return algos


# match_group's message when no family even came close (says nothing about the graph)
NO_MATCH = "no family matches"


def match_group(
    view: GraphView, policy: str, families: list[tuple[str, ModuleType]] | None = None
) -> tuple[str, ModuleType, Any, list[str]]:
    """The first family (in FAMILIES order, or `families`) that lowers the whole of `view` with an
    algorithm the policy allows: (name, module, plan, near misses). Raises Unsupported with the
    misses."""
    misses: list[str] = []
    for name, fam in FAMILIES if families is None else families:
        try:
            plan = fam.match(view)
        except Unsupported as e:
            misses.append(f"{name}: {e}")
            continue
        except (KeyError, IndexError, TypeError, ValueError, AttributeError) as e:
            misses.append(f"{name}: matcher error {type(e).__name__}: {e}")
            continue
        if plan is None:
            continue
        if not allowed_algorithms(fam, plan, policy):
            misses.append(f"{name}: only library algorithms, which the {policy} policy forbids")
            continue
        return name, fam, plan, misses
    raise Unsupported("; ".join(misses) if misses else NO_MATCH)


def _is_anchor(n: OpNode) -> bool:
    # constants built in forward (a causal mask) are read by an anchor, not anchors themselves
    return not ewops.is_elementwise(n) and n.op not in ("tri_mask", "tensor_constant")


class _Planner:
    def __init__(
        self, view: GraphView, policy: str, families: list[tuple[str, ModuleType]] | None = None
    ) -> None:
        self.view = view
        self.policy = policy
        self.families = families
        self.live = view.compute_nodes()
        self.idx = {n.name: i for i, n in enumerate(self.live)}
        self.users: dict[str, set[str]] = {n.name: set() for n in self.live}
        for n in self.live:
            for r in view.refs(n):
                if r in self.users:
                    self.users[r].add(n.name)
        for o in view.outputs:
            if o in self.users:
                self.users[o].add("<output>")
        self.host = {n.name for n in self.live if is_host(view, n)}
        # Python numbers (sizes, scales) are host lines of their own, never inside a kernel group.
        self.scalar = {n.name for n in self.live if is_scalar(view, n)}
        # A graph of library ops only (and views): the checker refuses any delegation there.
        self.lib_ok = policy == "mixed" and any(
            n.op not in LIBRARY_OPS and n.name not in self.host for n in self.live
        )
        self.assigned: dict[str, int] = {}

    def closure(self, y: str) -> list[str]:
        """The largest region ending in y whose values are used only inside it. Nodes are
        visited in reverse topological order, so every user of a node is decided before it."""
        region = {y}
        for n in reversed(self.live[: self.idx[y]]):
            u = self.users[n.name]
            if n.name not in self.assigned and n.name not in self.scalar and u and u <= region:
                region.add(n.name)
        nodes = sorted(region, key=self.idx.__getitem__)
        # Bound the search: the suffix holding at most MAX_ANCHORS anchors and MAX_NODES nodes.
        anchors, start = 0, len(nodes)
        for i in range(len(nodes) - 1, -1, -1):
            n = self.view.nodes[nodes[i]]
            if n.name not in self.host and _is_anchor(n):
                anchors += 1
            if anchors > MAX_ANCHORS or len(nodes) - i > MAX_NODES:
                break
            start = i
        return nodes[start:]

    def kernel_group(self, y: str) -> Group:
        region = self.closure(y)
        last_misses = ""
        for k in range(len(region)):
            nodes = region[k:]
            if all(n in self.host for n in nodes):
                continue
            sv = sub_view(self.view, nodes, y)
            try:
                name, fam, plan, _ = match_group(sv, self.policy, self.families)
            except Unsupported as e:
                last_misses = str(e)
                continue
            g = Group(index=-1, nodes=nodes, output=y, family=name, fam=fam, plan=plan, view=sv)
            if self.lib_ok and len(nodes) == 1 and self.view.nodes[y].op in LIBRARY_OPS:
                try:
                    g.library = libfam.match(sv)
                except Unsupported:
                    g.library = None
            return g
        n = self.view.nodes[y]
        where = f"node `{y}` (#{self.idx[y] + 1} of {len(self.live)} ops"
        if n.kind == "call_module":
            where += f", module `{n.target}` {n.module_type}"
        raise Unsupported(f"no expert family lowers `{n.op}` at {where}): {last_misses}")

    def run(self) -> Partition:
        groups: list[Group] = []
        pending = [o for o in self.view.outputs if o in self.idx]
        while pending:
            y = max(pending, key=self.idx.__getitem__)
            pending = [p for p in pending if p != y]
            if y in self.assigned:
                continue
            if y in self.host:
                g = Group(index=-1, nodes=[y], output=y, host=True)
            else:
                g = self.kernel_group(y)
            gi = len(groups)
            groups.append(g)
            inside = set(g.nodes)
            for name in g.nodes:
                self.assigned[name] = gi
            ins: list[str] = []
            for name in g.nodes:
                for r in self.view.refs(self.view.nodes[name]):
                    if r not in inside and r not in ins:
                        ins.append(r)
                        if r in self.idx and r not in self.assigned and r not in pending:
                            pending.append(r)
            g.inputs = ins
        groups.sort(key=lambda g: self.idx[g.output])
        for i, g in enumerate(groups):
            g.index = i
        return Partition(view=self.view, groups=groups, outputs=list(self.view.outputs))


def partition(
    view: GraphView, policy: str = "mixed", families: list[tuple[str, ModuleType]] | None = None
) -> Partition:
    """Groups covering every live op of `view` (see the module doc); raises Unsupported naming
    the first op no family lowers. `families` replaces the registry (FAMILIES) when given."""
    return _Planner(view, policy, families).run()


def group_cost(view: GraphView, group: Group | None) -> float:
    """A rough cost of a group from shapes, in bytes-equivalent: memory traffic of its inputs and
    output, plus GEMM/conv flops at the H200's ~60 FLOP/byte balance. Orders tuning effort."""
    if group is None:
        return 0.0
    byte = 4.0
    cost = byte * numel(view.nodes[group.output].shape)
    for r in group.inputs:
        cost += byte * numel(view.nodes[r].shape)
    for name in group.nodes:
        n = view.nodes[name]
        out = numel(n.shape)
        if n.op in ("linear", "matmul"):
            refs = view.refs(n)
            k = (view.nodes[refs[0]].shape or [1])[-1] if refs else 1
            cost += 2.0 * out * int(k) / 60.0
        elif n.op.startswith("conv"):
            refs = view.refs(n)
            w = n.module_attrs
            cin = int(w.get("in_channels", 0) or 0)
            g = int(w.get("groups", 1) or 1)
            taps = 1
            for k in w.get("kernel_size", []) or []:
                taps *= int(k)
            if not cin and len(refs) > 1:
                ws = view.nodes[refs[1]].shape or [1, 1]
                cin, taps = int(ws[1]) * g, numel(ws[2:])
            cost += 2.0 * out * max(cin // max(g, 1), 1) * taps / 60.0
    return cost
