"""Every suite task loads, matches the KernelBench format, and runs on CPU at reduced sizes.

Full sizes are checked on the meta device (shapes only, no memory), so the GPU-sized inputs
are never allocated on this machine.
"""

from __future__ import annotations

import ast
import importlib.util
import re
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

torch = pytest.importorskip("torch")

SUITES = Path(__file__).resolve().parents[2] / "evals" / "suites"
EGG = sorted((SUITES / "egg").glob("*.py"))
SMOKE = sorted((SUITES / "smoke").glob("*.py"))
ALL = EGG + SMOKE
SHRINK_CAP = 16


def load_task(path: Path, shrink: bool) -> ModuleType:
    """Import a task file under a private name; with shrink, halve every int size constant
    above SHRINK_CAP until it fits (halving keeps power-of-two divisibility such as
    channels % groups), leaving small ints (kernel, stride, groups) and floats alone."""
    name = f"_egg_task_{path.parent.name}_{path.stem}"
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    if shrink:
        for k, v in vars(mod).copy().items():
            if k.isupper() and isinstance(v, int) and not isinstance(v, bool):
                while v > SHRINK_CAP:
                    v //= 2
                setattr(mod, k, v)
    return mod


def _bytes(x: Any) -> int:
    if isinstance(x, torch.Tensor):
        return x.numel() * x.element_size()
    if isinstance(x, (list, tuple)):
        return sum(_bytes(y) for y in x)
    return 0


def _header(path: Path) -> dict[str, str]:
    lines = path.read_text().splitlines()[:3]
    out = {}
    for ln in lines:
        m = re.match(r"#\s*(family|kind):\s*(\S+)", ln)
        if m:
            out[m.group(1)] = m.group(2)
    return out


def test_suite_sizes() -> None:
    assert len(EGG) >= 30
    assert 4 <= len(SMOKE) <= 6
    names = {p.stem for p in EGG}
    for i in range(1, 11):
        assert any(n.startswith(f"d{i:02d}_") for n in names), f"missing D{i}"


@pytest.mark.parametrize("path", ALL, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_task_format(path: Path) -> None:
    h = _header(path)
    assert h.get("family"), "first lines must carry '# family: <family>'"
    assert h.get("kind") in ("single-op", "fused-chain")
    tree = ast.parse(path.read_text())
    top = {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
    assert {"Model", "get_inputs", "get_init_inputs"} <= top


@pytest.mark.parametrize("path", ALL, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_task_runs_on_cpu_shrunk(path: Path) -> None:
    torch.manual_seed(0)
    mod = load_task(path, shrink=True)
    model = mod.Model(*mod.get_init_inputs())
    inputs = mod.get_inputs()
    assert all(
        t.dtype in (torch.float32, torch.bool, torch.int64) for t in inputs if isinstance(t, torch.Tensor)
    )
    assert any(t.dtype == torch.float32 for t in inputs if isinstance(t, torch.Tensor))
    with torch.no_grad():
        out = model(*inputs)
    assert isinstance(out, torch.Tensor)
    if out.is_floating_point():
        assert torch.isfinite(out).all(), "reference output must be finite at test sizes"
        # A constant output would let a kernel that skips the work pass the checker.
        if out.numel() > 1:
            assert out.float().std() > 0


@pytest.mark.parametrize("path", EGG, ids=lambda p: p.stem)
def test_full_sizes_on_meta(path: Path) -> None:
    """GPU sizes: inputs + output in a realistic range (D tasks are sized by spec)."""
    mod = load_task(path, shrink=False)
    with torch.device("meta"):
        model = mod.Model(*mod.get_init_inputs())
        inputs = mod.get_inputs()
        out = model(*inputs)
    total = _bytes(inputs) + _bytes(out)
    weights = _bytes(list(model.parameters()))  # a GEMV's traffic is its weight
    if not path.stem.startswith("d"):
        assert 16 * 2**20 <= total + weights and total <= 1100 * 2**20, (
            f"{total / 2**20:.0f} MB of inputs and outputs, {weights / 2**20:.0f} MB of weights: "
            "outside 16 MB..1.1 GB"
        )
    else:
        assert total <= 20 * 2**30  # fits an H200 comfortably with the output and temporaries
