"""The parent graph's first and last nodes: prepare (load, validate, describe) and finalize."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from langgraph.runtime import Runtime

from graph.context import Context
from graph.records import TaskSpec
from nodes.common import log, settings_of
from nodes.deps import Deps


def task_from_path(path: str, device: str = "cpu") -> TaskSpec:
    p = Path(path)
    return TaskSpec(path=str(p), name=p.stem, source=p.read_text(), device=device)  # type: ignore[arg-type]


def make_prepare_node(deps: Deps):
    def prepare(state: dict[str, Any], runtime: Runtime[Context]) -> dict[str, Any]:
        if state.get("settings"):
            settings = settings_of(state)
        else:
            ctx = runtime.context if isinstance(runtime.context, Context) else Context()
            settings = ctx
        update: dict[str, Any] = {
            "settings": settings.to_dict(),
            "started_at": time.time(),
            "status": "running",
        }
        task = state.get("task")
        if task is None:
            path = state.get("task_path")
            if not path or not Path(path).is_file():
                return {**update, "status": "bad_input", "failure": f"task file not found: {path!r}"}
            task = task_from_path(path)
        task = task.model_copy(update={"device": settings.device})
        from tools.errors import BadTaskError

        try:
            desc = deps.toolbox.describe(task, shrink=settings.device == "cpu")
        except BadTaskError as e:
            log.warning("prepare.bad_input", task=task.name, error=str(e))
            return {**update, "task": task, "status": "bad_input", "failure": str(e)}
        overrides = {
            k: v for k, v in desc.sizes_used.items() if isinstance(v, int) and desc.constants.get(k) != v
        }
        task = task.model_copy(update={"size_overrides": overrides})
        log.info(
            "prepare", task=task.name, device=settings.device, ops=len(desc.op_graph), sizes=desc.sizes_used
        )
        return {**update, "task": task, "desc": desc}

    return prepare


def make_finalize_node(deps: Deps):
    def finalize(state: dict[str, Any]) -> dict[str, Any]:
        if state.get("status") == "bad_input":
            return {"status": "bad_input"}
        best = state.get("best")
        if best is None:
            failure = state.get("failure") or state.get("halt") or "no verified kernel"
            log.info("finalize", status="no_kernel", failure=failure)
            return {"status": "no_kernel", "failure": failure}
        # The reported numbers: candidate, eager and torch.compile timed in one process.
        final = deps.toolbox.benchmark(state["task"], best.candidate.source)
        profile = deps.toolbox.profile(state["desc"], final, best.compile)
        if final.measured is False and final.reason and "rejected" in final.reason:
            # A measurement the toolbox refuses to believe (e.g. faster than light) is no result.
            log.warning("finalize.rejected_timing", reason=final.reason)
            return {
                "status": "no_kernel",
                "failure": f"final benchmark rejected: {final.reason}",
                "final": final,
            }
        log.info(
            "finalize",
            status="verified",
            candidate=best.candidate.id,
            candidate_ms=final.candidate_ms,
            eager_ms=final.eager_ms,
            compile_ms=final.compile_ms,
        )
        return {"status": "verified", "final": final, "final_profile": profile, "failure": None}

    return finalize
