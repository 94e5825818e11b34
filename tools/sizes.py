"""A task's module-level size constants, read from its text without running it (no torch):
which names can be overridden, `--size NAME=VALUE` arguments, and the ragged sizes rule that the
checker's second-shape trial and `--shapes ragged` share."""

from __future__ import annotations

import ast

# How a run picks its sizes: the file's own ("as-written"), or every int size constant >= 8
# changed to a smaller non-power-of-two value by `second_shape_options` ("ragged").
SHAPES_MODES = ("as-written", "ragged")
# Constants below this are kernel sizes, strides, channel groups...: the ragged rule leaves them.
RAGGED_MIN = 8


def _int_literal(v: ast.AST) -> int | None:
    """The value of an int literal or of arithmetic on int literals (`16384 * 4`, `2 ** 10`)."""
    if isinstance(v, ast.Constant) and type(v.value) is int:
        return v.value
    if isinstance(v, ast.BinOp) and isinstance(v.op, (ast.Add, ast.Sub, ast.Mult, ast.FloorDiv, ast.Pow)):
        a, b = _int_literal(v.left), _int_literal(v.right)
        if a is None or b is None or (isinstance(v.op, ast.Pow) and not 0 <= b <= 64):
            return None
        if isinstance(v.op, ast.FloorDiv) and b == 0:
            return None
        ops = {ast.Add: a + b, ast.Sub: a - b, ast.Mult: a * b}
        if type(v.op) in ops:
            return ops[type(v.op)]
        return a // b if isinstance(v.op, ast.FloorDiv) else a**b
    return None


def size_spans(source: str) -> dict[str, tuple[int, ast.AST]]:
    """name -> (value, expression node) of every module-level size constant: `NAME = <int>`
    (a literal or arithmetic on literals, `M = 16384 * 4`), each name of an unpacked tuple of
    them (`depth, height, width = 16, 32, 32`), and each int element of a list or tuple
    constant, named `NAME[i]` (`layer_sizes = [16384, 16384]`, `input_shape = (32768,)`;
    `[1024] * 16` has one)."""
    out: dict[str, tuple[int, ast.AST]] = {}
    for node in ast.parse(source).body:
        if not (isinstance(node, ast.Assign) and len(node.targets) == 1):
            continue
        target, v = node.targets[0], node.value
        if isinstance(target, (ast.Tuple, ast.List)) and isinstance(v, (ast.Tuple, ast.List)):
            if len(target.elts) == len(v.elts) and all(isinstance(t, ast.Name) for t in target.elts):
                for t, e in zip(target.elts, v.elts, strict=True):
                    val = _int_literal(e)
                    if val is not None:
                        out[t.id] = (val, e)  # type: ignore[attr-defined]
            continue
        if not isinstance(target, ast.Name):
            continue
        name = target.id
        if isinstance(v, ast.BinOp) and isinstance(v.op, ast.Mult) and isinstance(v.left, ast.List):
            v = v.left  # [1024] * 16: the repeated element is the size
        if isinstance(v, (ast.List, ast.Tuple)):
            elems = [(i, _int_literal(e), e) for i, e in enumerate(v.elts)]
            if elems and all(val is not None for _, val, _ in elems):
                for i, val, e in elems:
                    out[f"{name}[{i}]"] = (int(val), e)  # type: ignore[arg-type]
            continue
        val = _int_literal(v)
        if val is not None:
            out[name] = (val, v)
    return out


def int_constants(source: str) -> dict[str, int]:
    """The task's size constants (see size_spans): name -> value."""
    return {k: v for k, (v, _) in size_spans(source).items()}


def ragged_value(v: int) -> int:
    """A smaller non-power-of-two value for a size v >= RAGGED_MIN: v - v//4 - 1, one less again
    when that is a power of two (never below 3)."""
    n = v - v // 4 - 1
    if n & (n - 1) == 0:
        n -= 1
    return max(n, 3)


def second_shape_options(sizes: dict[str, int]) -> list[dict[str, int]]:
    """Size constants changed to smaller non-power-of-two values, all at once first, then one at a
    time (largest first); the check takes the first set the task runs with."""
    cands = sorted((k for k, v in sizes.items() if v >= RAGGED_MIN), key=lambda k: -sizes[k])
    options = [{k: ragged_value(sizes[k]) for k in cands}] + [{k: ragged_value(sizes[k])} for k in cands]
    return [{**sizes, **ov} for ov in options if ov]


def parse_size_args(args: list[str], source: str) -> dict[str, int]:
    """`--size NAME=VALUE` arguments as overrides of the task's size constants; ValueError (one
    line naming the problem) for a malformed argument, a name that is not a module-level int
    constant of the task, or a value that is not a positive integer."""
    consts = int_constants(source)
    out: dict[str, int] = {}
    for arg in args:
        name, sep, value = arg.partition("=")
        name, value = name.strip(), value.strip()
        if not sep or not name or not value:
            raise ValueError(f"--size must be NAME=VALUE (e.g. --size batch_size=24), not {arg!r}")
        if name not in consts:
            known = ", ".join(sorted(consts)) or "none"
            raise ValueError(
                f"--size {arg}: {name!r} is not a module-level int constant of the task (its constants: {known})"
            )
        try:
            n = int(value, 10)
        except ValueError:
            raise ValueError(f"--size {arg}: the value must be a positive integer, not {value!r}") from None
        if n <= 0:
            raise ValueError(f"--size {arg}: the value must be a positive integer, not {n}")
        if name in out and out[name] != n:
            raise ValueError(f"--size {name} given twice with different values ({out[name]} and {n})")
        out[name] = n
    return out
