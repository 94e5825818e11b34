"""The debugger node: turns a compile error, runtime error or mismatch into a fix plan."""

from __future__ import annotations

from langgraph.runtime import Runtime

from graph.context import Context
from graph.records import Attempt, Diagnosis
from graph.stages import StageSpec
from graph.state import StageState, StageUpdate
from nodes.common import ask_role, brief, log, recent, settings_of, thread_of
from nodes.deps import Deps
from nodes.models import DebuggerRequest


def deterministic_diagnosis(att: Attempt) -> Diagnosis:
    if att.compile is not None and not att.compile.ok:
        where = f" at line {att.compile.error_line}" if att.compile.error_line else ""
        return Diagnosis(
            rule=f"compile.{att.compile.error_kind or 'error'}",
            diagnosis=f"compilation failed{where}: {(att.compile.error or '')[:400]}",
            fix_plan="return to the last verified kernel and apply a smaller change",
            source="deterministic",
        )
    reasons = att.check.reasons if att.check is not None else []
    return Diagnosis(
        rule=(reasons[0].split(":", 1)[0] if reasons else "check"),
        diagnosis="; ".join(reasons)[:600] or "rejected by the checker",
        fix_plan="return to the last verified kernel and apply a smaller change",
        source="deterministic",
    )


def make_debug_node(spec: StageSpec, deps: Deps):
    def debug(state: StageState, runtime: Runtime[Context]) -> StageUpdate:
        att = state["current"]
        assert att is not None
        settings = settings_of(runtime)
        update: StageUpdate = {"fixes": state.get("fixes", 0) + 1}
        diagnosis = deterministic_diagnosis(att)
        if att.candidate.source:  # an unusable model reply has no code to debug
            req = DebuggerRequest(
                stage=brief(spec), desc=state["desc"], attempt=att, recent=recent(state, settings.recent_k)
            )
            models = deps.models(settings, thread_of(runtime))
            diagnosis = ask_role(spec, "debugger", update, lambda: models.debugger.diagnose(req), diagnosis)
        log.info(
            "debug",
            stage=spec.name,
            iteration=state.get("iteration", 0),
            candidate=att.candidate.id,
            rule=diagnosis.rule,
            source=diagnosis.source,
        )
        update["current"] = att.model_copy(update={"diagnosis": diagnosis})
        return update

    return debug
