"""Resolve the per-role model names of a run (`expert`, `openai:<model>`) to model objects."""

from __future__ import annotations

from pathlib import Path

from graph.context import Context
from nodes.models import ModelSet


def expert_models() -> ModelSet:
    from nodes.expert import ExpertCode, ExpertDebugger, ExpertProfiler

    return ModelSet(code=ExpertCode(), profiler=ExpertProfiler(), debugger=ExpertDebugger())


def make_model_factory(*, llm_mode: str = "live", base_url: str | None = None, api_key: str | None = None):
    """A factory for `Deps.model_factory`.

    llm_mode: "live" calls the endpoint and records every exchange under the thread's directory;
    "recorded" serves the thread's recorded replies with no network.
    """

    def factory(settings: Context, thread: str) -> ModelSet:
        names = {"code": settings.code_model, "profiler": settings.profiler_model, "debugger": settings.debugger_model}
        experts = expert_models()
        roles = {}
        for role, name in names.items():
            if name == "expert":
                roles[role] = getattr(experts, role)
                continue
            from nodes.llm import LLMConfig, make_llm_role

            record = Path(settings.egg_home) / "threads" / thread / "llm.jsonl"
            cfg = LLMConfig.resolve(
                base_url=base_url,
                api_key=api_key,
                record_path=str(record) if llm_mode == "live" else None,
                replay_path=str(record) if llm_mode == "recorded" else None,
                run_tokens=settings.run_tokens,
                stage_tokens=settings.stage_tokens,
            )
            roles[role] = make_llm_role(role, name, cfg)
        return ModelSet(**roles)

    return factory
