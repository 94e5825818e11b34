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


# Ordered split rows: one launch whose programs take tickets from cnt_ptr[0] and map them row
# by row onto `phases` phases of NSPLIT chunks each (a row's phase-0 chunks, then its phase-1
# chunks, ...): `row` (int64), `k` (the index within the row), `sid` (the chunk). A program of a
# later phase waits on a count of the phase before (ticket_wait), which every chunk of that phase
# bumps once its partials are stored (ticket_count). Tickets, not program ids, order the work: a
# program only ever waits for programs that took their tickets earlier, so already run, whatever
# order the hardware starts programs in. Partials of the same launch must be read past L1
# (cache_modifier '.cg'): a line cached for a neighbouring row may be stale.
def ticket_head(phases: int | str, lag: str | None = None) -> list[str]:
    """`lag` (two phases only; a constexpr's name): a block of tickets holds row b's first-phase
    chunks and row b - lag's second-phase chunks, so those start `lag` rows after the chunks they
    wait for and seldom wait; `row` then runs from -lag to n_rows + lag - 1 and the kernel skips
    rows outside [0, n_rows) (the launch has n_rows + lag blocks)."""
    back = f" - tl.where(k < NSPLIT, 0, {lag})" if lag else ""
    return [
        "t = tl.atomic_add(cnt_ptr, 1)",
        f"k = t % ({phases} * NSPLIT)",
        f"row = (t // ({phases} * NSPLIT){back}).to(tl.int64)",
        "sid = k % NSPLIT",
    ]


def ticket_count(cnt: str) -> list[str]:
    """Count this chunk's partials (stored by any thread of the program) in `cnt`."""
    return [
        "tl.debug_barrier()  # every thread's partials stored before they are counted",
        f"tl.atomic_add({cnt}, 1, sem='release')",
    ]


def ticket_wait(cnt: str) -> list[str]:
    """Wait until `cnt` counts all NSPLIT chunks of the phase before."""
    return [
        f"done = tl.atomic_add({cnt}, 0, sem='acquire')",
        "while done < NSPLIT:",
        f"    done = tl.atomic_add({cnt}, 0, sem='acquire')",
    ]
