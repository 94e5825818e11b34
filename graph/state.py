"""Typed channels of the parent graph and of a stage subgraph.

The parent keeps only the task, the best verified kernel, one decision per stage and usage. A
stage's private channels (attempts, current candidate, advice, seed results) never cross the
stage boundary: the stage subgraph's output schema does not name them.
"""

from __future__ import annotations

import operator
from typing import Annotated, Any, TypedDict

from graph.records import (
    Attempt,
    BestKernel,
    ProfilerAdvice,
    ProfileReport,
    StageDecision,
    TaskDescription,
    TaskSpec,
    TimingReport,
    Usage,
)
from graph.reducers import first_set, keep_best, merge_decisions, merge_usage


class EggInput(TypedDict, total=False):
    task: TaskSpec
    task_path: str  # alternative to `task` (e.g. typed into Studio): the file is read by `prepare`
    settings: dict[str, Any]


class EggState(TypedDict, total=False):
    task: TaskSpec
    task_path: str
    settings: dict[str, Any]  # resolved Context, recorded so replays run with the same settings
    started_at: float
    desc: TaskDescription | None
    best: Annotated[BestKernel | None, keep_best]
    decisions: Annotated[list[StageDecision], merge_decisions]
    usage: Annotated[Usage, merge_usage]
    halt: Annotated[str | None, first_set]  # why the run stopped early (budget, endpoint down)
    status: str  # "running" | "verified" | "no_kernel" | "bad_input"
    failure: str | None
    final: TimingReport | None
    final_profile: ProfileReport | None


class StageInput(TypedDict, total=False):
    task: TaskSpec
    settings: dict[str, Any]
    started_at: float
    desc: TaskDescription | None
    best: BestKernel | None
    decisions: list[StageDecision]
    halt: str | None


class StageOutput(TypedDict, total=False):
    best: BestKernel | None
    decisions: list[StageDecision]
    usage: Usage
    halt: str | None
    failure: str | None


class StageState(TypedDict, total=False):
    # from the parent (read-only inside the stage)
    task: TaskSpec
    settings: dict[str, Any]
    started_at: float
    desc: TaskDescription | None
    best: Annotated[BestKernel | None, keep_best]
    decisions: Annotated[list[StageDecision], merge_decisions]
    halt: Annotated[str | None, first_set]
    # private to the stage
    entry: BestKernel | None  # the kernel that entered the stage
    stage_best: BestKernel | None
    mode: str  # "seed" | "refine" | "tune" (a failed attempt is repaired in "fix" mode)
    seed_index: int
    n_seeds: int
    branch: bool  # inside a parallel branch (a seed or a tuning variant): one proposal + its fixes
    current: Attempt | None
    attempts: Annotated[list[Attempt], operator.add]
    seed_results: Annotated[list[Attempt], operator.add]
    iteration: int
    fixes: int
    advice: ProfilerAdvice | None
    exhausted: bool
    unsupported: Annotated[str | None, first_set]
    usage: Annotated[Usage, merge_usage]
    failure: str | None


class SeedInput(TypedDict, total=False):
    task: TaskSpec
    settings: dict[str, Any]
    started_at: float
    desc: TaskDescription | None
    decisions: list[StageDecision]
    seed_index: int
    n_seeds: int
    mode: str  # "seed" or "tune"
    # tuning variants: the kernel they revise and the profiler's advice on it
    entry: BestKernel | None
    advice: ProfilerAdvice | None


class SeedOutput(TypedDict, total=False):
    seed_results: list[Attempt]
    usage: Usage
    halt: str | None
    unsupported: str | None
