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
from collections.abc import Iterator
from dataclasses import dataclass

from tools import pysource


@dataclass(frozen=True)
class Site:
    """One `@triton.autotune(...)` decorator with a literal configs list."""

    kernel: str  # the decorated function's name
    configs: tuple[str, ...]  # each config's source text


def _configs_arg(call: ast.Call) -> ast.AST | None:
    for kw in call.keywords:
        if kw.arg == "configs":
            return kw.value
    return call.args[0] if call.args else None


def _config_lists(source: str) -> Iterator[tuple[str, ast.List]]:
    """(kernel name, its literal configs list) of every autotuned kernel, in source order. A
    source that does not parse has none (the compile step reports why)."""
    tree = pysource.parse(source)
    found = []
    for fn in ast.walk(tree) if tree is not None else ():
        if not isinstance(fn, ast.FunctionDef):
            continue
        for d in fn.decorator_list:
            if isinstance(d, ast.Call) and pysource.dotted_name(d.func).split(".")[-1] == "autotune":
                lst = _configs_arg(d)
                if isinstance(lst, ast.List) and lst.elts:
                    found.append((fn.name, lst))
    yield from sorted(found, key=lambda f: (f[1].lineno, f[1].col_offset))


def sites(source: str) -> list[Site]:
    """Every autotuned kernel whose configs are a literal list, in source order."""
    return [
        Site(kernel, tuple(pysource.segment(source, e) for e in lst.elts))
        for kernel, lst in _config_lists(source)
    ]


def pin(source: str, kernel: str, config: str) -> str:
    """`source` with the configs list of `kernel`'s autotune decorator replaced by `[config]`."""
    for name, lst in _config_lists(source):
        if name == kernel:
            return pysource.replace(source, lst, f"[{config}]")
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
