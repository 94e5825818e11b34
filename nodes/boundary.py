"""Stage entry, seed selection and the stage boundary.

The boundary reduces a stage to its final decision and the best verified kernel: nothing else of
the stage (attempts, advice, transcripts) reaches the parent graph or a later stage.
"""

from __future__ import annotations

from typing import Any

from langgraph.runtime import Runtime

from graph.context import Context
from graph.records import Attempt, BestKernel, ProfilerAdvice, StageDecision, TimingReport
from graph.reducers import beats, not_worth_tuning
from graph.stages import StageSpec
from graph.state import StageState, StageUpdate
from nodes.common import best_of, log, settings_of
from nodes.expert.hostgraph import HOST_BOUND_RATIO, replay_possible
from nodes.profiler import deterministic_advice


def make_start_node(spec: StageSpec):
    def start(state: StageState, runtime: Runtime[Context]) -> StageUpdate:
        settings = settings_of(runtime)
        entry = state.get("best")
        # A tuning stage whose entry kernel is already at the roofline cannot produce a change
        # that beats it beyond noise: it is skipped, and says so.
        at_roofline = (
            not_worth_tuning(entry) if spec.kind == "tune" and spec.name in settings.stages else None
        )
        skip = (
            spec.name not in settings.stages
            or (spec.kind == "tune" and entry is None)
            or bool(state.get("halt"))
            or at_roofline is not None
        )
        log.info(
            "stage.start",
            stage=spec.name,
            skip=skip,
            entry=entry.candidate.id if entry else None,
            at_roofline=at_roofline,
        )
        explore = spec.kind == "explore"
        return {
            "entry": entry,
            "stage_best": None,
            "mode": "seed" if explore else "tune",
            "n_seeds": settings.seeds if explore else settings.width_for(spec.name),
            "iteration": 0,
            "fixes": 0,
            # A tuning stage's first round is proposed from the entry kernel's profile (measured
            # in the stage before): the profiler's reading of it orders what the variants change.
            "advice": None if explore else _advice_on(entry),
            # A stage with no budget writes nothing (the algorithm stage still runs its seeds).
            "exhausted": skip or (not explore and settings.budget_for(spec.name) <= 0),
        }

    return start


def _advice_on(best: BestKernel | None) -> ProfilerAdvice | None:
    return deterministic_advice(best.profile) if best is not None and best.profile is not None else None


def _branch_order(a: Attempt) -> tuple[int, str]:
    return (a.candidate.branch or 0, a.candidate.id)


def _branch_results(state: StageState) -> list[Attempt]:
    """The parallel branches' attempts, in branch order."""
    return sorted(state.get("seed_results") or [], key=_branch_order)


def replay_reachable(t: TimingReport | None) -> TimingReport | None:
    """`t` as the seeds are compared when the mapping stage will replay a host-bound forward as
    one CUDA graph (nodes/expert/hostgraph.py): a forward whose call took HOST_BOUND_RATIO times
    its measured replay or more counts at its replay's time, what that stage reaches by removing
    the launches' host cost. Otherwise `t` as it is.

    On an H100 a channels-last ResNet block seed had 0.194 ms of kernels against the NCHW
    seeds' 0.285 ms, but its nine launches cost the host about as long: timed beside other jobs
    it measured 0.370 ms launched (its replay 0.204 ms), and in an agent run an NCHW seed won the
    algorithm stage at 0.329 ms, a GPU time no later stage can shorten. Used only where the
    replay can be offered (hostgraph.replay_possible: no random ops, a GPU), and only for the
    expert's own candidates (make_select_node): the replay figure is the runner's, which the
    judge's clock does not check, so a model's candidate must not move a choice with it. What
    is reported is never this figure: the replay variant is timed and judged like any other."""
    if t is None or not t.measured or not t.candidate_ms or not t.cudagraph_ms:
        return t
    if t.candidate_ms < HOST_BOUND_RATIO * t.cudagraph_ms:
        return t
    return t.model_copy(update={"candidate_ms": t.cudagraph_ms})


def select_seed(results: list[Attempt], replay: bool = False) -> BestKernel | None:
    """The best verified seed: the first in seed order, replaced only by one measurably faster
    (with `replay`, a host-bound seed at its replay's time: replay_reachable)."""

    def timing(t: TimingReport | None) -> TimingReport | None:
        return replay_reachable(t) if replay else t

    chosen: BestKernel | None = None
    for a in sorted(results, key=_branch_order):
        if not a.verified:
            continue
        if chosen is None or beats(timing(a.timing), timing(chosen.timing)):
            chosen = best_of(a)
    return chosen


