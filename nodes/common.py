"""Small helpers shared by the node modules."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

from langgraph.runtime import Runtime

from graph.context import Context
from graph.logs import get_logger
from graph.records import Attempt, BestKernel, RoleUsage
from graph.reducers import usage_of
from graph.stages import StageSpec
from graph.state import StageState, StageUpdate
from nodes.models import AttemptSummary, BudgetExceeded, ModelFormatError, ModelUnavailableError, StageBrief

log = get_logger("egg")


T = TypeVar("T")


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


def ask_role(
    spec: StageSpec, role: str, update: StageUpdate, call: Callable[[], tuple[T, RoleUsage]], fallback: T
) -> T:
    """Ask a role model (`call`), recording its usage in `update`. An unusable reply keeps
    `fallback` (the deterministic answer); an unavailable model or a spent budget also sets
    `update["halt"]`, so the stage ends after this step."""
    t0 = time.perf_counter()
    try:
        result, usage = call()
    except ModelFormatError as e:
        log.warning(f"{role}.unusable_reply", stage=spec.name, error=str(e)[:200])
        return fallback
    except (ModelUnavailableError, BudgetExceeded) as e:
        update["halt"] = str(e)
        return fallback
    update["usage"] = usage_of(
        f"{spec.name}/{role}", usage.model_copy(update={"seconds": time.perf_counter() - t0})
    )
    return result
