"""Tool nodes: deterministic steps that compile, check, time and profile the current candidate.

No model chooses to call these: the graph's edges do. Each runs its job in a fresh sandbox
process through the toolbox; a kernel's failure comes back as a report in state.
"""

from __future__ import annotations

from langgraph.runtime import Runtime

from graph.context import Context
from graph.records import RoleUsage
from graph.reducers import usage_of
from graph.stages import StageSpec
from graph.state import StageState, StageUpdate
from nodes.common import Stopwatch, log, settings_of
from nodes.deps import Deps


def _tools_usage(spec: StageSpec, seconds: float):
    return usage_of(f"{spec.name}/tools", RoleUsage(calls=1, seconds=seconds))


def make_compile_node(spec: StageSpec, deps: Deps):
    def compile_(state: StageState, runtime: Runtime[Context]) -> StageUpdate:
        att = state["current"]
        settings = settings_of(runtime)
        with Stopwatch() as sw:
            report = deps.toolbox.compile(
                state["task"], att.candidate.source, policy=settings.policy, tolerance=settings.tolerance
            )
        log.info(
            "compile",
            stage=spec.name,
            iteration=state.get("iteration", 0),
            candidate=att.candidate.id,
            ok=report.ok,
            error_kind=report.error_kind,
            line=report.error_line,
        )
        return {
            "current": att.model_copy(update={"compile": report}),
            "usage": _tools_usage(spec, sw.seconds),
        }

    return compile_


def make_check_node(spec: StageSpec, deps: Deps):
    def check(state: StageState, runtime: Runtime[Context]) -> StageUpdate:
        att = state["current"]
        settings = settings_of(runtime)
        with Stopwatch() as sw:
            report = deps.toolbox.check(
                state["task"], att.candidate.source, policy=settings.policy, tolerance=settings.tolerance
            )
        log.info(
            "check",
            stage=spec.name,
            iteration=state.get("iteration", 0),
            candidate=att.candidate.id,
            accepted=report.accepted,
            reasons=report.reasons[:3],
            max_abs_err=report.max_abs_err,
        )
        return {"current": att.model_copy(update={"check": report}), "usage": _tools_usage(spec, sw.seconds)}

    return check


def make_time_node(spec: StageSpec, deps: Deps):
    def time_(state: StageState, runtime: Runtime[Context]) -> StageUpdate:
        att = state["current"]
        settings = settings_of(runtime)
        with Stopwatch() as sw:
            report = deps.toolbox.time(
                state["task"], att.candidate.source, policy=settings.policy, tolerance=settings.tolerance
            )
        log.info(
            "time",
            stage=spec.name,
            iteration=state.get("iteration", 0),
            candidate=att.candidate.id,
            measured=report.measured,
            candidate_ms=report.candidate_ms,
            eager_ms=report.eager_ms,
            reason=report.reason,
        )
        return {"current": att.model_copy(update={"timing": report}), "usage": _tools_usage(spec, sw.seconds)}

    return time_


def make_evaluate_node(spec: StageSpec, deps: Deps):
    """On a GPU: compile, check and time the candidate in one sandbox job (one judge process, the
    task loaded once), and record all three reports in one update."""

    def evaluate(state: StageState, runtime: Runtime[Context]) -> StageUpdate:
        att = state["current"]
        settings = settings_of(runtime)
        with Stopwatch() as sw:
            ev = deps.toolbox.evaluate(
                state["task"], att.candidate.source, policy=settings.policy, tolerance=settings.tolerance
            )
        t = ev.timing
        log.info(
            "evaluate",
            stage=spec.name,
            iteration=state.get("iteration", 0),
            candidate=att.candidate.id,
            compiled=ev.compile.ok,
            error_kind=ev.compile.error_kind,
            accepted=None if ev.check is None else ev.check.accepted,
            reasons=[] if ev.check is None else ev.check.reasons[:3],
            candidate_ms=None if t is None else t.candidate_ms,
            eager_ms=None if t is None else t.eager_ms,
        )
        update = {"compile": ev.compile, "check": ev.check, "timing": ev.timing}
        return {"current": att.model_copy(update=update), "usage": _tools_usage(spec, sw.seconds)}

    return evaluate
