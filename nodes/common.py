"""Small helpers shared by the node modules."""

from __future__ import annotations

import time

from langgraph.runtime import Runtime

from graph.context import Context
from graph.logs import get_logger
from graph.records import Attempt, BestKernel
from graph.stages import StageSpec
from graph.state import StageState
from nodes.models import AttemptSummary, StageBrief

log = get_logger("egg")


def settings_of(runtime: Runtime[Context]) -> Context:
    """The run's settings: the context the run was started with (defaults when it was given none)."""
    ctx = runtime.context
    if isinstance(ctx, Context):
        return ctx
    if ctx is None:
        return Context()
    if isinstance(ctx, dict):
        return Context.from_dict(ctx)
    raise TypeError(f"the run's context must be a graph.context.Context, not {type(ctx).__name__}")


def thread_of(runtime: Runtime[Context]) -> str:
    """The thread this node runs in ("adhoc" without a checkpointer): keys the models' records."""
    info = runtime.execution_info
    return (info.thread_id if info is not None else None) or "adhoc"


def brief(spec: StageSpec) -> StageBrief:
    return StageBrief(
        name=spec.name,
        objective=spec.objective,
        may_change=list(spec.may_change),
        must_keep=list(spec.must_keep),
        principles=list(spec.principles),
    )


def recent(state: StageState, k: int) -> list[AttemptSummary]:
    return [AttemptSummary.of(a) for a in (state.get("attempts") or [])[-k:]]


def incumbent(state: StageState) -> BestKernel | None:
    return state.get("stage_best") or state.get("entry")


def best_of(a: Attempt) -> BestKernel:
    assert a.check is not None
    return BestKernel(
        candidate=a.candidate, check=a.check, timing=a.timing, profile=a.profile, compile=a.compile
    )


class Stopwatch:
    def __enter__(self) -> Stopwatch:
        self.t0 = time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        self.seconds = time.perf_counter() - self.t0
