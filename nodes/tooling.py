"""Tool nodes: deterministic steps that compile, check, time or (on a GPU) evaluate the current
candidate.

No model chooses to call these: the graph's edges do. Each runs its job in a fresh sandbox
process through the toolbox; a kernel's failure comes back as a report in state.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from langgraph.runtime import Runtime

from graph.context import Context
from graph.records import RoleUsage
from graph.reducers import usage_of
from graph.stages import StageSpec
from graph.state import StageState, StageUpdate
from nodes.common import Stopwatch, incumbent, log, settings_of
from nodes.deps import Deps


def _tools_usage(spec: StageSpec, seconds: float):
    return usage_of(f"{spec.name}/tools", RoleUsage(calls=1, seconds=seconds))


def _make_tool_node(
    spec: StageSpec,
    deps: Deps,
    tool: str,
    reports: Callable[[Any], dict[str, Any]],
    fields: Callable[[Any], dict[str, Any]],
    extra: Callable[[StageState], dict[str, Any]] = lambda state: {},
):
    """A node that runs `Toolbox.<tool>` on the current candidate (with `extra(state)` as more
    keyword arguments), logs `fields(result)` and writes `reports(result)` (the Attempt fields it
    fills) in one update."""

    def node(state: StageState, runtime: Runtime[Context]) -> StageUpdate:
        att = state["current"]
        settings = settings_of(runtime)
        with Stopwatch() as sw:
            result = getattr(deps.toolbox, tool)(
                state["task"],
                att.candidate.source,
                policy=settings.policy,
                tolerance=settings.tolerance,
                **extra(state),
            )
        log.info(
            tool,
            stage=spec.name,
            iteration=state.get("iteration", 0),
            candidate=att.candidate.id,
            **fields(result),
        )
        update = {**reports(result), "seconds": round(att.seconds + sw.seconds, 3)}
        return {"current": att.model_copy(update=update), "usage": _tools_usage(spec, sw.seconds)}

    node.__name__ = tool
    return node


def make_compile_node(spec: StageSpec, deps: Deps):
    return _make_tool_node(
        spec,
        deps,
        "compile",
        lambda r: {"compile": r},
        lambda r: {"ok": r.ok, "error_kind": r.error_kind, "line": r.error_line},
    )


def make_check_node(spec: StageSpec, deps: Deps):
    return _make_tool_node(
        spec,
        deps,
        "check",
        lambda r: {"check": r},
        lambda r: {"accepted": r.accepted, "reasons": r.reasons[:3], "max_abs_err": r.max_abs_err},
    )


def make_time_node(spec: StageSpec, deps: Deps):
    return _make_tool_node(
        spec,
        deps,
        "time",
        lambda r: {"timing": r},
        lambda r: {
            "measured": r.measured,
            "candidate_ms": r.candidate_ms,
            "eager_ms": r.eager_ms,
            "reason": r.reason,
        },
    )


def screen_for(state: StageState) -> dict[str, Any]:
    """The incumbent's timing to screen against, when there is a measured incumbent: a tuning
    variant (against the stage's entry kernel), a refinement or a repair. Algorithm seeds have
    none and are always checked."""
    inc = incumbent(state)
    timing = inc.timing if inc is not None else None
    return {"screen": timing} if timing is not None and timing.measured and timing.candidate_ms else {}


def make_evaluate_node(spec: StageSpec, deps: Deps):
    """On a GPU: compile, check and time the candidate in one sandbox job (one judge process, the
    task loaded once), and record all three reports in one update. With a measured incumbent the
    job screens: it times first and checks only a contender (Toolbox.evaluate)."""
    return _make_tool_node(
        spec,
        deps,
        "evaluate",
        lambda ev: {"compile": ev.compile, "check": ev.check, "timing": ev.timing, "screened": ev.screened},
        lambda ev: {
            "compiled": ev.compile.ok,
            "error_kind": ev.compile.error_kind,
            "accepted": None if ev.check is None else ev.check.accepted,
            "reasons": [] if ev.check is None else ev.check.reasons[:3],
            "screened": ev.screened is not None,
            "candidate_ms": None if ev.timing is None else ev.timing.candidate_ms,
            "eager_ms": None if ev.timing is None else ev.timing.eager_ms,
        },
        screen_for,
    )
