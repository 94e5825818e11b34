"""How a graph is lowered: one family over the whole graph, or a partition into groups.

A `Unit` is one family plan with the operations the code role needs (algorithms, defaults,
validity, refinements, tuning space, safer variants, generation). A whole-graph lowering is one
unit with plain parameter names; a partitioned lowering has one unit per kernel group, and its
parameters are namespaced by the group's tag (`g2.BLOCK_M`, `g2.algorithm`), so seeds pick an
algorithm per group and tuning changes one group's parameter at a time.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

from graph.records import TaskDescription

from . import spaces
from .assemble import Part, Piece, render
from .decompose import decompose
from .families import FUSED_ALGORITHMS, FUSED_FAMILIES, FUSED_NAMES
from .families import library as libfam
from .graphview import GraphView, Unsupported
from .hostgraph import GRAPH_REPLAY, HOST_PARAM, with_graph_replay
from .hostops import host_expr
from .partition import NO_MATCH, Group, Partition, allowed_algorithms, match_group, partition, value_var
from .simplify import simplify

PARTITION = "partition"


@dataclass
class Unit:
    name: str  # family name
    fam: ModuleType
    view: GraphView
    plan: Any
    tag: str | None = None  # group tag (None: the whole graph)
    library: Any = None  # a library plan for the same ops (mixed policy)
    group: Group | None = None

    def algorithms(self, policy: str) -> list[str]:
        algos = allowed_algorithms(self.fam, self.plan, policy)
        if self.library is not None and policy == "mixed":
            # A conv is best left to cuDNN (TF32 by default, channels-last); a GEMM in Triton
            # (3xTF32 beats fp32 cuBLAS), with the library as the fallback.
            if self.library.op in libfam.GEMM_OPS:
                algos = [*algos, *libfam.algorithms(self.library)]
            else:
                algos = [*libfam.algorithms(self.library), *algos]
        return algos

    def defaults(self, algorithm: str) -> dict[str, Any]:
        if algorithm in libfam.ALGORITHMS and self.library is not None:
            return {"algorithm": algorithm}
        params = dict(spaces.DEFAULTS.get(self.name, {}))
        if hasattr(self.fam, "defaults"):
            params.update(self.fam.defaults(self.plan, algorithm))
        params["algorithm"] = algorithm
        return params

    def is_library(self, params: dict[str, Any]) -> bool:
        return params.get("algorithm") in libfam.ALGORITHMS and self.library is not None

    def valid(self, params: dict[str, Any]) -> bool:
        if self.is_library(params):
            return True
        return not hasattr(self.fam, "valid") or self.fam.valid(self.plan, params) is None

    def refinements(self, params: dict[str, Any]) -> list[tuple[str, dict[str, Any], str]]:
        if self.is_library(params) or not hasattr(self.fam, "refinements"):
            return []
        return list(self.fam.refinements(self.plan, params))

    def space(self, params: dict[str, Any], stage: str) -> dict[str, list]:
        if self.is_library(params):
            return {}
        sp = spaces.SPACES.get(self.name, {}).get(stage, {})
        if hasattr(self.fam, "space"):
            sp = self.fam.space(self.plan, params, stage, sp)
        return sp

    def safer(self, params: dict[str, Any], rule: str) -> list[tuple[str, dict[str, Any], str]]:
        if self.is_library(params) or not hasattr(self.fam, "safer"):
            return []
        return list(self.fam.safer(self.plan, params, rule))

    def generate(self, desc: TaskDescription, params: dict[str, Any]) -> str:
        if self.is_library(params):
            return libfam.generate(desc, self.view, self.library, params)
        return self.fam.generate(desc, self.view, self.plan, params)


def ns(tag: str | None, params: dict[str, Any]) -> dict[str, Any]:
    """Parameters of one unit as they appear in the candidate's params (namespaced by group)."""
    return dict(params) if tag is None else {f"{tag}.{k}": v for k, v in params.items()}


def own(tag: str | None, params: dict[str, Any]) -> dict[str, Any]:
    """One unit's parameters out of a candidate's params."""
    if tag is None:
        return dict(params)
    p = f"{tag}."
    return {k[len(p) :]: v for k, v in params.items() if k.startswith(p)}


def replace_unit(params: dict[str, Any], tag: str | None, unit_params: dict[str, Any]) -> dict[str, Any]:
    if tag is None:
        return dict(unit_params)
    p = f"{tag}."
    out = {k: v for k, v in params.items() if not k.startswith(p)}
    out.update(ns(tag, unit_params))
    return out


