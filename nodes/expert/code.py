"""ExpertCode: the deterministic code role (seed / refine / tune / fix over family plans).

The graph is lowered once (lowering.py): by one family when one covers it whole (its fused
pattern is the best seed), else partitioned into groups with one family each. Every mode works
on the lowering's units: seeds pick an algorithm per unit, refinements and safer variants are the
units' own, tuning moves one (namespaced) parameter of one unit at a time, biggest unit first.
"""

from __future__ import annotations

import json
from typing import Any

from graph.records import RoleUsage
from graph.reducers import headroom
from nodes.models import CodeReply, CodeRequest, ModelFormatError

from . import spaces
from .assemble import group_at_line
from .debugger import failing_line
from .families.library import ALGORITHMS as LIBRARY_ALGORITHMS
from .graphview import Unsupported
from .hostgraph import GRAPH_REPLAY, HOST_PARAM, graph_replay_offered, host_bound, host_bound_at_seed
from .lowering import Lowering, Unit, lower, own, replace_unit
from .partition import group_cost

# A partition's algorithm swaps (ExpertCode._swap) are offered only while the best kernel could
# still be this much faster by its roofline (graph/reducers.py headroom; unknown: offered).
SWAP_MIN_HEADROOM = 0.25


def _key(params: dict[str, Any]) -> str:
    return json.dumps(params, sort_keys=True, default=str)


def plan_for(desc: Any, policy: str = "mixed") -> Lowering:
    """The lowering of a task (one family, or a partition), or raise Unsupported naming the op."""
    return lower(desc, policy)


def units_by_cost(low: Lowering) -> list[Unit]:
    """Units, most expensive first (estimated from shapes): where tuning pays most."""
    if len(low.units) == 1:
        return list(low.units)
    return sorted(low.units, key=lambda u: -group_cost(low.view, u.group) if u.group else 0.0)


def alike_units(low: Lowering, params: dict[str, Any]) -> list[list[Unit]]:
    """The units of `low` (lowered at `params`) in classes that a tuning move changes together,
    the most expensive class first: units of one family with the same parameters and the same
    ops on the same shapes (_shapes), e.g. an unrolled recurrent cell's per-step GEMMs. Each of
    the eight GEMMs of the suite's unrolled GRU holds about a ninth of its estimated work
    (group_cost), so a move of one could not gain more than that (its tuning stages kept the
    seed, H200, 2026-12-06), while the same tile for all eight is the engineer's move."""
    classes: dict[tuple[str, str, str], list[Unit]] = {}
    for u in units_by_cost(low):
        classes.setdefault((u.name, _key(own(u.tag, params)), _shapes(low, u)), []).append(u)
    return sorted(classes.values(), key=lambda c: -sum(group_cost(low.view, u.group) for u in c if u.group))


def _shapes(low: Lowering, u: Unit) -> str:
    """A group's ops with their shapes and module settings, and the shapes it reads: equal for
    the same computation on other values (a unit of the whole graph is alike no other)."""
    if u.group is None:
        return str(u.tag)
    nodes = [low.view.nodes[n] for n in u.group.nodes]
    ops = [(n.op, n.shape, n.module_attrs) for n in nodes]
    return _key({"ops": ops, "reads": [low.view.nodes[r].shape for r in u.group.inputs]})


# The first seed's kernels replayed as a CUDA graph, offered at seed time (ExpertCode._graph_seed).
GRAPH_SEED_ORIGIN = f"seed:{HOST_PARAM}={GRAPH_REPLAY}"


