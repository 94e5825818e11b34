"""The role interfaces every model (built-in expert, LLM, scripted fake) implements.

The graph's code, profiler and debugger nodes build a request, call the role's model, and
turn the reply into state. A model never runs a kernel: it only writes source or advice.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field

from graph.records import (
    Attempt,
    BestKernel,
    Candidate,
    CodeMode,
    Diagnosis,
    Policy,
    ProfilerAdvice,
    ProfileReport,
    RoleUsage,
    StageDecision,
    TaskDescription,
    TaskSpec,
)


class StageBrief(BaseModel):
    """What a model is told about the stage it works in (a view of graph.stages.StageSpec)."""

    model_config = ConfigDict(frozen=True)

    name: str  # "algorithm" | "mapping" | "tiling" | "memory"
    objective: str
    may_change: list[str]
    must_keep: list[str]
    principles: list[str] = Field(default_factory=list)


class AttemptSummary(BaseModel):
    """A compact line about an earlier attempt: what was tried and what came of it."""

    model_config = ConfigDict(frozen=True)

    candidate_id: str
    origin: str
    mode: CodeMode = "seed"  # as Candidate.mode (the default serves summaries built by hand)
    params: dict[str, Any] = Field(default_factory=dict)
    outcome: str
    candidate_ms: float | None = None
    speedup_vs_eager: float | None = None
    note: str | None = None

    @classmethod
    def of(cls, a: Attempt) -> AttemptSummary:
        t = a.timing
        note = None
        if a.diagnosis is not None:
            note = a.diagnosis.diagnosis[:300]
        elif a.check is not None and a.check.reasons:
            note = "; ".join(a.check.reasons)[:300]
        elif a.compile is not None and a.compile.error:
            note = a.compile.error[:300]
        return cls(
            candidate_id=a.candidate.id,
            mode=a.candidate.mode,
            origin=a.candidate.origin,
            params=a.candidate.params,
            outcome=a.outcome,
            candidate_ms=t.candidate_ms if t and t.measured else None,
            speedup_vs_eager=t.speedup_vs_eager if t else None,
            note=note,
        )


class CodeRequest(BaseModel):
    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)

    mode: CodeMode
    stage: StageBrief
    task: TaskSpec
    desc: TaskDescription
    # Which parallel branch (0..n_seeds-1): the seed in "seed" mode, the variant of a tuning
    # round in "tune" mode (variant i makes the i-th most promising change).
    seed_index: int = 0
    n_seeds: int = 1
    best: BestKernel | None = None  # the kernel entering this step (None while seeding)
    failed: Attempt | None = None  # in "fix" mode: the attempt to repair
    diagnosis: Diagnosis | None = None  # in "fix" mode
    advice: ProfilerAdvice | None = None  # the profiler's latest advice, if any
    recent: list[AttemptSummary] = Field(default_factory=list)  # last K attempts of this step
    # Parameters of every attempt of this stage so far (not shown to LLMs: `recent` is).
    tried: list[dict[str, Any]] = Field(default_factory=list)
    decisions: list[StageDecision] = Field(default_factory=list)  # earlier stages' decisions
    iteration: int = 0
    # The PyTorch-compute policy the checker will apply ("strict" forbids library matmul/conv).
    policy: Policy = "mixed"


class CodeReply(BaseModel):
    model_config = ConfigDict(frozen=True)

    # None means "nothing further to propose in this step" (the stage then stops).
    source: str | None
    origin: str = ""
    family: str | None = None
    algorithm: str | None = None
    params: dict[str, Any] = Field(default_factory=dict)
    note: str = ""  # why this change
    # Set when the task cannot be handled at all (e.g. an op no family covers); the run then
    # ends without a kernel and the report quotes this.
    unsupported: str | None = None
    prompt: dict[str, str] | None = None
    usage: RoleUsage = Field(default_factory=RoleUsage)

    def candidate(self, id: str, stage: str, **fields: Any) -> Candidate:
        """This reply's kernel as a candidate record (`fields` set or override the rest)."""
        mine = {
            "source": self.source or "",
            "origin": self.origin,
            "family": self.family,
            "algorithm": self.algorithm,
            "params": self.params,
        }
        return Candidate(id=id, stage=stage, **{**mine, **fields})


class ProfilerRequest(BaseModel):
    model_config = ConfigDict(frozen=True)

    stage: StageBrief
    desc: TaskDescription
    attempt: Attempt
    profile: ProfileReport
    best: BestKernel | None = None
    recent: list[AttemptSummary] = Field(default_factory=list)


class DebuggerRequest(BaseModel):
    model_config = ConfigDict(frozen=True)

    stage: StageBrief
    desc: TaskDescription
    attempt: Attempt  # with the failing compile or check report
    recent: list[AttemptSummary] = Field(default_factory=list)


@runtime_checkable
class CodeModel(Protocol):
    name: str

    def write(self, req: CodeRequest) -> CodeReply: ...


@runtime_checkable
class ProfilerModel(Protocol):
    name: str

    def advise(self, req: ProfilerRequest) -> tuple[ProfilerAdvice, RoleUsage]: ...


@runtime_checkable
class DebuggerModel(Protocol):
    name: str

    def diagnose(self, req: DebuggerRequest) -> tuple[Diagnosis, RoleUsage]: ...


class ModelSet(BaseModel):
    """The three roles' models for one run."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    code: Any
    profiler: Any
    debugger: Any


class ModelError(Exception):
    """Base class for a model that could not give a usable reply."""


class ModelFormatError(ModelError):
    """The model replied, but not in the requested format, within its retry budget.

    The graph records it and carries on (the code step counts as a failed attempt; profiler and
    debugger fall back to the deterministic analysis)."""


class ModelUnavailableError(ModelError):
    """The model endpoint stayed unreachable (connection errors, 5xx, 429) after retries.

    The run stops with the best verified kernel so far and says why."""


class BudgetExceeded(ModelError):
    """A token, call or wall-time budget ran out; `which` names it (e.g. "run tokens")."""

    def __init__(self, which: str):
        super().__init__(f"budget exhausted: {which}")
        self.which = which
