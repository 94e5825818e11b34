"""ExpertCode: the deterministic code role (seed / refine / tune / fix over family plans)."""

from __future__ import annotations

import json
from typing import Any

from graph.records import RoleUsage
from nodes.models import CodeReply, CodeRequest, ModelFormatError

from . import ewops, spaces
from .families import FAMILIES
from .families.libconv import LIB_OPS
from .families.pooling import POOL_OPS
from .families.reduction import LOSS_OPS, RED_OPS
from .families.rowloss import ROW_LOSS_OPS
from .families.scan import SCAN_OPS
from .graphview import GraphView, Unsupported

# Ops some family can generate (in some arrangement); anything else is named as uncovered.
KNOWN_OPS = (
    set(ewops.ELEMENTWISE)
    | RED_OPS
    | LOSS_OPS
    | LIB_OPS
    | SCAN_OPS
    | ROW_LOSS_OPS
    | POOL_OPS
    | {
        "softmax",
        "log_softmax",
        "linear",
        "matmul",
        "t",
        "transpose",
        "permute",
        "getattr",
        "getitem",
        "flip",
        "layer_norm",
        "rms_norm",
        "var",
        "std",
        "norm",
        "instance_norm",
        "batch_norm",
        "group_norm",
        "cross_entropy",
        "scaled_dot_product_attention",
        "tri_mask",  # a causal mask built in forward (attention computes it from indices)
    }
)


def _key(params: dict[str, Any]) -> str:
    return json.dumps(params, sort_keys=True, default=str)


def plan_for(desc: Any) -> tuple[str, Any, GraphView, Any]:
    """(family name, family module, view, plan) or raise Unsupported naming the ops not covered."""
    view = GraphView.of(desc)
    near_miss: list[str] = []
    for name, fam in FAMILIES:
        try:
            plan = fam.match(view)
        except Unsupported as e:
            near_miss.append(f"{name}: {e}")
            continue
        except (KeyError, IndexError, TypeError, ValueError, AttributeError) as e:
            # A matcher bug on an unexpected graph shape: reported in the reply, not raised, so
            # one family cannot take the others down; the message names the family and error.
            near_miss.append(f"{name}: matcher error {type(e).__name__}: {e}")
            continue
        if plan is not None:
            return name, fam, view, plan
    ops = sorted({n.op for n in view.compute_nodes()})
    uncovered = [o for o in ops if o not in KNOWN_OPS]
    why = (
        f"no expert family covers op(s) [{', '.join(uncovered)}]"
        if uncovered
        else f"no expert family covers this combination of ops [{', '.join(ops)}]"
    )
    if near_miss:
        why += " (" + "; ".join(near_miss) + ")"
    raise Unsupported(why)


