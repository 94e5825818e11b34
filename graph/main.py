"""The top-level EGG graph: prepare -> algorithm -> mapping -> tiling -> memory -> finalize.

`build_graph(deps)` returns the uncompiled StateGraph; `compile_graph(deps, checkpointer)` compiles
it. `graph.studio.graph` (for langgraph.json / `langgraph dev`) is compiled without a checkpointer: the
server provides persistence.
"""

from __future__ import annotations

from typing import Any

from langgraph.graph import END, START, StateGraph

from graph.context import Context
from graph.factory import build_stage_graph
from graph.routing import next_after_stage, route_after_prepare
from graph.stages import STAGE_ORDER, STAGES
from graph.state import EggInput, EggOutput, EggState
from nodes.deps import Deps
from nodes.lifecycle import make_finalize_node, make_prepare_node


def default_deps(
    *,
    llm_mode: str = "live",
    base_url: str | None = None,
    api_key: str | None = None,
    timeout_s: float | None = None,
) -> Deps:
    from nodes.registry import make_model_factory
    from tools.toolbox import Toolbox

    toolbox = Toolbox(timeout_s=timeout_s) if timeout_s else Toolbox()
    return Deps(
        toolbox=toolbox,
        model_factory=make_model_factory(llm_mode=llm_mode, base_url=base_url, api_key=api_key),
    )


def build_graph(deps: Deps) -> StateGraph:
    g = StateGraph(EggState, context_schema=Context, input_schema=EggInput, output_schema=EggOutput)
    g.add_node("prepare", make_prepare_node(deps))
    for name in STAGE_ORDER:
        g.add_node(name, build_stage_graph(STAGES[name], deps).compile())
    g.add_node("finalize", make_finalize_node(deps))
    g.add_edge(START, "prepare")
    g.add_conditional_edges(
        "prepare", route_after_prepare, {STAGE_ORDER[0]: STAGE_ORDER[0], "finalize": "finalize"}
    )
    for i, name in enumerate(STAGE_ORDER):
        nxt = STAGE_ORDER[i + 1] if i + 1 < len(STAGE_ORDER) else "finalize"
        g.add_conditional_edges(name, next_after_stage(name), sorted({nxt, "finalize"}))
    g.add_edge("finalize", END)
    return g


def compile_graph(deps: Deps | None = None, checkpointer: Any = None):
    return build_graph(deps or default_deps()).compile(checkpointer=checkpointer, name="egg")
