"""Resolve the per-role model names of a run (`expert`, `openai:<model>`) to model objects."""

from __future__ import annotations

from pathlib import Path

from graph.context import Context
from nodes.models import ModelSet, ModelUnavailableError


def expert_models() -> ModelSet:
    from nodes.expert import ExpertCode, ExpertDebugger, ExpertProfiler

    return ModelSet(code=ExpertCode(), profiler=ExpertProfiler(), debugger=ExpertDebugger())


def llm_record_path(settings: Context, thread: str) -> Path:
    return Path(settings.egg_home) / "threads" / thread / "llm.jsonl"


def make_model_factory(*, llm_mode: str = "live", base_url: str | None = None, api_key: str | None = None):
    """A factory for `Deps.model_factory`.

    llm_mode: "live" calls the endpoint and records every exchange under the thread's directory;
    "recorded" serves the thread's recorded replies with no network. All LLM roles of a run share
    one configuration, so token and call budgets count the whole run.
    """

    def factory(settings: Context, thread: str) -> ModelSet:
        names = {
            "code": settings.code_model,
            "profiler": settings.profiler_model,
            "debugger": settings.debugger_model,
        }
        experts = expert_models()
        if all(n == "expert" for n in names.values()):
            return experts
        from nodes.llm import LLMConfig, make_llm_role

        record = llm_record_path(settings, thread)
        if llm_mode == "recorded" and not record.is_file():
            raise ModelUnavailableError(f"no recorded LLM replies for thread {thread!r} ({record})")
        cfg = LLMConfig.resolve(
            base_url=base_url,
            api_key=api_key,
            record_path=str(record) if llm_mode == "live" else None,
            replay_path=str(record) if llm_mode == "recorded" else None,
            run_tokens=settings.run_tokens,
            stage_tokens=settings.stage_tokens,
            recent_k=settings.recent_k,
            policy=settings.policy,
        )
        roles = {
            role: getattr(experts, role) if name == "expert" else make_llm_role(role, name, cfg)
            for role, name in names.items()
        }
        return ModelSet(**roles)

    return factory
