"""The decide node: records the attempt, applies the stage's acceptance rule, and says whether to go on."""

from __future__ import annotations

from langgraph.runtime import Runtime

from graph.context import Context
from graph.records import Attempt, LoopMode, TimingReport
from graph.reducers import beats
from graph.stages import StageSpec
from graph.state import StageState, StageUpdate
from nodes.common import best_of, incumbent, log, settings_of


def proposals(attempts: list[Attempt], mode: LoopMode) -> int:
    """Attempts that were new proposals of this mode (repairs of a failed attempt are not counted)."""
    return sum(1 for a in attempts if a.candidate.mode == mode)


def out_of_budget(
    spec: StageSpec,
    mode: LoopMode,
    settings: Context,
    attempts: list[Attempt],
    fixes: int,
    branch: bool = False,
) -> bool:
    last = attempts[-1]
    fix_pending = not last.verified and bool(last.candidate.source) and 0 < fixes <= settings.fix_budget
    if mode == "seed" or branch:  # a parallel branch: one proposal, then its repairs
        return last.verified or not fix_pending
    budget = settings.budget_for(spec.name)
    # A hard cap as well, so a model that keeps failing cannot loop for ever.
    hard_cap = (budget + 1) * (settings.fix_budget + 1)
    return len(attempts) >= hard_cap or (proposals(attempts, mode) >= budget and not fix_pending)


def make_decide_node(spec: StageSpec):
    def decide(state: StageState, runtime: Runtime[Context]) -> StageUpdate:
        settings = settings_of(runtime)
        att = state["current"]
        assert att is not None
        mode = state.get("mode", "tune")
        iteration = state.get("iteration", 0) + 1
        update: StageUpdate = {"attempts": [att], "iteration": iteration}
        verdict = "failed"
        if att.screened:
            # timed first and not faster than the incumbent: not a failure, nothing to repair
            update["fixes"] = 0
            verdict = f"screened out: {att.screened}"
        elif att.verified:
            update["fixes"] = 0
            inc = incumbent(state)
            if inc is None:
                update["stage_best"] = best_of(att)
                verdict = "first verified"
            elif beats(att.timing, inc.timing):
                update["stage_best"] = best_of(att)
                verdict = f"faster: {_ms(att.timing)} < {_ms(inc.timing)}"
            elif att.timing is None or not att.timing.measured:
                verdict = "verified, not timed: incumbent kept"
            else:
                verdict = f"not faster beyond noise: {_ms(att.timing)} vs {_ms(inc.timing)}"
        loop_attempts = [a for a in [*(state.get("attempts") or []), att] if a.candidate.stage == spec.name]
        if mode != "seed":
            loop_attempts = [a for a in loop_attempts if a.candidate.mode != "seed"]
        fixes = update.get("fixes", state.get("fixes", 0))
        if out_of_budget(spec, mode, settings, loop_attempts, fixes, bool(state.get("branch"))):
            update["exhausted"] = True
        log.info(
            "decide",
            stage=spec.name,
            candidate=att.candidate.id,
            outcome=att.outcome,
            verdict=verdict,
            iteration=iteration,
        )
        return update

    return decide


def _ms(t: TimingReport | None) -> str:
    return (
        f"{t.candidate_ms:.4f} ms"
        if t is not None and t.measured and t.candidate_ms is not None
        else "not timed"
    )
