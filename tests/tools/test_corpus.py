"""Every cheat in tests/corpus/cheats is rejected for its named rule; every good kernel is accepted.

All candidates are checked once per session through the real sandbox (CPU, Triton interpreter),
two at a time, and the parametrized tests then assert on the stored reports."""

from __future__ import annotations

import re
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from graph.records import CheckReport, TaskSpec
from tools.toolbox import Toolbox

CORPUS = Path(__file__).resolve().parents[1] / "corpus"
CHEATS = sorted((CORPUS / "cheats").glob("*.py"))
GOOD = sorted((CORPUS / "good").glob("*.py"))


def task_for(path: Path, device: str = "cpu") -> TaskSpec:
    name = re.search(r"^# task: (\S+)", path.read_text(), re.MULTILINE).group(1)
    tp = CORPUS / "tasks" / f"{name}.py"
    return TaskSpec(path=str(tp), name=name, source=tp.read_text(), device=device)


def expected(path: Path) -> str | None:
    m = re.search(r"^# expect: (\S+)", path.read_text(), re.MULTILINE)
    return m.group(1) if m else None


@pytest.fixture(scope="session")
def reports() -> dict[str, CheckReport]:
    tb = Toolbox(timeout_s=120)
    files = CHEATS + GOOD
    with ThreadPoolExecutor(2) as ex:
        res = list(ex.map(lambda p: tb.check(task_for(p), p.read_text()), files))
    return {p.name: r for p, r in zip(files, res, strict=True)}


def test_corpus_is_large_enough() -> None:
    assert len(CHEATS) >= 15 and len(GOOD) >= 3
    assert all(expected(p) for p in CHEATS)


@pytest.mark.parametrize("path", CHEATS, ids=lambda p: p.stem)
def test_cheat_rejected_for_its_rule(path: Path, reports: dict[str, CheckReport]) -> None:
    r = reports[path.name]
    assert not r.accepted
    rules = [x.split(":", 1)[0] for x in r.reasons]
    assert expected(path) in rules, r.reasons
    assert all(": " in x for x in r.reasons)


@pytest.mark.parametrize("path", GOOD, ids=lambda p: p.stem)
def test_good_kernel_accepted(path: Path, reports: dict[str, CheckReport]) -> None:
    r = reports[path.name]
    assert r.accepted, r.reasons
    assert r.trials == 5  # 3 distribution + 1 scaled + 1 second shape
    assert any(s["trial"] == "second-shape" for s in r.shapes_checked)
    second = next(s for s in r.shapes_checked if s["trial"] == "second-shape")
    assert any(v & (v - 1) for v in second["sizes"].values())  # some size is not a power of two
    assert r.policy == "mixed" and r.tolerance["atol"] > 0


def test_mixed_candidate_lists_delegated_ops(reports: dict[str, CheckReport]) -> None:
    r = reports["linear_relu_mixed.py"]
    assert r.accepted and r.delegated_ops == ["addmm"]


def test_tiny_task_flagged_and_tolerance_scaled(reports: dict[str, CheckReport]) -> None:
    r = reports["tiny_good.py"]
    assert r.tolerance["atol"] < 1e-6
    assert any("tiny" in d for d in r.degenerate)


def test_strict_policy_rejects_delegation() -> None:
    p = CORPUS / "good" / "linear_relu_mixed.py"
    r = Toolbox(timeout_s=120).check(task_for(p), p.read_text(), policy="strict")
    assert not r.accepted and r.policy == "strict"
    assert any(x.startswith("policy.torch_compute") and "strict" in x for x in r.reasons)


def test_explicit_tolerance_is_reported_as_widened() -> None:
    p = CORPUS / "good" / "relu_good.py"
    r = Toolbox(timeout_s=120).check(task_for(p), p.read_text(), tolerance=1e-2)
    assert r.accepted and r.tolerance_widened and r.tolerance["atol"] == pytest.approx(1e-2)
