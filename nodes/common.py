"""Small helpers shared by the node modules."""

from __future__ import annotations

import time
from typing import Any

import structlog

from graph.context import Context
from graph.records import Attempt, BestKernel
from graph.stages import StageSpec
from nodes.models import AttemptSummary, StageBrief

log = structlog.get_logger("egg")


def settings_of(state: dict[str, Any]) -> Context:
    return Context.from_dict(state.get("settings") or {})


def brief(spec: StageSpec) -> StageBrief:
    return StageBrief(
        name=spec.name,
        objective=spec.objective,
        may_change=list(spec.may_change),
        must_keep=list(spec.must_keep),
        principles=list(spec.principles),
    )


def recent(state: dict[str, Any], k: int) -> list[AttemptSummary]:
    return [AttemptSummary.of(a) for a in (state.get("attempts") or [])[-k:]]


def incumbent(state: dict[str, Any]) -> BestKernel | None:
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
