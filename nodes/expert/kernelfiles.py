"""Fixed kernels kept as real files under kernels/, read here as text.

The generators paste these functions into candidates; reading them as text keeps the agent
process free of torch and triton while the files themselves stay lintable and testable.
`jit_source` builds the text of a generated kernel the same way for every family.
"""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path

KERNEL_DIR = Path(__file__).resolve().parent / "kernels"


@cache
def _functions(file: str) -> dict[str, str]:
    text = (KERNEL_DIR / file).read_text()
    lines = text.splitlines()
    out: dict[str, str] = {}
    for node in ast.parse(text).body:
        if isinstance(node, ast.FunctionDef):
            start = min([d.lineno for d in node.decorator_list] + [node.lineno])
            out[node.name] = "\n".join(lines[start - 1 : node.end_lineno])
    return out


def kernel_source(file: str, *names: str) -> str:
    """The named top-level functions of kernels/<file> (every function when none is named),
    as source text separated by blank lines."""
    funcs = _functions(file)
    missing = [n for n in names if n not in funcs]
    if missing:
        raise KeyError(f"kernels/{file} defines no {', '.join(missing)}")
    return "\n\n\n".join(funcs[n] for n in (names or tuple(funcs))) + "\n"


def jit_source(name: str, sig: str, lines: list[str]) -> str:
    """A generated `@triton.jit` function: `def name(sig):` over `lines`, each indented four
    spaces, ending in a newline."""
    return f"@triton.jit\ndef {name}({sig}):\n" + "\n".join("    " + x for x in lines) + "\n"


# The first lines of a column kernel over the (outer, R, inner) view of a tensor reduced or
# scanned along its middle dim: the outer index o and the BLOCK_I columns ci (mask cmask) a
# program owns, BLOCK_R row offsets rr, and the outer slab's base offset.
COLUMN_TILE_HEAD = [
    "pid = tl.program_id(0)",
    "n_cb = tl.cdiv(inner, BLOCK_I)",
    "o = (pid // n_cb).to(tl.int64)",
    "ci = (pid % n_cb) * BLOCK_I + tl.arange(0, BLOCK_I)",
    "cmask = ci < inner",
    "rr = tl.arange(0, BLOCK_R)",
    "base = o * R * inner",
]
