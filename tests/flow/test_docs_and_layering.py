"""The README's generated sections are current; the layering rules hold; generic package names
resolve inside this repository; the agent process never imports torch."""

import ast
import subprocess
import sys
from pathlib import Path

import pytest

import graph
import nodes
import tools
from graph.docs import README, diagrams, render

ROOT = Path(__file__).resolve().parents[2]


def test_readme_generated_sections_are_current():
    text = README.read_text()
    assert render(text, diagrams()) == text, "README.md is out of date: run `python -m graph.docs`"


def test_generic_package_names_resolve_inside_the_repo():
    for mod in (graph, nodes, tools):
        assert Path(mod.__file__).resolve().is_relative_to(ROOT), mod.__file__


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            out.add(node.module)
    return out


def test_layering():
    for name in ["records", "state", "reducers", "context", "stages", "routing"]:
        mods = _imports(ROOT / "graph" / f"{name}.py")
        assert not {m for m in mods if m.split(".")[0] in ("nodes", "tools", "torch", "triton")}, (name, mods)
    for path in (ROOT / "tools").rglob("*.py"):
        mods = _imports(path)
        assert not {m for m in mods if m.startswith(("langgraph", "langchain"))}, path
        if "worker" not in path.parts and path.name != "gpu_selfcheck.py":
            assert not {m.split(".")[0] for m in mods} & {"torch", "triton"}, (
                f"{path} imports torch/triton outside tools/worker"
            )
    # reports read results; only the runner writes them (and asks for the report at its end)
    assert "evals.runner" not in _imports(ROOT / "evals" / "report.py")
    assert not {m for m in _imports(ROOT / "evals" / "results.py") if m.startswith("evals")}
    kernel_files = ROOT / "nodes" / "expert" / "kernels"
    for path in (ROOT / "nodes").rglob("*.py"):
        mods = _imports(path)
        # Fixed kernels live in real files that the expert reads as text (never imports).
        assert not {m for m in mods if "kernels" in m.split(".")}, f"{path} imports a kernel file"
        if path.is_relative_to(kernel_files):
            continue
        assert not {m.split(".")[0] for m in mods} & {"torch", "triton"}, f"{path} imports torch/triton"


def test_agent_process_never_imports_torch():
    code = (
        "import sys; sys.path.insert(0, 'tests');"
        "from tests_flow_probe import run_once; run_once();"
        "bad = [m for m in ('torch', 'triton') if m in sys.modules];"
        "print('LEAK' if bad else 'CLEAN', bad)"
    )
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert "CLEAN" in r.stdout, r.stdout + r.stderr[-2000:]


@pytest.mark.slow
def test_readme_python_snippet_runs(tmp_path):
    """The README's Python example, run as written (from a copy of the repo's examples)."""
    import re
    import shutil

    block = re.search(r"### From Python\n\n```python\n(.*?)```", README.read_text(), re.S).group(1)
    shutil.copytree(ROOT / "examples", tmp_path / "examples")
    (tmp_path / "snippet.py").write_text(block)
    env = {**__import__("os").environ, "EGG_HOME": str(tmp_path / ".egg"), "PYTHONPATH": str(ROOT)}
    r = subprocess.run(
        [sys.executable, "snippet.py"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600
    )
    assert r.returncode == 0, r.stderr[-2000:]
    assert "verified" in r.stdout and "@triton.jit" in r.stdout


def test_sizes_and_shapes_never_import_torch_in_the_agent_process():
    """`--size` is checked against the task's text, `--shapes ragged` is decided in the worker:
    the CLI, the eval runner and the graph (with a ragged, resized task) stay free of torch."""
    code = """
import sys
sys.path.insert(0, 'tests')
from graph.cli import _shapes, _size_overrides
from evals.runner import EvalConfig, build_command
from evals.tasks import TaskEntry
source = open('tests/corpus/tasks/relu.py').read()
assert _size_overrides(['DIM=100'], source) == {'DIM': 100} and _shapes('ragged') == 'ragged'
cfg = EvalConfig(out='o', device='cpu', model='expert', policy='mixed', stages=None, extra_args=[],
                 optimize_cmd=['x'], backend='local', eval_id='e', task_timeout_s=1.0, shapes='ragged')
from evals.tasks import discover
assert '--shapes' in build_command(cfg, discover(['tests/corpus/tasks/relu.py'])[0])
from fakes import FakeToolbox, ScriptedCode, scripted_models
from langgraph.checkpoint.memory import InMemorySaver
from graph.context import Context
from graph.main import build_graph
from graph.records import TaskSpec
from nodes.deps import Deps
code = ScriptedCode({("algorithm", "seed"): ["# ms=0.5"]})
deps = Deps(toolbox=FakeToolbox(), model_factory=lambda s, t: scripted_models(code))
g = build_graph(deps).compile(checkpointer=InMemorySaver())
task = TaskSpec(path="t.py", name="t", source="class Model: pass\\nN = 8\\n", size_overrides={"N": 8}, shapes="ragged")
g.invoke({"task": task}, {"configurable": {"thread_id": "p"}}, context=Context(device="cuda", seeds=1))
bad = [m for m in ('torch', 'triton') if m in sys.modules]
print('LEAK' if bad else 'CLEAN', bad)
"""
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert "CLEAN" in r.stdout, r.stdout + r.stderr[-2000:]
