"""Reading Python source without running it: parsing that never raises on hostile text, dotted
names, and edits at an AST node's position (ast columns are UTF-8 byte offsets)."""

from __future__ import annotations

import ast


def parse(source: str) -> ast.Module | None:
    """The module's AST, or None when it is not Python (a syntax error, a NUL byte) or too deeply
    nested to build (a generated 200k-term expression overflows the AST builder's recursion)."""
    try:
        return ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None


def dotted_name(node: ast.AST) -> str:
    """`a.b.c` for an attribute chain on a name (the chain's tail for any other root)."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
    return ".".join(reversed(parts))


def byte_span(source: str, node: ast.AST) -> tuple[int, int]:
    """(start, end) of `node` in the UTF-8 bytes of `source`."""
    starts = [0]
    for line in source.encode("utf-8").splitlines(keepends=True):
        starts.append(starts[-1] + len(line))
    end_line, end_col = getattr(node, "end_lineno", None), getattr(node, "end_col_offset", None)
    assert end_line is not None and end_col is not None, "node has no end position"
    return starts[node.lineno - 1] + node.col_offset, starts[end_line - 1] + end_col  # type: ignore[attr-defined]


def segment(source: str, node: ast.AST) -> str:
    a, b = byte_span(source, node)
    return source.encode("utf-8")[a:b].decode("utf-8")


def replace(source: str, node: ast.AST, text: str) -> str:
    """`source` with `node`'s text replaced by `text`."""
    a, b = byte_span(source, node)
    data = source.encode("utf-8")
    return (data[:a] + text.encode("utf-8") + data[b:]).decode("utf-8")
