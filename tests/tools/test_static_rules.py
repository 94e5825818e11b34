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


def test_a_name_the_file_never_binds_is_refused():
    # `math` is the case that matters: Triton's CPU interpreter puts it into a kernel's module
    # globals when the kernel runs, so a candidate that never imports it verifies on the CPU and
    # fails with NameError on a GPU.
    src = (
        "import torch\nimport triton\nimport triton.language as tl\n\n"
        "@triton.jit\ndef k(x_ptr):\n    tl.store(x_ptr, tl.load(x_ptr))\n\n"
        "class ModelNew(torch.nn.Module):\n"
        "    def forward(self, x):\n"
        "        k[(1,)](x)\n"
        "        return x * math.sqrt(2.0)\n"
    )
    found = [f for f in static_findings(src) if f.startswith("static.undefined_name")]
    assert found == [
        "static.undefined_name: reads `math`, which the file never imports or defines "
        "(NameError on a GPU; Triton's CPU interpreter would hide it) (line 12)"
    ]
    assert not [f for f in static_findings("import math\n" + src) if "undefined" in f]
    # locals, closures, comprehensions, class attributes and builtins are bound names
    ok = (
        "import torch\nimport math\n\n"
        "def f(a):\n    return [b for b in range(len(a))]\n\n"
        "class ModelNew(torch.nn.Module):\n"
        "    scale = 2.0\n"
        "    def forward(self, x):\n"
        "        z = self.scale\n"
        "        def g():\n            return z\n"
        "        return x * math.pi + f(x)[0] + g()\n"
    )
    assert not [f for f in static_findings(ok) if "undefined" in f]
    # a star import leaves the question open: nothing is claimed
    assert not [f for f in static_findings("from math import *\n" + src) if "undefined" in f]