@dataclass
class Lowering:
    """The units of a graph and how to write one candidate from parameters."""

    kind: str  # "whole" | "partition"
    units: list[Unit]
    view: GraphView
    part: Partition | None = None
    misses: list[str] = field(default_factory=list)
    # The same graph planned with FUSED_FAMILIES (a library conv and the norm after it in one
    # group); its seeds come first, these units' own after them. A candidate's parameters say
    # which of the two wrote it (`at`): a fused lowering's hold a FUSED_ALGORITHMS algorithm.
    fused: Lowering | None = None

    def at(self, params: dict[str, Any]) -> Lowering:
        """The lowering (this one or its fused alternative) that candidate `params` come from."""
        if self.fused is not None and any(
            (k == "algorithm" or k.endswith(".algorithm")) and v in FUSED_ALGORITHMS
            for k, v in params.items()
        ):
            return self.fused
        return self

    def _fused_seeds(self, policy: str) -> int:
        """Seeds taken from the fused alternative: as many as its fused groups have algorithms."""
        if self.fused is None:
            return 0
        return max(
            (
                len(u.algorithms(policy))
                for u in self.fused.units
                if any(a in FUSED_ALGORITHMS for a in u.algorithms(policy))
            ),
            default=0,
        )

    @property
    def family(self) -> str:
        return self.units[0].name if self.kind == "whole" else PARTITION

    def summary(self) -> str:
        if self.kind == "whole":
            return self.units[0].name
        return f"{PARTITION} into {len(self.units)} kernel groups"

    def seed(self, k: int, policy: str) -> dict[str, Any] | None:
        """Seed k: the fused alternative's seeds first, then each unit's k-th algorithm (its last
        when it has fewer); None past the end."""
        nf = self._fused_seeds(policy)
        if k < nf and self.fused is not None:
            return self.fused.seed(k, policy)
        return self._own_seed(k - nf, policy)

    def _own_seed(self, k: int, policy: str) -> dict[str, Any] | None:
        lists = [u.algorithms(policy) for u in self.units]
        if any(not a for a in lists):
            bad = next(u for u, a in zip(self.units, lists, strict=True) if not a)
            raise Unsupported(
                f"{bad.name}: the expert's only algorithms keep a library matmul/convolution, "
                f"which the {policy} policy forbids (use --policy mixed)"
            )
        if k >= max(len(a) for a in lists):
            return None
        if self.kind == "whole":
            return self.units[0].defaults(lists[0][k])
        params: dict[str, Any] = {"algorithm": PARTITION}
        chosen = []
        for u, algos in zip(self.units, lists, strict=True):
            a = algos[min(k, len(algos) - 1)]
            chosen.append(a)
            params.update(ns(u.tag, u.defaults(a)))
        if all(a in libfam.ALGORITHMS for a in chosen):
            return None  # no Triton kernel left: not a candidate
        return params

    def seed_count(self, policy: str) -> int:
        return self._fused_seeds(policy) + max(len(u.algorithms(policy)) for u in self.units)

    def describe_seed(self, params: dict[str, Any]) -> str:
        if self.at(params) is not self:
            return self.at(params).describe_seed(params)
        if self.kind == "whole":
            return str(params["algorithm"])
        return ", ".join(f"{u.tag} {u.name}/{own(u.tag, params).get('algorithm')}" for u in self.units)

    def valid(self, params: dict[str, Any]) -> bool:
        if params.get(HOST_PARAM, GRAPH_REPLAY) != GRAPH_REPLAY:
            return False
        params = {k: v for k, v in params.items() if k != HOST_PARAM}
        if self.at(params) is not self:
            return self.at(params).valid(params)
        return all(u.valid(own(u.tag, params)) for u in self.units)

    def kernel_groups(self) -> int:
        """Groups that launch kernels or library calls (host-only groups are Python expressions)."""
        if self.kind == "whole" or self.part is None:
            return 1
        return sum(1 for g in self.part.groups if not g.host)

    def generate(self, desc: TaskDescription, params: dict[str, Any]) -> str:
        if HOST_PARAM in params:
            host = params[HOST_PARAM]
            source = self.generate(desc, {k: v for k, v in params.items() if k != HOST_PARAM})
            return with_graph_replay(source, desc) if host == GRAPH_REPLAY else source
        if self.at(params) is not self:
            return self.at(params).generate(desc, params)
        if self.kind == "whole":
            return self.units[0].generate(desc, params)
        assert self.part is not None
        view = self.part.view
        by_tag = {u.tag: u for u in self.units}
        device = _device_expr(view)
        parts: list[Part] = []
        lines: list[str] = []
        for g in self.part.groups:
            var = f"v_{g.output}"
            if g.host:
                n = view.nodes[g.output]
                expr = host_expr(view, n, lambda r: value_var(view, r), device)
                parts.append(Part(Piece("", "", f"return {expr}"), None, var))
                continue
            u = by_tag[g.tag]
            src = u.generate(desc, own(u.tag, params))
            piece = getattr(src, "piece", None)
            if piece is None:
                raise Unsupported(f"{u.name} did not return a piece")
            parts.append(Part(piece, u.tag, var))
            alg = own(u.tag, params).get("algorithm")
            ops = ", ".join(view.nodes[x].op for x in g.nodes)
            lines.append(f"{u.tag}: {u.name}/{alg} ({ops})")
        outs = [value_var(view, o) for o in self.part.outputs]
        tail = f"return ({', '.join(outs)},)" if view.tuple_output else f"return {outs[0]}"
        doc = f"EGG expert: {len(self.units)} kernel groups.\n\n" + "\n".join(lines) + "\n"
        return render(desc, parts, doc, tail=tail)