def select_variant(entry: BestKernel, results: list[Attempt]) -> BestKernel | None:
    """The fastest verified variant that beats the entry kernel beyond noise, else None."""
    better = [a for a in results if a.verified and beats(a.timing, entry.timing)]
    if not better:
        return None
    return best_of(min(better, key=lambda a: (a.timing.candidate_ms, *_branch_order(a))))  # type: ignore[union-attr]


def make_select_node(spec: StageSpec):
    if spec.kind == "tune":
        return _make_tune_select_node(spec)

    def select(state: StageState, runtime: Runtime[Context]) -> StageUpdate:
        results = _branch_results(state)
        settings = settings_of(runtime)
        # the expert's mapping stage offers the replay of a host-bound forward (a model's may
        # not), and a model's candidate could report any replay time (replay_reachable)
        replay = (
            settings.code_model == "expert"
            and "mapping" in settings.stages
            and replay_possible(state.get("desc"))
        )
        chosen = select_seed(results, replay)
        log.info(
            "select", stage=spec.name, seeds=len(results), chosen=chosen.candidate.id if chosen else None
        )
        return {
            "stage_best": chosen,
            "attempts": results,
            "mode": "refine",
            "iteration": 0,
            "fixes": 0,
            "advice": None,
            "exhausted": chosen is None or settings.budget_for(spec.name) <= 0,
        }

    return select


def _make_tune_select_node(spec: StageSpec):
    def select(state: StageState, runtime: Runtime[Context]) -> StageUpdate:
        settings = settings_of(runtime)
        results = _branch_results(state)
        entry = state["entry"]
        assert entry is not None, "a tuning stage runs only with a kernel to tune"
        chosen = select_variant(entry, results)
        proposed = sum(1 for a in results if a.candidate.mode == "tune")
        # Fewer variants than asked for: the code model has nothing further for this stage.
        exhausted = proposed < int(state.get("n_seeds") or 1) or proposed >= settings.budget_for(spec.name)
        log.info(
            "select",
            stage=spec.name,
            variants=len(results),
            chosen=chosen.candidate.id if chosen else None,
            exhausted=exhausted,
        )
        update: StageUpdate = {
            "attempts": results,
            "mode": "tune",
            "iteration": len(results),
            "fixes": 0,
            "exhausted": exhausted,
        }
        if chosen is not None:
            update["stage_best"] = chosen
            advice = _advice_on(chosen)
            if advice is not None:  # the next steps start from the winner's profile
                update["advice"] = advice
        return update

    return select


def _detail(a: Attempt) -> str:
    """The most specific reason an attempt failed."""
    if a.diagnosis is not None:
        return a.diagnosis.diagnosis[:200]
    if a.compile is not None and not a.compile.ok:
        return (a.compile.error or "")[:200]
    if a.check is not None and a.check.reasons:
        return "; ".join(a.check.reasons)[:200]
    return "no detail"


def _ms(b: BestKernel | None) -> str:
    if b is None or b.timing is None or not b.timing.measured or b.timing.candidate_ms is None:
        return "not timed"
    return f"{b.timing.candidate_ms:.4f} ms"


def _speedup(b: BestKernel | None) -> float | None:
    return b.timing.speedup_vs_eager if b is not None and b.timing is not None else None


def _param_diff(old: dict[str, Any], new: dict[str, Any]) -> str:
    keys = sorted(set(old) | set(new))
    parts = [f"{k}: {old.get(k)} -> {new.get(k)}" for k in keys if old.get(k) != new.get(k)]
    return ", ".join(parts) or "source only"