class ExpertCode:
    name = "expert"

    def write(self, req: CodeRequest) -> CodeReply:
        try:
            fam_name, fam, view, plan = plan_for(req.desc)
        except Unsupported as e:
            return CodeReply(source=None, unsupported=str(e), note=str(e))
        try:
            if req.mode == "seed":
                return self._seed(req, fam_name, fam, view, plan)
            if req.mode == "refine":
                return self._refine(req, fam_name, fam, view, plan)
            if req.mode == "tune":
                return self._tune(req, fam_name, fam, view, plan)
            if req.mode == "fix":
                return self._fix(req, fam_name, fam, view, plan)
        except Unsupported as e:
            return CodeReply(source=None, unsupported=str(e), note=str(e))
        except (KeyError, IndexError, TypeError, ValueError, AttributeError) as e:
            # A generator bug is this model failing to give a usable reply: the graph records it
            # as a failed attempt (ModelFormatError) instead of the run crashing.
            raise ModelFormatError(
                f"expert {fam_name} generator failed in {req.mode} mode: {type(e).__name__}: {e}"
            ) from e
        return CodeReply(source=None, note=f"unknown mode {req.mode}")

    # -- helpers ---------------------------------------------------------------------------

    def _defaults(self, fam_name: str, fam: Any, plan: Any, algorithm: str) -> dict[str, Any]:
        params = dict(spaces.DEFAULTS[fam_name])
        if hasattr(fam, "defaults"):
            params.update(fam.defaults(plan, algorithm))
        params["algorithm"] = algorithm
        return params

    def _reply(
        self,
        req: CodeRequest,
        fam_name: str,
        fam: Any,
        view: GraphView,
        plan: Any,
        params: dict[str, Any],
        origin: str,
        note: str,
    ) -> CodeReply:
        source = fam.generate(req.desc, view, plan, params)
        return CodeReply(
            source=source,
            origin=origin,
            family=fam_name,
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

    def _valid(self, fam: Any, plan: Any, params: dict[str, Any]) -> bool:
        return not hasattr(fam, "valid") or fam.valid(plan, params) is None

    # -- modes -----------------------------------------------------------------------------

    def _seed(self, req, fam_name, fam, view, plan) -> CodeReply:
        algos = fam.algorithms(plan)
        if req.policy == "strict":
            # Library matmul/conv calls are rejected under the strict policy: do not offer them.
            algos = [a for a in algos if not a.startswith("library")]
            if not algos:
                return CodeReply(
                    source=None,
                    family=fam_name,
                    unsupported=(
                        f"{fam_name}: the expert's only algorithms keep a library matmul/convolution, "
                        "which the strict policy forbids (use --policy mixed)"
                    ),
                )
        if req.seed_index >= len(algos):
            return CodeReply(
                source=None,
                family=fam_name,
                note=f"{fam_name} has {len(algos)} distinct algorithms ({', '.join(algos)})",
            )
        algo = algos[req.seed_index]
        params = self._defaults(fam_name, fam, plan, algo)
        return self._reply(
            req,
            fam_name,
            fam,
            view,
            plan,
            params,
            f"seed:{algo}",
            f"{fam_name} seed {req.seed_index + 1}/{len(algos)}: algorithm {algo} with default tiling",
        )

    def _base_params(self, req, fam_name, fam, plan) -> dict[str, Any]:
        if req.best is not None and req.best.candidate.params.get("algorithm"):
            return dict(req.best.candidate.params)
        return self._defaults(fam_name, fam, plan, fam.algorithms(plan)[0])

    def _refine(self, req, fam_name, fam, view, plan) -> CodeReply:
        base = self._base_params(req, fam_name, fam, plan)
        tried = self._tried(req)
        recent_origins = {a.origin for a in req.recent}
        options: list[tuple[str, dict[str, Any], str]] = []
        if hasattr(fam, "refinements"):
            options += fam.refinements(plan, base)
        for origin, params, note in options:
            if _key(params) in tried or origin in recent_origins or not self._valid(fam, plan, params):
                continue
            return self._reply(req, fam_name, fam, view, plan, params, origin, note)
        return CodeReply(source=None, family=fam_name, note="no exact refinement left for this algorithm")

    def _tune(self, req, fam_name, fam, view, plan) -> CodeReply:
        base = self._base_params(req, fam_name, fam, plan)
        stage = req.stage.name
        space = spaces.SPACES.get(fam_name, {}).get(stage, {})
        if hasattr(fam, "space"):
            space = fam.space(plan, base, stage, space)
        bottleneck = req.advice.bottleneck if req.advice is not None else "memory"
        order = spaces.BOTTLENECK_ORDER.get(bottleneck, spaces.BOTTLENECK_ORDER["memory"]).get(stage, [])
        names = [p for p in order if p in space] + sorted(p for p in space if p not in order)
        tried = self._tried(req)
        # The coordinate moves around the best kernel, most promising first; variant i of a
        # parallel round takes the i-th (one at a time, i is 0: the first untried).
        moves: list[tuple[str, Any, dict[str, Any]]] = []
        for pname in names:
            for value in space[pname]:
                if base.get(pname) == value:
                    continue
                cand = dict(base)
                cand[pname] = value
                if _key(cand) in tried or not self._valid(fam, plan, cand):
                    continue
                moves.append((pname, value, cand))
        if req.seed_index >= len(moves):
            return CodeReply(source=None, family=fam_name, note=f"{stage} space exhausted")
        pname, value, cand = moves[req.seed_index]
        why = f"{stage} coordinate search around the best kernel ({pname}={base.get(pname)!r})"
        if req.n_seeds > 1:
            why += f"; variant {req.seed_index + 1}/{req.n_seeds} of a parallel round"
        if req.advice is not None:
            why += f"; profiler says {req.advice.bottleneck}-bound, so {pname} is tried early"
        return self._reply(req, fam_name, fam, view, plan, cand, f"tune:{pname}={value}", why)

    def _fix(self, req, fam_name, fam, view, plan) -> CodeReply:
        failed = req.failed
        base = (
            dict(failed.candidate.params)
            if failed is not None and failed.candidate.params.get("algorithm")
            else self._base_params(req, fam_name, fam, plan)
        )
        tried = self._tried(req)
        rule = req.diagnosis.rule if req.diagnosis is not None else ""
        # Resource problems: shrink what holds registers / shared memory first.
        shrink = {
            "BLOCK": 1024,
            "BLOCK_N": 1024,
            "BLOCK_M": 64,
            "BLOCK_K": 16,
            "num_stages": 2,
            "ROWS": 1,
        }
        smaller = dict(base)
        changed = []
        for k, v in shrink.items():
            if k in smaller and isinstance(smaller[k], int) and smaller[k] > v:
                smaller[k] = v
                changed.append(f"{k}={v}")
        shrink_opts: list[tuple[str, dict[str, Any], str]] = []
        if changed:
            shrink_opts.append(
                (
                    f"fix:{rule or 'safer'}:" + ",".join(changed),
                    smaller,
                    "smaller tiles / fewer stages to stay within registers and shared memory",
                )
            )
        other_opts: list[tuple[str, dict[str, Any], str]] = []
        if hasattr(fam, "safer"):
            other_opts += fam.safer(plan, base, rule)
        for algo in fam.algorithms(plan):
            if algo != base.get("algorithm"):
                p = self._defaults(fam_name, fam, plan, algo)
                other_opts.append(
                    (
                        f"fix:{rule or 'other'}:algorithm={algo}",
                        p,
                        f"switch to the {algo} algorithm, which does not share the failing code",
                    )
                )
        # Wrong numbers are not fixed by smaller tiles: try the numerically different variants
        # first there; for resource/compile failures shrinking is the cheaper, likelier fix.
        wrong_numbers = rule in ("mismatch", "nan", "shape")
        options = other_opts + shrink_opts if wrong_numbers else shrink_opts + other_opts
        for origin, params, note in options:
            if _key(params) in tried or not self._valid(fam, plan, params):
                continue
            return self._reply(req, fam_name, fam, view, plan, params, origin, note)
        return CodeReply(source=None, family=fam_name, note="no safer variant left")
