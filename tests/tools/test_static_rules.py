"""Static rules alone (pure, no subprocess): fast feedback on every static cheat."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tools.worker.static_rules import static_findings

CORPUS = Path(__file__).resolve().parents[1] / "corpus"


def _expect(p: Path) -> str:
    m = re.search(r"^# expect: (\S+)", p.read_text(), re.MULTILINE)
    assert m, f"{p.name} names no expected rule"
    return m.group(1)


STATIC_CHEATS = [p for p in sorted((CORPUS / "cheats").glob("*.py")) if _expect(p).startswith("static.")]


@pytest.mark.parametrize("path", STATIC_CHEATS, ids=lambda p: p.stem)
def test_static_cheat_flagged(path: Path) -> None:
    rules = [f.split(":", 1)[0] for f in static_findings(path.read_text())]
    assert _expect(path) in rules, rules


@pytest.mark.parametrize("path", sorted((CORPUS / "good").glob("*.py")), ids=lambda p: p.stem)
def test_good_candidates_pass_static(path: Path) -> None:
    assert static_findings(path.read_text()) == []


def test_syntax_error_is_the_only_finding() -> None:
    f = static_findings("def broken(:\n    pass\n")
    assert len(f) == 1 and f[0].startswith("static.syntax:") and "line 1" in f[0]


def test_findings_carry_line_numbers() -> None:
    src = (CORPUS / "cheats" / "try_fallback.py").read_text()
    line = next(i for i, s in enumerate(src.splitlines(), 1) if s.strip() == "try:")
    assert any(f.startswith("static.try_except") and f"(line {line})" in f for f in static_findings(src))


def test_monkey_patch_via_setattr_and_timer_attribute() -> None:
    src = (CORPUS / "good" / "relu_good.py").read_text()
    patched = src + "\nsetattr(torch.cuda, 'synchronize', lambda: None)\n"
    assert any(f.startswith("static.reference_access") for f in static_findings(patched))
    ev = src + "\n_e = torch.cuda.Event(enable_timing=True)\n"
    assert any(f.startswith("static.timer") for f in static_findings(ev))