def decide_stage(spec: StageSpec, state: StageState, settings: Context) -> tuple[StageDecision, str | None]:
    """The stage's final decision (and a failure message when the stage ends the run)."""
    entry: BestKernel | None = state.get("entry")
    best: BestKernel | None = state.get("stage_best") or entry
    attempts: list[Attempt] = state.get("attempts") or []
    verified = [a for a in attempts if a.verified]
    screened = [a for a in attempts if a.screened]
    common = {
        "stage": spec.name,
        "attempts": len(attempts),
        "verified_attempts": len(verified),
        "screened_attempts": len(screened),
    }
    tally = f"{len(verified)}/{len(attempts)} verified" + (
        f", {len(screened)} timed and screened out unchecked" if screened else ""
    )
    if spec.name not in settings.stages:
        return StageDecision(
            outcome="skipped", changed="nothing", why="not among the requested stages", **common
        ), None
    if spec.kind == "tune" and entry is None:
        return StageDecision(
            outcome="skipped", changed="nothing", why="no verified kernel entered the stage", **common
        ), None
    if spec.kind == "explore":
        if best is None:
            why = (
                state.get("unsupported")
                or "; ".join(f"{a.candidate.origin}: {a.outcome} ({_detail(a)})" for a in attempts)
                or "no candidate was written"
            )
            if state.get("halt"):
                why = f"{state['halt']}; {why}"
            failure = (
                f"unsupported: {state['unsupported']}"
                if state.get("unsupported")
                else f"no seed passed verification: {why}"
            )
            return StageDecision(outcome="failed", changed="nothing", why=why, **common), failure
        seeds = "; ".join(
            f"{a.candidate.algorithm or a.candidate.origin} [{a.outcome}]"
            for a in attempts
            if a.candidate.stage == spec.name
        )
        timed = best.timing is not None and best.timing.measured
        rule = "fastest measured" if timed else "first verified in the expert's order (timing not measured)"
        decision = StageDecision(
            outcome="improved",
            changed=f"algorithm {best.candidate.algorithm or best.candidate.origin} ({best.candidate.family or 'family n/a'})",
            why=f"{rule}; tried: {seeds}",
            best_candidate_id=best.candidate.id,
            speedup_entry=None,
            speedup_exit=_speedup(best),
            params=best.candidate.params,
            **common,
        )
        return decision, None
    assert entry is not None and best is not None
    if best.candidate.id != entry.candidate.id:
        decision = StageDecision(
            outcome="improved",
            changed=_param_diff(entry.candidate.params, best.candidate.params),
            why=f"median {_ms(entry)} -> {_ms(best)} (noise {best.timing.noise or 0:.1%}), variants: {tally}",
            best_candidate_id=best.candidate.id,
            speedup_entry=_speedup(entry),
            speedup_exit=_speedup(best),
            params=best.candidate.params,
            **common,
        )
        return decision, None
    if settings.device != "cuda":
        why = f"timing needs a CUDA GPU: {len(verified)}/{len(attempts)} variants verified on CPU, none adopted without a measurement"
    elif attempts:
        timed = [a for a in verified + screened if a.timing and a.timing.measured]
        fastest = min((a.timing.candidate_ms for a in timed), default=None)
        why = (
            f"no variant beat the incumbent ({_ms(entry)}) by more than noise; fastest variant "
            f"{fastest:.4f} ms"
            if fastest is not None
            else "no variant verified"
        ) + f"; {tally}"
    elif spec.kind == "tune" and not_worth_tuning(entry):
        why = f"not tuned: {not_worth_tuning(entry)}"
    else:
        why = "the code model proposed no change for this stage"
    if state.get("halt"):
        why = f"{state['halt']}; {why}"
    decision = StageDecision(
        outcome="kept",
        changed="nothing",
        why=why,
        best_candidate_id=entry.candidate.id,
        speedup_entry=_speedup(entry),
        speedup_exit=_speedup(entry),
        params=entry.candidate.params,
        **common,
    )
    return decision, None


def make_boundary_node(spec: StageSpec):
    def boundary(state: StageState, runtime: Runtime[Context]) -> StageUpdate:
        decision, failure = decide_stage(spec, state, settings_of(runtime))
        log.info(
            "stage.decision",
            stage=spec.name,
            outcome=decision.outcome,
            changed=decision.changed,
            why=decision.why[:200],
        )
        update: StageUpdate = {"decisions": [decision], "failure": failure}
        if state.get("stage_best") is not None:
            update["best"] = state["stage_best"]
        return update

    return boundary


def make_seed_done_node():
    def seed_done(state: StageState) -> StageUpdate:
        attempts: list[Attempt] = state.get("attempts") or []
        verified = [a for a in attempts if a.verified]
        keep = verified[-1:] or attempts[-1:]
        return {"seed_results": keep}

    return seed_done
