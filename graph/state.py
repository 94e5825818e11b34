"""Typed channels of the parent graph and of a stage subgraph, and the partial updates nodes return.

The parent keeps only the task, the best verified kernel, one decision per stage and usage. A
stage's private channels (attempts, current candidate, advice, seed results) never cross the
stage boundary: the stage subgraph's output schema does not name them.

Run settings are not a channel a node reads: every node takes them from `Runtime[Context]`.
`prepare` records the resolved settings in `settings` so that `egg replay`/`egg resume` can run a
thread again with exactly the context it was started with, and reports can show them.

`typing_extensions.TypedDict` (not `typing.TypedDict`): pydantic builds the Studio input/output
JSON schemas from these classes, and refuses `typing.TypedDict` on Python < 3.12.
"""

from __future__ import annotations

import operator
from typing import Annotated, Any

from typing_extensions import TypedDict

from graph.records import (
    Attempt,
    BestKernel,
    LoopMode,
    ProfilerAdvice,
    ProfileReport,
    RunStatus,
    StageDecision,
    TaskDescription,
    TaskSpec,
    TimingReport,
    Usage,
)
from graph.reducers import first_set, keep_best, merge_decisions, merge_usage


class EggInput(TypedDict, total=False):
    """What a run is started with; the settings come as the run's context (`Context`)."""

    task: TaskSpec
    task_path: str  # alternative to `task` (e.g. typed into Studio): the file is read by `prepare`
    out_dir: str  # where the CLI writes the run's outputs; `egg resume` writes there again


class EggOutput(TypedDict, total=False):
    """What a finished run returns (Studio's output schema)."""

    task: TaskSpec
    settings: dict[str, Any]
    status: RunStatus
    failure: str | None
    best: BestKernel | None
    decisions: list[StageDecision]
    usage: Usage
    final: TimingReport | None
    final_profile: ProfileReport | None
    halt: str | None  # why the run stopped early (a budget), also when it verified


class EggState(TypedDict, total=False):
    task: TaskSpec
    task_path: str
    out_dir: str
    settings: dict[str, Any]  # the run's context as resolved by `prepare` (a record, not an input)
    started_at: float
    desc: TaskDescription | None
    best: Annotated[BestKernel | None, keep_best]
    decisions: Annotated[list[StageDecision], merge_decisions]
    usage: Annotated[Usage, merge_usage]
    halt: Annotated[str | None, first_set]  # why the run stopped early (budget, endpoint down)
    status: RunStatus
    failure: str | None
    final: TimingReport | None
    final_profile: ProfileReport | None


class EggUpdate(TypedDict, total=False):
    """A partial update of the parent state (what `prepare` and `finalize` return)."""

    task: TaskSpec
    settings: dict[str, Any]
    started_at: float
    desc: TaskDescription | None
    status: RunStatus
    failure: str | None
    final: TimingReport | None
    final_profile: ProfileReport | None


class StageInput(TypedDict, total=False):
    task: TaskSpec
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
    started_at: float
    desc: TaskDescription | None
    best: Annotated[BestKernel | None, keep_best]
    decisions: Annotated[list[StageDecision], merge_decisions]
    halt: Annotated[str | None, first_set]
    # private to the stage
    entry: BestKernel | None  # the kernel that entered the stage
    stage_best: BestKernel | None
    mode: LoopMode  # a failed attempt is repaired inside the loop (the code role's "fix" mode)
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


class StageUpdate(TypedDict, total=False):
    """A partial update of a stage's state: what every node inside a stage returns."""

    best: BestKernel | None
    decisions: list[StageDecision]
    halt: str | None
    entry: BestKernel | None
    stage_best: BestKernel | None
    mode: LoopMode
    n_seeds: int
    branch: bool
    current: Attempt | None
    attempts: list[Attempt]
    seed_results: list[Attempt]
    iteration: int
    fixes: int
    advice: ProfilerAdvice | None
    exhausted: bool
    unsupported: str | None
    usage: Usage
    failure: str | None


class SeedInput(TypedDict, total=False):
    task: TaskSpec
    started_at: float
    desc: TaskDescription | None
    decisions: list[StageDecision]
    seed_index: int
    n_seeds: int
    mode: LoopMode  # "seed" or "tune"
    # tuning variants: the kernel they revise and the profiler's advice on it
    entry: BestKernel | None
    advice: ProfilerAdvice | None


class SeedOutput(TypedDict, total=False):
    seed_results: list[Attempt]
    usage: Usage
    halt: str | None
    unsupported: str | None
