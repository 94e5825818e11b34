"""The code node: asks the code role for the next candidate (seed, refinement, tuning step or fix)."""

from __future__ import annotations

import hashlib
import time

from langgraph.runtime import Runtime

from graph.context import Context
from graph.records import Attempt, Candidate, CodeMode, CompileReport
from graph.reducers import usage_of
from graph.stages import StageSpec
from graph.state import StageState, StageUpdate
from nodes.common import brief, incumbent, log, recent, settings_of, thread_of
from nodes.deps import Deps
from nodes.models import BudgetExceeded, CodeReply, CodeRequest, ModelFormatError, ModelUnavailableError
from tools import autotune


def wants_fix(state: StageState, fix_budget: int) -> bool:
    last = (state.get("attempts") or [None])[-1]
    return (
        last is not None
        and not last.verified
        and last.diagnosis is not None
        and bool(last.candidate.source)
        and 0 < state.get("fixes", 0) <= fix_budget
    )


def autotune_variant(spec: StageSpec, state: StageState, req: CodeRequest) -> CodeReply | None:
    """Tiling, before the model is asked: one variant per config of each `@triton.autotune` kernel
    of the kernel that entered the stage, that config alone, so EGG's timer (not Triton's
    autotuner, inside the candidate) picks the config, and the report names it. Parallel branches
    take the configs in order; the sequential loop goes on with the untried ones, each applied
    to the best kernel so far (kernel by kernel). None when there is nothing (left) to sweep."""
    entry = state.get("entry")
    if spec.name != "tiling" or req.mode != "tune" or entry is None:
        return None
    variants = autotune.sweep(entry.candidate.source)
    if state.get("branch"):
        pending = variants[req.seed_index : req.seed_index + 1]
        base = entry
    else:
        tried = {str(p.get("autotune")) for p in req.tried}
        pending = [v for v in variants if f"{v[0]}#{v[1]}" not in tried]
        base = req.best or entry
    if not pending:
        return None
    kernel, index, config = pending[0]
    try:
        source = autotune.pin(base.candidate.source, kernel, config)
    except KeyError:  # the best kernel so far came from elsewhere: vary the entry kernel
        base = entry
        source = autotune.pin(entry.candidate.source, kernel, config)
    return CodeReply(
        source=source,
        origin="autotune-sweep",
        family=base.candidate.family,
        algorithm=base.candidate.algorithm,
        params={**base.candidate.params, "autotune": f"{kernel}#{index}"},
        note=f"@triton.autotune config {index} of `{kernel}` alone: {config}",
    )


def over_budget(state: StageState, run_seconds: float, now: float | None = None) -> str | None:
    """Why no further candidate fits the run's wall-time budget, or None. A candidate is not
    started when its jobs would end after the budget, judged by the slowest candidate so far."""
    used = (time.time() if now is None else now) - state.get("started_at", time.time())
    longest = max((a.seconds for a in state.get("attempts") or []), default=0.0)
    if used + longest <= run_seconds:
        return None
    why = f"run wall-time budget of {run_seconds:g} s exhausted"
    if used <= run_seconds:
        why += f": {used:.0f} s used and a candidate takes up to {longest:.0f} s here"
    return why


def make_code_node(spec: StageSpec, deps: Deps):
    def code(state: StageState, runtime: Runtime[Context]) -> StageUpdate:
        settings = settings_of(runtime)
        if state.get("halt"):
            return {"exhausted": True, "current": None}
        if settings.run_seconds and (over := over_budget(state, settings.run_seconds)):
            return {"halt": over, "exhausted": True, "current": None}
        base_mode = state.get("mode", "tune")
        fixing = wants_fix(state, settings.fix_budget)
        mode: CodeMode = "fix" if fixing else base_mode
        last = (state.get("attempts") or [None])[-1]
        desc = state["desc"]
        assert desc is not None, "a stage runs only after prepare described the task"
        req = CodeRequest(
            mode=mode,
            stage=brief(spec),
            task=state["task"],
            desc=desc,
            seed_index=state.get("seed_index", 0),
            n_seeds=state.get("n_seeds", 1),
            best=None if base_mode == "seed" else incumbent(state),
            failed=last if fixing else None,
            diagnosis=last.diagnosis if fixing and last is not None else None,
            advice=state.get("advice"),
            recent=recent(state, settings.recent_k),
            tried=[a.candidate.params for a in state.get("attempts") or [] if a.candidate.params],
            decisions=state.get("decisions") or [],
            iteration=state.get("iteration", 0),
            policy=settings.policy,
        )
        # Parallel branches (seeds, tuning variants) carry their index, so ids never collide.
        branch = state.get("seed_index", 0) if base_mode == "seed" or state.get("branch") else None
        ident = f"{spec.name}.{base_mode}{'' if branch is None else branch}.{req.iteration}"
        t0 = time.perf_counter()
        try:
            reply = autotune_variant(spec, state, req)
            if reply is None:
                models = deps.models(settings, thread_of(runtime))
                reply = models.code.write(req)
        except (ModelUnavailableError, BudgetExceeded) as e:
            log.warning("code.halt", stage=spec.name, iteration=req.iteration, reason=str(e))
            update: StageUpdate = {"halt": str(e), "exhausted": True, "current": None}
            if getattr(e, "usage", None) is not None:
                update["usage"] = usage_of(f"{spec.name}/code", e.usage)  # type: ignore[attr-defined]
            return update
        except ModelFormatError as e:
            # The reply was unusable: a failed attempt, recorded like any other.
            cand = Candidate(
                id=ident, source="", stage=spec.name, mode=mode, branch=branch, origin="unusable-reply"
            )
            att = Attempt(
                candidate=cand,
                compile=CompileReport(
                    ok=False, error_kind="model_format", error=f"unusable model reply: {e}"
                ),
            )
            log.warning("code.unusable_reply", stage=spec.name, iteration=req.iteration, error=str(e)[:200])
            spent = getattr(e, "usage", None)
            update = {"current": att}
            if spent is not None:
                update["usage"] = usage_of(f"{spec.name}/code", spent)
            return update
        usage = usage_of(
            f"{spec.name}/code", reply.usage.model_copy(update={"seconds": time.perf_counter() - t0})
        )
        if reply.unsupported:
            log.info("code.unsupported", stage=spec.name, reason=reply.unsupported)
            return {"unsupported": reply.unsupported, "exhausted": True, "current": None, "usage": usage}
        if reply.source is None:
            log.info("code.exhausted", stage=spec.name, mode=mode, iteration=req.iteration)
            return {"exhausted": True, "current": None, "usage": usage}
        digest = hashlib.sha256(reply.source.encode()).hexdigest()[:8]
        cand = reply.candidate(
            f"{ident}.{digest}",
            spec.name,
            mode=mode,
            branch=branch,
            origin=reply.origin or "step",
            parent_id=req.best.candidate.id if req.best else (last.candidate.id if fixing and last else None),
            prompt=reply.prompt,
        )
        log.info(
            "code",
            stage=spec.name,
            mode=mode,
            iteration=req.iteration,
            candidate=cand.id,
            origin=cand.origin,
        )
        update = {"current": Attempt(candidate=cand), "usage": usage}
        if not fixing:
            update["fixes"] = 0
        return update

    return code
