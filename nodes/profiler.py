"""The profiler node: a profile report from measurements, then the profiler role's advice."""

from __future__ import annotations

import time

from langgraph.runtime import Runtime

from graph.context import Context
from graph.records import ProfilerAdvice, ProfileReport
from graph.reducers import usage_of
from graph.stages import StageSpec
from graph.state import StageState, StageUpdate
from nodes.common import brief, incumbent, log, recent, settings_of, thread_of
from nodes.deps import Deps
from nodes.models import BudgetExceeded, ModelFormatError, ModelUnavailableError, ProfilerRequest


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
            t0 = time.perf_counter()
            try:
                advice, usage = deps.models(settings, thread_of(runtime)).profiler.advise(req)
                update["usage"] = usage_of(
                    f"{spec.name}/profiler", usage.model_copy(update={"seconds": time.perf_counter() - t0})
                )
            except ModelFormatError as e:
                log.warning("profiler.unusable_reply", stage=spec.name, error=str(e)[:200])
            except (ModelUnavailableError, BudgetExceeded) as e:
                update["halt"] = str(e)
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
