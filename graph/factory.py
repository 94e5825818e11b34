"""Build a stage subgraph from a stage spec; the same attempt loop serves every branch and step.

start -> fan-out (Send) -> select -> code -> compile -> check -> time -> profile -> decide
                                      ^        |fail     |fail                     |
                                      |        +-> debug +-------------> decide ----+--> boundary

The fan-out runs the algorithm seeds (explore) or the first round of tuning variants (tune) as
parallel branches, each the same attempt loop; the sequential loop then refines (explore) or
keeps tuning with the remaining budget, one profiled step at a time.
"""

from __future__ import annotations

import time

from langgraph.graph import END, START, StateGraph
from langgraph.types import Send

from graph.context import Context
from graph.routing import (
    route_after_check,
    route_after_code,
    route_after_compile,
    route_after_decide,
    route_after_evaluate,
    route_after_start,
)
from graph.stages import StageSpec
from graph.state import SeedInput, SeedOutput, StageInput, StageOutput, StageState, StageUpdate
from nodes.boundary import make_boundary_node, make_seed_done_node, make_select_node, make_start_node
from nodes.code import make_code_node
from nodes.debugger import make_debug_node
from nodes.decide import make_decide_node
from nodes.deps import Deps
from nodes.profiler import make_profile_node
from nodes.tooling import make_check_node, make_compile_node, make_evaluate_node, make_time_node


def _add_attempt_loop(g: StateGraph, spec: StageSpec, deps: Deps, finish: str) -> None:
    g.add_node("code", make_code_node(spec, deps))
    g.add_node("compile", make_compile_node(spec, deps))
    g.add_node("check", make_check_node(spec, deps))
    g.add_node("time", make_time_node(spec, deps))
    g.add_node("profile", make_profile_node(spec, deps))
    g.add_node("debug", make_debug_node(spec, deps))
    g.add_node("decide", make_decide_node(spec))
    g.add_node("evaluate", make_evaluate_node(spec, deps))
    g.add_conditional_edges(
        "code",
        route_after_code,
        {"compile": "compile", "evaluate": "evaluate", "decide": "decide", "finish": finish},
    )
    g.add_conditional_edges("evaluate", route_after_evaluate, {"profile": "profile", "debug": "debug"})
    g.add_conditional_edges("compile", route_after_compile, {"check": "check", "debug": "debug"})
    g.add_conditional_edges("check", route_after_check, {"time": "time", "debug": "debug"})
    g.add_edge("time", "profile")
    g.add_edge("profile", "decide")
    g.add_edge("debug", "decide")
    g.add_conditional_edges("decide", route_after_decide, {"code": "code", "finish": finish})


def seed_start(state: StageState) -> StageUpdate:
    """A branch starts its own attempt loop: one proposal of the branch's mode, then its fixes."""
    return {
        "iteration": 0,
        "fixes": 0,
        "exhausted": False,
        "mode": state.get("mode") or "seed",
        "branch": True,
    }


def build_seed_graph(spec: StageSpec, deps: Deps) -> StateGraph:
    """One parallel branch (an algorithm seed, or a tuning variant of the entry kernel): write it,
    verify it, time it, repair it within the fix budget."""
    g = StateGraph(StageState, context_schema=Context, input_schema=SeedInput, output_schema=SeedOutput)
    g.add_node("seed_start", seed_start)
    g.add_node("seed_done", make_seed_done_node())
    _add_attempt_loop(g, spec, deps, finish="seed_done")
    g.add_edge(START, "seed_start")
    g.add_edge("seed_start", "code")
    g.add_edge("seed_done", END)
    return g


def fan_out_seeds(state: StageState) -> list[Send] | str:
    """Explore: one branch per algorithm seed. Tune: the first round's variants of the entry
    kernel, all proposed from its profile and evaluated in parallel (timing stays exclusive)."""
    if state.get("exhausted"):
        return "boundary"
    n = int(state.get("n_seeds") or 1)
    mode = state.get("mode") or "seed"
    branches: list[Send] = []
    for i in range(n):
        arg: SeedInput = {
            "task": state["task"],
            "started_at": state.get("started_at") or time.time(),
            "desc": state.get("desc"),
            "decisions": state.get("decisions") or [],
            "seed_index": i,
            "n_seeds": n,
            "mode": mode,
        }
        if mode == "tune":
            arg.update(entry=state.get("entry"), advice=state.get("advice"))
        branches.append(Send("seed", arg))
    return branches


def build_stage_graph(spec: StageSpec, deps: Deps) -> StateGraph:
    """An uncompiled stage subgraph: the caller compiles it (and picks the checkpointer)."""
    g = StateGraph(StageState, context_schema=Context, input_schema=StageInput, output_schema=StageOutput)
    g.add_node("start", make_start_node(spec))
    g.add_node("boundary", make_boundary_node(spec))
    _add_attempt_loop(g, spec, deps, finish="boundary")
    g.add_edge(START, "start")
    # Both kinds fan out first: explore over algorithm seeds, tune over the first round of
    # variants; the sequential loop then spends what is left of the stage's budget.
    g.add_node("seed", build_seed_graph(spec, deps).compile())
    g.add_node("select", make_select_node(spec))
    g.add_conditional_edges("start", fan_out_seeds, ["seed", "boundary"])
    g.add_edge("seed", "select")
    g.add_conditional_edges("select", route_after_start, {"code": "code", "boundary": "boundary"})
    g.add_edge("boundary", END)
    return g
