"""`@triton.autotune` configs read from a candidate's source, without running it, and pinned.

A candidate may leave its tile sizes to Triton's autotuner. EGG accepts that, and makes the choice
its own where it can measure it: the tiling stage times one variant per config (the configs list
replaced by that one config), so the winner is chosen by EGG's timer and named in the report,
instead of by a search that runs inside the candidate on every new shape. The Triton interpreter
cannot time configs at all (its autotuner needs a GPU driver), so on CPU a candidate runs its
first config, and the check says so.

Only a literal list of configs (`configs=[triton.Config(...), ...]`) is read; a list built by code
(a comprehension, a name) is left to Triton's autotuner on a GPU and cannot run on CPU.
Everything here is parsing: the source is never executed in this process.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass


@dataclass(frozen=True)
class Site:
    """One `@triton.autotune(...)` decorator with a literal configs list."""

    kernel: str  # the decorated function's name
    configs: tuple[str, ...]  # each config's source text
    start: int  # byte offsets of the configs list `[...]` in the UTF-8 source
    end: int


def _dotted(node: ast.AST) -> str:
    if isinstance(node, ast.Attribute):
        return f"{_dotted(node.value)}.{node.attr}"
    if isinstance(node, ast.Name):
        return node.id
    return ""


def _configs_arg(call: ast.Call) -> ast.AST | None:
    for kw in call.keywords:
        if kw.arg == "configs":
            return kw.value
    return call.args[0] if call.args else None


def sites(source: str) -> list[Site]:
    """Every autotuned kernel whose configs are a literal list, in source order. A source that
    does not parse has none (the compile step reports the syntax error)."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return []
    data = source.encode()
    starts = [0]
    for line in data.splitlines(keepends=True):
        starts.append(starts[-1] + len(line))

    def off(line: int, col: int) -> int:  # ast columns are UTF-8 byte offsets
        return starts[line - 1] + col

    out: list[Site] = []
    for fn in ast.walk(tree):
        if not isinstance(fn, ast.FunctionDef):
            continue
        for d in fn.decorator_list:
            if not (isinstance(d, ast.Call) and _dotted(d.func).split(".")[-1] == "autotune"):
                continue
            lst = _configs_arg(d)
            if not isinstance(lst, ast.List) or not lst.elts or lst.end_lineno is None:
                continue
            texts = []
            for e in lst.elts:
                assert e.end_lineno is not None and e.end_col_offset is not None
                texts.append(data[off(e.lineno, e.col_offset) : off(e.end_lineno, e.end_col_offset)].decode())
            assert lst.end_col_offset is not None
            out.append(
                Site(
                    fn.name,
                    tuple(texts),
                    off(lst.lineno, lst.col_offset),
                    off(lst.end_lineno, lst.end_col_offset),
                )
            )
    return sorted(out, key=lambda s: s.start)


def pin(source: str, kernel: str, config: str) -> str:
    """`source` with the configs list of `kernel`'s autotune decorator replaced by `[config]`."""
    for s in sites(source):
        if s.kernel == kernel:
            data = source.encode()
            return (data[: s.start] + f"[{config}]".encode() + data[s.end :]).decode()
    raise KeyError(f"no @triton.autotune with a literal configs list on `{kernel}`")


def pin_first(source: str) -> tuple[str, list[str]]:
    """For the interpreter: every autotuned kernel with several configs runs its first one.
    Returns the source and one note per pinned kernel (empty when nothing changed)."""
    notes = []
    for s in sites(source):
        if len(s.configs) > 1:
            source = pin(source, s.kernel, s.configs[0])
            notes.append(
                f"interpreter: @triton.autotune kernel `{s.kernel}` ran its first of {len(s.configs)} "
                "configs (the interpreter cannot time configs; a GPU run picks among them)"
            )
    return source, notes


def sweep(source: str) -> list[tuple[str, int, str]]:
    """(kernel, index, config) of every config of every autotuned kernel with several configs:
    the variants the tiling stage times."""
    return [(s.kernel, i, c) for s in sites(source) if len(s.configs) > 1 for i, c in enumerate(s.configs)]
