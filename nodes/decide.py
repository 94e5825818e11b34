"""The decide node: records the attempt, applies the stage's acceptance rule, and says whether to go on."""

from __future__ import annotations

from typing import Any

from graph.context import Context
from graph.records import Attempt
from graph.reducers import beats
from graph.stages import StageSpec
from nodes.common import best_of, incumbent, log, settings_of


def proposals(attempts: list[Attempt], mode: str) -> int:
    """Attempts that were new proposals of this mode (repairs of a failed attempt are not counted)."""
    return sum(1 for a in attempts if a.candidate.origin.split(":", 1)[0] == mode)


def out_of_budget(
    spec: StageSpec, mode: str, settings: Context, attempts: list[Attempt], fixes: int, branch: bool = False
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
    def decide(state: dict[str, Any]) -> dict[str, Any]:
        settings = settings_of(state)
        att: Attempt = state["current"]
        mode = state.get("mode", "tune")
        iteration = state.get("iteration", 0) + 1
        update: dict[str, Any] = {"attempts": [att], "iteration": iteration}
        verdict = "failed"
        if att.verified:
            update["fixes"] = 0
            inc = incumbent(state)
            if inc is None:
                update["stage_best"] = best_of(att)
                verdict = "first verified"
            elif beats(att.timing, inc.timing):
                update["stage_best"] = best_of(att)
                verdict = f"faster: {att.timing.candidate_ms:.4f} ms < {inc.timing.candidate_ms:.4f} ms"
            elif att.timing is None or not att.timing.measured:
                verdict = "verified, not timed: incumbent kept"
            else:
                verdict = f"not faster beyond noise: {att.timing.candidate_ms:.4f} ms vs {_ms(inc)}"
        loop_attempts = [a for a in [*(state.get("attempts") or []), att] if a.candidate.stage == spec.name]
        if mode != "seed":
            loop_attempts = [a for a in loop_attempts if not a.candidate.origin.startswith("seed")]
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


def _ms(b) -> str:
    t = b.timing
    return (
        f"{t.candidate_ms:.4f} ms"
        if t is not None and t.measured and t.candidate_ms is not None
        else "not timed"
    )
