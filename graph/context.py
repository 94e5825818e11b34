"""Run settings: one typed `Context`, parsed once.

Precedence: explicit argument > environment (`EGG_*`, documented per field) > default. The graph
records the resolved settings in its state at the start of a run, so a replayed thread runs with
exactly the settings it was started with.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from graph.records import Device, Policy
from graph.stages import STAGE_ORDER

STAGE_NAMES = STAGE_ORDER  # one definition: graph/stages.py


def _doc(text: str, env: str | None = None) -> dict[str, Any]:
    return {"doc": text, "env": env}


@dataclass(frozen=True)
class Context:
    """Settings of one EGG run (LangGraph `context_schema`)."""

    code_model: str = field(
        default="expert",
        metadata=_doc("model of the code role: `expert` or `openai:<model>`", "EGG_CODE_MODEL"),
    )
    profiler_model: str = field(
        default="expert", metadata=_doc("model of the profiler role", "EGG_PROFILER_MODEL")
    )
    debugger_model: str = field(
        default="expert", metadata=_doc("model of the debugger role", "EGG_DEBUGGER_MODEL")
    )
    device: Device = field(
        default="cpu",
        metadata=_doc("`cpu` (Triton interpreter, reduced sizes, no timing) or `cuda`", "EGG_DEVICE"),
    )
    seeds: int = field(default=4, metadata=_doc("algorithm seeds explored in parallel", "EGG_SEEDS"))
    policy: Policy = field(
        default="mixed", metadata=_doc("PyTorch-compute policy: `strict` or `mixed`", "EGG_POLICY")
    )
    tolerance: float | None = field(
        default=None, metadata=_doc("widen the correctness tolerance (reported)", None)
    )
    stages: tuple[str, ...] = field(
        default=STAGE_NAMES, metadata=_doc("stages to run, in order", "EGG_STAGES")
    )
    refine_budget: int = field(default=3, metadata=_doc("refinement attempts in the algorithm stage", None))
    cpu_refine_budget: int = field(
        default=1,
        metadata=_doc(
            "refinement attempts in the algorithm stage on CPU, where no refinement can be timed "
            "against its incumbent, so none is adopted (at most `refine_budget`; 0 skips them)",
            "EGG_CPU_REFINE_BUDGET",
        ),
    )
    tune_budget: int = field(default=6, metadata=_doc("attempts per tuning stage on a GPU", None))
    cpu_tune_budget: int = field(
        default=1, metadata=_doc("attempts per tuning stage on CPU, where nothing is timed", None)
    )
    tune_width: int = field(
        default=6,
        metadata=_doc(
            "tuning variants proposed from one profile and evaluated in parallel (timing stays "
            "exclusive); the rest of the budget goes one at a time, 1 = always one at a time",
            "EGG_TUNE_WIDTH",
        ),
    )
    fix_budget: int = field(default=2, metadata=_doc("debugger-guided fixes in a row before moving on", None))
    recent_k: int = field(default=4, metadata=_doc("attempt summaries shown to a model", None))
    job_timeout_s: float = field(
        default=300.0, metadata=_doc("time limit of one sandbox job (seconds)", "EGG_JOB_TIMEOUT")
    )
    run_tokens: int | None = field(
        default=None, metadata=_doc("LLM token budget of the whole run", "EGG_RUN_TOKENS")
    )
    stage_tokens: int | None = field(
        default=None, metadata=_doc("LLM token budget of one stage", "EGG_STAGE_TOKENS")
    )
    run_seconds: float | None = field(
        default=None, metadata=_doc("wall-time budget of the whole run", "EGG_RUN_SECONDS")
    )
    egg_home: str = field(
        default=".egg", metadata=_doc("directory for checkpoints, logs and artifacts", "EGG_HOME")
    )

    @classmethod
    def resolve(cls, env: dict[str, str] | None = None, **explicit: Any) -> Context:
        """Build settings: explicit (non-None) arguments win over `EGG_*` variables over defaults."""
        env = dict(os.environ) if env is None else env
        values: dict[str, Any] = {}
        for f in fields(cls):
            if explicit.get(f.name) is not None:
                values[f.name] = explicit[f.name]
                continue
            var = f.metadata.get("env")
            if var and env.get(var):
                values[f.name] = env[var]
        unknown = set(explicit) - {f.name for f in fields(cls)}
        if unknown:
            raise TypeError(f"unknown settings: {sorted(unknown)}")
        return cls.from_dict(values)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Context:
        """Settings from a dict (a recorded thread, Studio's context form); unknown keys are ignored."""
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})

    def __post_init__(self) -> None:
        # Values may come as text (environment) or JSON (a checkpoint, a server's context
        # form): coerce them to the declared types once, here, then validate.
        for f in fields(self):
            v = getattr(self, f.name)
            if v is None:
                continue
            if f.name == "stages":
                items = v.split(",") if isinstance(v, str) else v
                v = tuple(s.strip() for s in items if s.strip())
            elif isinstance(f.default, bool):
                v = v.lower() in ("1", "true", "yes") if isinstance(v, str) else bool(v)
            elif isinstance(f.default, int) or f.name in ("run_tokens", "stage_tokens"):
                v = int(v)
            elif isinstance(f.default, float) or f.name in ("tolerance", "run_seconds"):
                v = float(v)
            object.__setattr__(self, f.name, v)
        self.validate()

    def validate(self) -> None:
        bad = [s for s in self.stages if s not in STAGE_NAMES]
        if bad:
            raise ValueError(f"unknown stage(s) {bad}; choose from {', '.join(STAGE_NAMES)}")
        if "algorithm" not in self.stages:
            raise ValueError("the algorithm stage cannot be skipped: it writes the first kernel")
        if self.device not in ("cpu", "cuda"):
            raise ValueError(f"device must be cpu or cuda, not {self.device!r}")
        if self.policy not in ("strict", "mixed"):
            raise ValueError(f"policy must be strict or mixed, not {self.policy!r}")
        if self.seeds < 1:
            raise ValueError("seeds must be >= 1")
        if self.tune_width < 1:
            raise ValueError("tune_width must be >= 1")
        for name in ("refine_budget", "cpu_refine_budget", "tune_budget", "cpu_tune_budget", "fix_budget"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0")
        for m in (self.code_model, self.profiler_model, self.debugger_model):
            if m != "expert" and not m.startswith("openai:"):
                raise ValueError(f"unknown model {m!r}: use `expert` or `openai:<model>`")

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["stages"] = list(self.stages)
        return d

    @property
    def home(self) -> Path:
        return Path(self.egg_home)

    def budget_for(self, stage: str) -> int:
        if stage == "algorithm":
            return (
                self.refine_budget
                if self.device == "cuda"
                else min(self.refine_budget, self.cpu_refine_budget)
            )
        return self.tune_budget if self.device == "cuda" else self.cpu_tune_budget

    def width_for(self, stage: str) -> int:
        """Variants of a tuning stage's first round, proposed together and evaluated in parallel."""
        return max(1, min(self.tune_width, self.budget_for(stage)))


def config_table() -> str:
    """The README's configuration table, generated from the dataclass (a test keeps them in sync)."""
    rows = ["| setting | default | environment | meaning |", "| --- | --- | --- | --- |"]
    for f in fields(Context):
        default = ",".join(f.default) if isinstance(f.default, tuple) else f.default
        env = f"`{f.metadata['env']}`" if f.metadata.get("env") else ""
        rows.append(f"| `{f.name}` | `{default}` | {env} | {f.metadata['doc']} |")
    return "\n".join(rows)
