"""The profiler node: a profile report from measurements, then the profiler role's advice."""

from __future__ import annotations

from langgraph.runtime import Runtime

from graph.context import Context
from graph.records import ProfilerAdvice, ProfileReport
from graph.stages import StageSpec
from graph.state import StageState, StageUpdate
from nodes.common import ask_role, brief, incumbent, log, recent, settings_of, thread_of
from nodes.deps import Deps
from nodes.models import ProfilerRequest


def deterministic_advice(profile: ProfileReport) -> ProfilerAdvice:
    """Advice read straight off the profile report: used when no model advice is available."""
    return ProfilerAdvice(
        bottleneck=profile.bottleneck,
        evidence=list(profile.evidence),
        plan=profile.suggestion or "no measurement to act on; keep the incumbent's parameters",
        source="deterministic",
    )


def make_profile_node(spec: StageSpec, deps: Deps):
    def profile(state: StageState, runtime: Runtime[Context]) -> StageUpdate:
        att = state["current"]
        assert att is not None
        settings = settings_of(runtime)
        report = deps.toolbox.profile(state["desc"], att.timing, att.compile)
        update: StageUpdate = {}
        advice = deterministic_advice(report)
        # Without a measurement there is nothing for a model to reason about: skip the call.
        if att.timing is not None and att.timing.measured:
            req = ProfilerRequest(
                stage=brief(spec),
                desc=state["desc"],
                attempt=att.model_copy(update={"profile": report}),
                profile=report,
                best=incumbent(state),
                recent=recent(state, settings.recent_k),
            )
            models = deps.models(settings, thread_of(runtime))
            advice = ask_role(spec, "profiler", update, lambda: models.profiler.advise(req), advice)
        log.info(
            "profile",
            stage=spec.name,
            iteration=state.get("iteration", 0),
            candidate=att.candidate.id,
            bottleneck=advice.bottleneck,
            roofline=report.roofline_fraction,
            advice_source=advice.source,
        )
        update["current"] = att.model_copy(update={"profile": report, "advice": advice})
        update["advice"] = advice
        return update

    return profile