class ExpertCode:
    name = "expert"

    def write(self, req: CodeRequest) -> CodeReply:
        try:
            low = lower(req.desc, req.policy)
        except Unsupported as e:
            return CodeReply(source=None, unsupported=str(e), note=str(e))
        try:
            if req.mode == "seed":
                return self._seed(req, low)
            if req.mode == "refine":
                return self._refine(req, low)
            if req.mode == "tune":
                return self._tune(req, low)
            if req.mode == "fix":
                return self._fix(req, low)
        except Unsupported as e:
            return CodeReply(source=None, unsupported=str(e), note=str(e))
        except (KeyError, IndexError, TypeError, ValueError, AttributeError) as e:
            # A generator bug is this model failing to give a usable reply: the graph records it
            # as a failed attempt (ModelFormatError) instead of the run crashing.
            raise ModelFormatError(
                f"expert {low.family} generator failed in {req.mode} mode: {type(e).__name__}: {e}"
            ) from e
        return CodeReply(source=None, note=f"unknown mode {req.mode}")

    # -- helpers ---------------------------------------------------------------------------

    def _reply(
        self, req: CodeRequest, low: Lowering, params: dict[str, Any], origin: str, note: str
    ) -> CodeReply:
        source = low.generate(req.desc, params)
        return CodeReply(
            source=str(source),
            origin=origin,
            family=low.at(params).family,
            algorithm=str(params["algorithm"]),
            params=dict(sorted(params.items())),
            note=note,
            usage=RoleUsage(calls=1),
        )

    def _tried(self, req: CodeRequest) -> set[str]:
        tried = {_key(a.params) for a in req.recent if a.params} | {_key(p) for p in req.tried}
        if req.best is not None:
            tried.add(_key(req.best.candidate.params))
        if req.failed is not None:
            tried.add(_key(req.failed.candidate.params))
        return tried

    def _base(self, req: CodeRequest, low: Lowering) -> dict[str, Any]:
        if req.best is not None and req.best.candidate.params.get("algorithm"):
            return dict(req.best.candidate.params)
        base = low.seed(0, req.policy)
        if base is None:
            raise Unsupported("no seed to start from")
        return base

    # -- modes -----------------------------------------------------------------------------

    def _seed(self, req: CodeRequest, low: Lowering) -> CodeReply:
        n = low.seed_count(req.policy)
        k = req.seed_index
        graph = self._graph_seed(req, low, n)
        if graph is not None:
            slot, cand, why = graph
            if k == slot:
                return self._reply(
                    req,
                    low,
                    cand,
                    GRAPH_SEED_ORIGIN,
                    f"{low.summary()} seed 1/{n} replayed as one CUDA graph per call: {why}",
                )
            if k > slot:
                k -= 1  # the plain seeds after the replay's slot move down one
        params = low.seed(k, req.policy)
        if params is None:
            return CodeReply(
                source=None,
                family=low.family,
                note=f"{low.summary()} has {n} distinct seeds",
            )
        what = low.describe_seed(params)
        return self._reply(
            req,
            low,
            params,
            f"seed:{params['algorithm']}" if low.at(params).kind == "whole" else f"seed:{PARTITION_SEED}{k}",
            f"{low.at(params).summary()} seed {k + 1}/{n}: {what} with default tiling",
        )

    def _graph_seed(self, req: CodeRequest, low: Lowering, n: int) -> tuple[int, dict[str, Any], str] | None:
        """(slot, params, why) for the first seed replayed as a CUDA graph when the forward looks
        host-bound before anything ran (hostgraph.host_bound_at_seed): a slot no plain seed
        fills, else the second (the first stays plain: the replay runs the same kernels, and a
        failure of either tells the other apart). None with one seed or when not offered."""
        if req.n_seeds < 2:
            return None
        base = low.seed(0, req.policy)
        if base is None:
            return None
        groups = low.at(base).kernel_groups()
        if graph_replay_offered(req.desc, groups) is None:
            return None
        why = host_bound_at_seed(req.desc, groups)
        cand = {**base, HOST_PARAM: GRAPH_REPLAY}
        if why is None or not low.valid(cand):
            return None
        return (n if n < req.n_seeds else 1), cand, why

    def _refine(self, req: CodeRequest, low: Lowering) -> CodeReply:
        base = self._base(req, low)
        tried = self._tried(req)
        # The profile measured the best kernel's call well over its CUDA-graph replay: the
        # launches, not the algorithm, are what it loses to, so replay it first (also offered by
        # the mapping stage, which a run out of time may not reach).
        best_timing = req.best.timing if req.best is not None else None
        if host_bound(best_timing) is not None:
            graph = self._graph_variant(req, low, base, tried)
            if graph is not None:
                return graph
        recent_origins = {a.origin for a in req.recent}
        for u in low.at(base).units:
            for origin, up, note in u.refinements(own(u.tag, base)):
                params = replace_unit(base, u.tag, up)
                if u.tag is not None:
                    origin, note = f"{origin}@{u.tag}", f"{u.tag} ({u.name}): {note}"
                if _key(params) in tried or origin in recent_origins or not low.valid(params):
                    continue
                return self._reply(req, low, params, origin, note)
        swap = self._swap(req, low, base, tried)
        if swap is not None:
            return swap
        return CodeReply(source=None, family=low.family, note="no exact refinement left for this algorithm")

    def _swap(
        self, req: CodeRequest, low: Lowering, base: dict[str, Any], tried: set[str]
    ) -> CodeReply | None:
        """A partition's seeds pair each group's k-th algorithm, so two groups' best algorithms
        may never meet in one seed (the suite's cx31: its depthwise conv's direct kernel came
        only with a split-row LayerNorm over rows of 96). After the exact refinements, the best
        kernel with one group (alike groups together, the most expensive first) on another of
        its algorithms, the others kept: the timing decides, so only on a GPU (on the CPU no
        refinement is timed against its incumbent)."""
        lowered = low.at(base)
        if lowered.kind != "partition" or req.desc is None or req.desc.device != "cuda":
            return None
        room = headroom(req.best)
        if room is not None and room < SWAP_MIN_HEADROOM:
            return None  # near its roofline already: a swap's job would buy little
        for units in alike_units(lowered, base):
            u = units[0]
            current = own(u.tag, base).get("algorithm")
            for algo in u.algorithms(req.policy):
                if algo == current:
                    continue
                cand = dict(base)
                for m in units:
                    cand = replace_unit(cand, m.tag, m.defaults(algo))
                chosen = [own(m.tag, cand).get("algorithm") for m in lowered.units]
                if all(a in LIBRARY_ALGORITHMS for a in chosen):
                    continue  # no Triton kernel left
                if _key(cand) in tried or not low.valid(cand):
                    continue
                tags = "+".join(str(m.tag) for m in units)
                note = f"{tags} ({u.name}): {current} -> {algo}, the other groups kept"
                return self._reply(req, low, cand, f"refine:swap:{tags}={algo}", note)
        return None

    def _tune(self, req: CodeRequest, low: Lowering) -> CodeReply:
        base = self._base(req, low)
        stage = req.stage.name
        bottleneck = req.advice.bottleneck if req.advice is not None else "memory"
        order = spaces.BOTTLENECK_ORDER.get(bottleneck, spaces.BOTTLENECK_ORDER["memory"]).get(stage, [])
        tried = self._tried(req)
        # The coordinate moves around the best kernel, most promising first (the biggest group
        # first); variant i of a parallel round takes the i-th.
        # Alike units (alike_units) move together.
        moves: list[tuple[list[Unit], str, Any, dict[str, Any]]] = []
        for units in alike_units(low.at(base), base):
            u = units[0]
            ub = own(u.tag, base)
            space = u.space(ub, stage)
            names = [p for p in order if p in space] + sorted(p for p in space if p not in order)
            for pname in names:
                for value in space[pname]:
                    if ub.get(pname) == value:
                        continue
                    cand = dict(base)
                    for m in units:
                        cand = replace_unit(cand, m.tag, dict(ub, **{pname: value}))
                    if _key(cand) in tried or not low.valid(cand):
                        continue
                    moves.append((units, pname, value, cand))
        # Mapping also chooses how the host launches the kernels: many groups launched one by
        # one can cost more than their GPU work, so replaying them as one CUDA graph comes first.
        graph = self._graph_variant(req, low, base, tried) if stage == "mapping" else None
        if graph is not None:
            if req.seed_index == 0:
                return graph
            index = req.seed_index - 1
        else:
            index = req.seed_index
        if index >= len(moves):
            return CodeReply(source=None, family=low.family, note=f"{stage} space exhausted")
        units, pname, value, cand = moves[index]
        u = units[0]
        tags = "+".join(str(m.tag) for m in units)
        full = pname if u.tag is None else f"{tags}.{pname}"
        why = f"{stage} coordinate search around the best kernel ({full}={own(u.tag, base).get(pname)!r})"
        if u.tag is not None and len(units) > 1:
            why += f"; {tags} ({u.name}) are alike (same shapes and parameters) and move together"
        elif u.tag is not None:
            why += f"; {u.tag} ({u.name}) is the largest group not yet exhausted"
        if req.n_seeds > 1:
            why += f"; variant {req.seed_index + 1}/{req.n_seeds} of a parallel round"
        if req.advice is not None:
            why += f"; profiler says {req.advice.bottleneck}-bound, so {pname} is tried early"
        return self._reply(req, low, cand, f"tune:{full}={value}", why)

    def _graph_variant(
        self, req: CodeRequest, low: Lowering, base: dict[str, Any], tried: set[str]
    ) -> CodeReply | None:
        """The best kernel replayed as one CUDA graph per call, when its forward launches many
        groups and that variant was not tried yet (hostgraph.py)."""
        if base.get(HOST_PARAM) == GRAPH_REPLAY:
            return None
        timing = req.best.timing if req.best is not None else None
        why = graph_replay_offered(req.desc, low.at(base).kernel_groups(), timing)
        cand = {**base, HOST_PARAM: GRAPH_REPLAY}
        if why is None or _key(cand) in tried or not low.valid(cand):
            return None
        kind = "tune" if req.mode == "tune" else "refine"
        return self._reply(req, low, cand, f"{kind}:{HOST_PARAM}={GRAPH_REPLAY}", f"{req.stage.name}: {why}")

    @staticmethod
    def _is_replay_of_best(req: CodeRequest, params: dict[str, Any]) -> bool:
        """`params` are the best kernel's own, replayed as a CUDA graph (the graph variant)."""
        if params.get(HOST_PARAM) != GRAPH_REPLAY or req.best is None:
            return False
        best = req.best.candidate.params
        return best.get(HOST_PARAM) != GRAPH_REPLAY and {
            k: v for k, v in params.items() if k != HOST_PARAM
        } == dict(best)

    def _fix(self, req: CodeRequest, low: Lowering) -> CodeReply:
        failed = req.failed
        if failed is not None and (
            self._is_replay_of_best(req, failed.candidate.params)
            or failed.candidate.origin == GRAPH_SEED_ORIGIN
        ):
            # the same kernels verified when launched one by one (or, for the replayed seed, are
            # checked so in seed 1's own branch): what failed is the replay of this forward (a
            # host sync, a data-dependent launch), which no tile or algorithm fixes
            return CodeReply(
                source=None,
                family=low.family,
                note="the CUDA-graph replay of this forward failed: nothing to repair, the kernels "
                "launched one by one stay",
            )
        base = (
            dict(failed.candidate.params)
            if failed is not None and failed.candidate.params.get("algorithm")
            else self._base(req, low)
        )
        tried = self._tried(req)
        rule = req.diagnosis.rule if req.diagnosis is not None else ""
        # The group whose code holds the error line is repaired first.
        culprit = _failing_tag(failed) if failed is not None else None
        units = units_by_cost(low.at(base))
        units.sort(key=lambda u: 0 if u.tag == culprit else 1)
        # Wrong numbers are not fixed by smaller tiles: try the numerically different variants
        # first there; for resource/compile failures shrinking is the cheaper, likelier fix.
        wrong_numbers = rule in ("mismatch", "nan", "shape")
        # A tuning variant that fails is repaired within its algorithm or dropped: the algorithm
        # stage already measured the others, and the stage's verified incumbent stays. (On the
        # H200 a tiling variant of an attention kernel that overflowed shared memory was
        # "repaired" by the ieee algorithm: 67.6 ms against the incumbent's 2.36.)
        tuning = failed is not None and failed.candidate.origin.startswith("tune:")
        options: list[tuple[str, dict[str, Any], str]] = []
        for u in units:
            ub = own(u.tag, base)
            mine: list[tuple[str, dict[str, Any], str]] = []
            shrink = _shrunk(ub, rule)
            other = list(u.safer(ub, rule))
            for algo in () if tuning else u.algorithms(req.policy):
                if algo != ub.get("algorithm"):
                    other.append(
                        (
                            f"fix:{rule or 'other'}:algorithm={algo}",
                            u.defaults(algo),
                            f"switch to the {algo} algorithm, which does not share the failing code",
                        )
                    )
            mine = other + shrink if wrong_numbers else shrink + other
            for origin, up, note in mine:
                params = replace_unit(base, u.tag, up)
                if u.tag is not None:
                    origin, note = f"{origin}@{u.tag}", f"{u.tag} ({u.name}): {note}"
                options.append((origin, params, note))
        for origin, params, note in options:
            if _key(params) in tried or not low.valid(params):
                continue
            return self._reply(req, low, params, origin, note)
        return CodeReply(source=None, family=low.family, note="no safer variant left")


PARTITION_SEED = "partition-"


def _shrunk(params: dict[str, Any], rule: str) -> list[tuple[str, dict[str, Any], str]]:
    """Resource problems: shrink what holds registers / shared memory first."""
    shrink = {"BLOCK": 1024, "BLOCK_N": 1024, "BLOCK_M": 64, "BLOCK_K": 16, "num_stages": 2, "ROWS": 1}
    smaller = dict(params)
    changed = []
    for k, v in shrink.items():
        if k in smaller and isinstance(smaller[k], int) and smaller[k] > v:
            smaller[k] = v
            changed.append(f"{k}={v}")
    if not changed:
        return []
    return [
        (
            f"fix:{rule or 'safer'}:" + ",".join(changed),
            smaller,
            "smaller tiles / fewer stages to stay within registers and shared memory",
        )
    ]


def _failing_tag(failed: Any) -> str | None:
    """The group tag owning the failing line of an attempt, when the candidate has groups."""
    line = failing_line(failed)
    return group_at_line(failed.candidate.source, line) if line is not None else None
