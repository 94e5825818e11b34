"""Elementwise ops as Triton expressions (fp32 math on already-loaded values).

`emit(node, val)` returns the expression for one op-graph node, where `val(arg)` turns an argument
(node reference or constant) into a variable name or literal. Operands are always plain names or
literals, so a formula may mention them more than once without recomputation.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from graph.records import OpNode

from .graphview import Unsupported, arg_value, flit, is_node
from .kernelfiles import kernel_source

# tanh through exp (kernels/ew.py): Triton has no tl.tanh on every backend.
_TANH = "_ew_tanh"
HELPERS = kernel_source("ew.py", "_ew_tanh", "_ew_softplus")

UNARY = {
    "relu",
    "relu6",
    "leaky_relu",
    "gelu",
    "silu",
    "mish",
    "softplus",
    "elu",
    "selu",
    "celu",
    "hardtanh",
    "hardswish",
    "hardsigmoid",
    "sigmoid",
    "tanh",
    "softsign",
    "logsigmoid",
    "tanhshrink",
    "hardshrink",
    "softshrink",
    "exp",
    "log",
    "sqrt",
    "rsqrt",
    "abs",
    "neg",
    "square",
    "reciprocal",
    "clamp",
    "clamp_min",
    "clamp_max",
    "sin",
    "cos",
    "erf",
    "floor",
    "ceil",
    "threshold",
}
BINARY = {"add", "sub", "mul", "div", "rsub", "maximum", "minimum", "pow", "fmax", "fmin"}
# masked_fill(x, mask, value): the mask tensor is loaded like any operand (bool -> 0.0 / 1.0).
SELECT = {"masked_fill"}
ELEMENTWISE = UNARY | BINARY | SELECT


def is_elementwise(n: OpNode) -> bool:
    if n.op not in ELEMENTWISE:
        return False
    if n.op in ("add", "sub") and "alpha" in n.kwargs and n.kwargs["alpha"] not in (1, 1.0):
        return True  # handled in emit (scaled operand)
    return True


def _c(n: OpNode, pos: int, key: str, default: Any) -> str:
    v = arg_value(n, pos, key, default)
    if is_node(v):
        raise Unsupported(f"{n.op} with a tensor-valued {key}")
    return flit(v)


def emit(n: OpNode, val: Callable[[Any], str]) -> str:
    op = n.op
    x = val(n.args[0]) if n.args else val(n.kwargs.get("input"))
    if op in BINARY:
        y_raw = n.args[1] if len(n.args) > 1 else n.kwargs.get("other", n.kwargs.get("exponent"))
        y = val(y_raw)
        alpha = n.kwargs.get("alpha")
        if alpha is not None and op in ("add", "sub", "rsub"):
            y = f"({y} * {flit(alpha)})"
        if op == "add":
            return f"{x} + {y}"
        if op == "sub":
            return f"{x} - {y}"
        if op == "rsub":
            return f"{y} - {x}"
        if op == "mul":
            return f"{x} * {y}"
        if op == "div":
            if n.kwargs.get("rounding_mode") not in (None,):
                raise Unsupported(f"div(rounding_mode={n.kwargs['rounding_mode']!r})")
            return f"{x} / {y}"
        if op in ("maximum", "fmax"):
            return f"tl.maximum({x}, {y})"
        if op in ("minimum", "fmin"):
            return f"tl.minimum({x}, {y})"
        if op == "pow":
            if is_node(y_raw):
                # x ** y for tensors is only defined here for positive bases; refuse instead.
                raise Unsupported("pow with a tensor exponent")
            if is_node(n.args[0]) is False:
                raise Unsupported("pow with a scalar base")
            e = float(y_raw)
            if e == 2.0:
                return f"{x} * {x}"
            if e == 3.0:
                return f"{x} * {x} * {x}"
            if e == 1.0:
                return x
            if e == 0.5:
                return f"tl.sqrt({x})"
            if e == -1.0:
                return f"1.0 / {x}"
            if e == -0.5:
                return f"tl.rsqrt({x})"
            raise Unsupported(f"pow with exponent {e}")
    if op == "masked_fill":
        m_raw = n.args[1] if len(n.args) > 1 else n.kwargs.get("mask")
        v_raw = arg_value(n, 2, "value")
        if not is_node(m_raw):
            raise Unsupported("masked_fill with a constant mask")
        if v_raw is None or is_node(v_raw):
            raise Unsupported("masked_fill with a tensor-valued fill")
        return f"tl.where({val(m_raw)} != 0.0, {flit(v_raw)}, {x})"
    if op == "relu":
        return f"tl.maximum({x}, 0.0)"
    if op == "relu6":
        return f"tl.minimum(tl.maximum({x}, 0.0), 6.0)"
    if op == "leaky_relu":
        s = _c(n, 1, "negative_slope", 0.01)
        return f"tl.where({x} >= 0.0, {x}, {x} * {s})"
    if op == "gelu":
        approx = arg_value(n, 99, "approximate", "none")
        if approx == "tanh":
            return f"0.5 * {x} * (1.0 + {_TANH}(0.7978845608028654 * ({x} + 0.044715 * {x} * {x} * {x})))"
        return f"0.5 * {x} * (1.0 + tl.erf({x} * 0.7071067811865476))"
    if op == "silu":
        return f"{x} / (1.0 + tl.exp(-{x}))"
    if op == "sigmoid":
        return f"1.0 / (1.0 + tl.exp(-{x}))"
    if op == "tanh":
        return f"{_TANH}({x})"
    if op == "mish":
        return f"{x} * {_TANH}(_ew_softplus({x}, 1.0, 20.0))"
    if op == "softplus":
        return f"_ew_softplus({x}, {_c(n, 1, 'beta', 1.0)}, {_c(n, 2, 'threshold', 20.0)})"
    if op == "elu":
        a = _c(n, 1, "alpha", 1.0)
        return f"tl.where({x} > 0.0, {x}, {a} * (tl.exp({x}) - 1.0))"
    if op == "celu":
        a = _c(n, 1, "alpha", 1.0)
        return f"tl.where({x} > 0.0, {x}, {a} * (tl.exp({x} / {a}) - 1.0))"
    if op == "selu":
        return f"1.0507009873554805 * tl.where({x} > 0.0, {x}, 1.6732632423543772 * (tl.exp({x}) - 1.0))"
    if op == "hardtanh":
        lo, hi = _c(n, 1, "min_val", -1.0), _c(n, 2, "max_val", 1.0)
        return f"tl.minimum(tl.maximum({x}, {lo}), {hi})"
    if op == "hardswish":
        return f"{x} * tl.minimum(tl.maximum({x} + 3.0, 0.0), 6.0) / 6.0"
    if op == "hardsigmoid":
        return f"tl.minimum(tl.maximum({x} / 6.0 + 0.5, 0.0), 1.0)"
    if op == "softsign":
        return f"{x} / (1.0 + tl.abs({x}))"
    if op == "logsigmoid":
        return f"tl.minimum({x}, 0.0) - tl.log(1.0 + tl.exp(-tl.abs({x})))"
    if op == "tanhshrink":
        return f"{x} - {_TANH}({x})"
    if op == "hardshrink":
        lam = _c(n, 1, "lambd", 0.5)
        return f"tl.where(tl.abs({x}) > {lam}, {x}, 0.0)"
    if op == "softshrink":
        lam = _c(n, 1, "lambd", 0.5)
        return f"tl.where({x} > {lam}, {x} - {lam}, tl.where({x} < -{lam}, {x} + {lam}, 0.0))"
    if op == "threshold":
        th, v = _c(n, 1, "threshold", 0.0), _c(n, 2, "value", 0.0)
        return f"tl.where({x} > {th}, {x}, {v})"
    if op in ("exp", "log", "sqrt", "rsqrt", "abs", "sin", "cos", "erf", "floor", "ceil"):
        fn = {"abs": "tl.abs", "erf": "tl.erf"}.get(op, f"tl.{op}")
        return f"{fn}({x})"
    if op == "neg":
        return f"-{x}"
    if op == "square":
        return f"{x} * {x}"
    if op == "reciprocal":
        return f"1.0 / {x}"
    if op in ("clamp", "clamp_min", "clamp_max"):
        if op == "clamp_min":
            lo, hi = arg_value(n, 1, "min"), None
        elif op == "clamp_max":
            lo, hi = None, arg_value(n, 1, "max")
        else:
            lo, hi = arg_value(n, 1, "min"), arg_value(n, 2, "max")
        out = x
        if lo is not None:
            out = f"tl.maximum({out}, {val(lo)})"
        if hi is not None:
            out = f"tl.minimum({out}, {val(hi)})"
        return out
    raise Unsupported(f"elementwise op {op}")