def _device_expr(view: GraphView) -> str:
    for name in view.order:
        lf = view.leaves.get(name)
        if lf is not None and not lf.is_scalar and view.nodes[name].kind == "placeholder":
            return f"{lf.expr}.device"
    return "None"


def _whole(view: GraphView, policy: str, families: Any = None) -> tuple[Lowering | None, list[str]]:
    if len(view.outputs) > 1:
        return None, ["several outputs: partitioned"]
    try:
        name, fam, plan, misses = match_group(view, policy, families)
    except Unsupported as e:
        return None, [str(e)]
    return Lowering("whole", [Unit(name, fam, view, plan)], view), misses


def lower(desc: TaskDescription, policy: str = "mixed") -> Lowering:
    """The lowering of `desc` under `policy` (cached: the code role asks for it on every call)."""
    key = _key(desc, policy)
    hit = _CACHE.get(key)
    if hit is not None:
        if isinstance(hit, Unsupported):
            raise hit
        return hit
    try:
        low = _lower(desc, policy)
    except Unsupported as e:
        _remember(key, e)
        raise
    _remember(key, low)
    return low


def _lower(desc: TaskDescription, policy: str) -> Lowering:
    view = GraphView.of(simplify(decompose(desc)))
    whole, misses = _whole(view, policy)
    if whole is not None:
        return whole
    try:
        part = partition(view, policy)
    except Unsupported as e:
        # Say also why no family took the graph whole: that family saw the whole pattern and
        # names what it lacks (a mask that is not causal), which one node's miss cannot.
        whole_why = "; ".join(m for m in misses if m and m != NO_MATCH)
        raise Unsupported(f"{e}; as one kernel: {whole_why}" if whole_why else str(e)) from e
    units = [
        Unit(g.family, g.fam, g.view, g.plan, tag=g.tag, library=g.library, group=g)
        for g in part.kernel_groups()
        if g.fam is not None and g.view is not None
    ]
    if not units:
        raise Unsupported("the graph has no op to compute in a kernel")
    low = Lowering("partition", units, view, part=part, misses=misses)
    # Under the strict policy no library call is left, so convnorm never takes a group there;
    # a row chain (all Triton) still does.
    low.fused = _fused(view, policy)
    return low


def _fused(view: GraphView, policy: str) -> Lowering | None:
    """The graph planned with FUSED_FAMILIES, where one of them takes a group (else None)."""
    whole, _ = _whole(view, policy, FUSED_FAMILIES)
    low = whole
    if low is None:
        try:
            part = partition(view, policy, FUSED_FAMILIES)
        except Unsupported:
            return None
        units = [
            Unit(g.family, g.fam, g.view, g.plan, tag=g.tag, library=g.library, group=g)
            for g in part.kernel_groups()
            if g.fam is not None and g.view is not None
        ]
        low = Lowering("partition", units, view, part=part) if units else None
    if low is None or not any(u.name in FUSED_NAMES for u in low.units):
        return None
    return low


_CACHE: dict[str, Lowering | Unsupported] = {}


def _key(desc: TaskDescription, policy: str) -> str:
    h = hashlib.sha256(desc.model_dump_json().encode()).hexdigest()
    return f"{policy}:{h}"


def _remember(key: str, value: Lowering | Unsupported) -> None:
    if len(_CACHE) > 16:
        _CACHE.pop(next(iter(_CACHE)))
    _CACHE[key] = value
