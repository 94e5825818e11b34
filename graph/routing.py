"""Pure routing functions: where the graph goes after each node."""

from __future__ import annotations

from collections.abc import Callable

from graph.stages import STAGE_ORDER
from graph.state import EggState, StageState


def route_after_start(state: StageState) -> str:
    return "boundary" if state.get("exhausted") else "code"


def route_after_code(state: StageState) -> str:
    att = state.get("current")
    if state.get("exhausted") or att is None:
        return "finish"
    if att.compile is not None:  # the reply was unusable: already a failed attempt
        return "decide"
    # A GPU evaluates a candidate in one job (compile, check, time); the CPU steps one by one.
    return "evaluate" if state["task"].device == "cuda" else "compile"


def route_after_evaluate(state: StageState) -> str:
    """Verified, or screened out unchecked (timed, not faster: no failure to debug): profile it."""
    att = state["current"]
    if att is None or att.compile is None or not att.compile.ok:
        return "debug"
    return "profile" if att.verified or att.screened else "debug"


def route_after_compile(state: StageState) -> str:
    att = state["current"]
    return "check" if att is not None and att.compile is not None and att.compile.ok else "debug"


def route_after_check(state: StageState) -> str:
    att = state["current"]
    return "time" if att is not None and att.check is not None and att.check.accepted else "debug"


def route_after_decide(state: StageState) -> str:
    return "finish" if state.get("exhausted") or state.get("halt") else "code"


def route_after_prepare(state: EggState) -> str:
    # bad input, or the machine could not describe the task: nothing to optimize
    return "finalize" if state.get("status") in ("bad_input", "no_kernel") else STAGE_ORDER[0]


def next_after_stage(stage: str) -> Callable[[EggState], str]:
    """After a stage: the next stage, or finalize when the run cannot usefully go on."""
    i = STAGE_ORDER.index(stage)
    nxt = STAGE_ORDER[i + 1] if i + 1 < len(STAGE_ORDER) else "finalize"

    def route(state: EggState) -> str:
        if state.get("halt") or state.get("best") is None:
            return "finalize"
        return nxt

    route.__name__ = f"route_after_{stage}"
    return route
