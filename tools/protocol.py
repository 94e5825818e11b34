"""The only wire format between the agent process and the sandbox worker.

A `Job` is written as JSON to a file in a fresh temporary directory; the worker process
(`python -m tools.worker JOB.json RESULT.json`) writes a `JobResult` to the result file.
Nothing is parsed from the worker's stdout.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from graph.records import Device, Policy

JobKind = Literal["describe", "compile", "check", "time", "benchmark", "evaluate", "selftest"]


class Job(BaseModel):
    model_config = ConfigDict(extra="forbid")

    kind: JobKind
    task_path: str
    task_source: str
    device: Device = "cpu"
    size_overrides: dict[str, int] = Field(default_factory=dict)
    candidate_source: str | None = None
    policy: Policy = "mixed"
    # Free-form, kind-specific options (tolerances, trials, seeds, shrink budget, timing reps).
    options: dict[str, Any] = Field(default_factory=dict)


class JobResult(BaseModel):
    model_config = ConfigDict(extra="forbid")

    kind: JobKind
    # True when the worker ran to completion and wrote this result. A kernel's own failure
    # (compile error, mismatch) is ok=True with the failure inside `payload`.
    ok: bool
    payload: dict[str, Any] = Field(default_factory=dict)
    # Set when the job itself failed: "timeout", "crash", "no_result", "bad_task", ...
    error_kind: str | None = None
    error: str | None = None
    exit_code: int | None = None
    stdout_tail: str = ""
    stderr_tail: str = ""
    seconds: float = 0.0
