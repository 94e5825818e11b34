"""Used by test_agent_process_never_imports_torch: build and run the graph with fakes, plus the
expert model's code path, in a fresh interpreter."""


def run_once() -> None:
    from fakes import FakeToolbox, ScriptedCode, scripted_models
    from langgraph.checkpoint.memory import InMemorySaver

    import graph.cli  # noqa: F401  (the CLI module must not pull torch in either)
    from graph.context import Context
    from graph.main import build_graph
    from graph.records import TaskSpec
    from nodes.deps import Deps
    from nodes.registry import expert_models

    expert_models()
    code = ScriptedCode({("algorithm", "seed"): ["# ms=0.5"]})
    deps = Deps(toolbox=FakeToolbox(), model_factory=lambda s, t: scripted_models(code))
    g = build_graph(deps).compile(checkpointer=InMemorySaver())
    ctx = Context(device="cuda", seeds=1)
    g.invoke(
        {
            "task": TaskSpec(path="t.py", name="t", source="class Model: pass"),
        },
        {"configurable": {"thread_id": "p"}},
        context=ctx,
    )
