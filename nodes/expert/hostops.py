"""Host nodes: views and shape arithmetic, written back as Python lines of `forward`.

A view (reshape, permute, slicing, chunk, ...) moves no data, and Python arithmetic on sizes
computes no tensor: the partition planner leaves both out of kernels and `forward` evaluates
them as the reference does, on the run's own shapes (`x.view(x.size(0), -1)` stays exactly
that, so other sizes keep working). The checker counts views as views, not as PyTorch compute.
"""

from __future__ import annotations

import ast
from collections.abc import Callable
from functools import cache
from typing import Any

from graph.records import OpNode

from .graphview import GraphView, Unsupported, _model_class, arg_value, is_node

# Tensor methods / functions that only view (or describe) a tensor.
VIEW_OPS = {
    "reshape",
    "view",
    "flatten",
    "unflatten",
    "permute",
    "transpose",
    "swapaxes",
    "swapdims",
    "t",
    "unsqueeze",
    "squeeze",
    "expand",
    "expand_as",
    "view_as",
    "reshape_as",
    "contiguous",
    "chunk",
    "split",
    "tensor_split",
    "unbind",
    "narrow",
    "select",
    "movedim",
    "moveaxis",
    "getitem",
    "getattr",
    "size",
    "dim",
    "ndimension",
    "numel",
    "nelement",
    "stride",
    "is_contiguous",
    # dtype / device moves (the checker counts _to_copy as data movement, not compute)
    "to",
    "type_as",
    "float",
    # fresh tensors of a given value, shaped like another (the checker counts them as allocation)
    "zeros_like",
    "ones_like",
    "full_like",
    "new_zeros",
    "new_ones",
    "new_full",
}
# Reductions returning (values, indices) when given a dim.
TUPLE_REDUCTIONS = {"max", "min", "median", "mode", "kthvalue"}
_BINARY = {
    "add": "+",
    "sub": "-",
    "mul": "*",
    "div": "/",
    "floor_divide": "//",
    "mod": "%",
    "pow": "**",
}
# Module classes that are views.
_MODULE_VIEWS = {"flatten", "unflatten"}


def is_host(view: GraphView, n: OpNode) -> bool:
    """True for nodes evaluated in Python in forward: views of tensors (not tensor-indexed
    gathers) and arithmetic on Python numbers (sizes)."""
    if n.kind == "call_module":
        return n.op in _MODULE_VIEWS
    if n.op in VIEW_OPS:
        if n.op == "getitem":
            # Indexing by a tensor is a gather (compute), not a view; picking the values or the
            # indices of max/min(dim) belongs with the reduction that makes the pair.
            src = n.args[0] if n.args else None
            if is_node(src) and view.nodes[view.resolve(src["node"])].op in TUPLE_REDUCTIONS:
                return False
            return not any(view.nodes[r].shape is not None for r in _index_refs(view, n))
        return True
    return is_scalar(view, n)


def is_scalar(view: GraphView, n: OpNode) -> bool:
    """Python arithmetic on numbers (sizes, scales): no tensor in or out."""
    if n.shape is not None or n.kind not in ("call_function", "call_method"):
        return False
    if n.kind == "call_method" and n.op in ("size", "dim", "numel", "nelement", "stride", "ndimension"):
        return True
    return all(view.nodes[r].shape is None for r in view.refs(n))


def _index_refs(view: GraphView, n: OpNode) -> list[str]:
    """Values read by the index part of a getitem (not the indexed value itself)."""
    return view.refs(n.model_copy(update={"args": list(n.args[1:]), "kwargs": {}}))


def literal(v: Any, device_expr: str) -> str:
    """Python source for a captured constant."""
    if isinstance(v, dict):
        if "float" in v:
            return {"inf": "float('inf')", "-inf": "float('-inf')", "nan": "float('nan')"}.get(
                v["float"], v["float"]
            )
        if "slice" in v:
            a, b, c = v["slice"]
            return f"slice({literal(a, device_expr)}, {literal(b, device_expr)}, {literal(c, device_expr)})"
        if "ellipsis" in v:
            return "..."
        if "dtype" in v:
            return f"torch.{v['dtype']}"
        if "device" in v:
            return device_expr
        if "memory_format" in v:
            return str(v["memory_format"])
        raise Unsupported(f"constant {v!r} cannot be written back as Python")
    if isinstance(v, list):
        inner = ", ".join(literal(x, device_expr) for x in v)
        return f"({inner}{',' if len(v) == 1 else ''})"
    return repr(v)


def _index_text(v: Any, val: Callable[[Any], str], bound: Callable[[Any], str] | None = None) -> str:
    """A subscript written as Python: slices as a:b:c, tuples unparenthesised; `bound` writes a
    slice's start and stop (a size the model holds, `[:, :self.cluster_size]`)."""
    bound = bound or val
    if isinstance(v, dict) and "slice" in v:
        a, b, c = (("" if x is None else f(x)) for x, f in zip(v["slice"], (bound, bound, val), strict=True))
        return f"{a}:{b}" + (f":{c}" if c else "")
    if isinstance(v, list):
        return ", ".join(_index_text(x, val, bound) for x in v) + ("," if len(v) == 1 else "")
    return val(v)


@cache
def _attrs_read(source: str) -> tuple[frozenset[str], frozenset[int]]:
    """`self.<name>` attributes Model's methods other than __init__ read, and the int literals
    written in those methods (a number the author wrote is meant as that number). Cached: every
    size argument of every host line asks."""
    try:
        cls = _model_class(source)
    except (SyntaxError, Unsupported):  # no Model to read: no size is named
        return frozenset(), frozenset()
    found: set[str] = set()
    literals: set[int] = set()
    for item in cls.body:
        if isinstance(item, ast.FunctionDef) and item.name != "__init__":
            for node in ast.walk(item):
                if (
                    isinstance(node, ast.Attribute)
                    and isinstance(node.value, ast.Name)
                    and node.value.id == "self"
                ):
                    found.add(node.attr)
                elif isinstance(node, ast.Constant) and type(node.value) is int:
                    literals.add(node.value)
    return frozenset(found), frozenset(literals)


def _unique(found: dict[int, set[str]]) -> dict[int, str]:
    return {d: next(iter(e)) for d, e in found.items() if d > 1 and len(e) == 1}


def named_sizes(view: GraphView, inputs: bool = True) -> dict[int, str]:
    """Numbers a baked view may stand for, each with the one expression that gives it at run
    time: the model's int attributes forward reads (`self.n_head`) and, with `inputs`, the
    forward inputs' dims (`x.shape[0]`). A number two of them share is ambiguous and left out
    (it stays a number); so are 0 and 1, which are layout, not sizes."""
    found: dict[int, set[str]] = {}
    read, literals = _attrs_read(view.desc.source)
    for k, v in view.desc.module_ints.items():
        if k in read and v not in literals:
            found.setdefault(v, set()).add(f"self.{k}")
    if inputs:
        for leaf in view.leaves.values():
            if leaf.shape is None or leaf.is_scalar or leaf.expr.startswith("self."):
                continue
            for j, d in enumerate(leaf.shape):
                found.setdefault(d, set()).add(f"{leaf.expr}.shape[{j}]")
    return _unique(found)


def _reshape_groups(src: list[int], out: list[int]) -> list[tuple[list[int], list[int]]] | None:
    """Source dims and output dims of a reshape paired into groups of equal product, in order
    ((i,) -> (j,) kept, (i, k) -> (j,) merged, (i,) -> (j, l) split; size-1 dims on their own).
    None when the sizes do not pair up (zero-size dims)."""
    if 0 in src or 0 in out:
        return None
    groups: list[tuple[list[int], list[int]]] = []
    i = j = 0
    while i < len(src) or j < len(out):
        if j < len(out) and out[j] == 1 and (i >= len(src) or src[i] != 1):
            groups.append(([], [j]))
            j += 1
        elif i < len(src) and src[i] == 1 and (j >= len(out) or out[j] != 1):
            groups.append(([i], []))
            i += 1
        elif i < len(src) and j < len(out):
            gi, gj, ps, po = [i], [j], src[i], out[j]
            i, j = i + 1, j + 1
            while ps != po:
                if ps < po and i < len(src):
                    ps, i = ps * src[i], i + 1
                    gi.append(i - 1)
                elif po < ps and j < len(out):
                    po, j = po * out[j], j + 1
                    gj.append(j - 1)
                else:
                    return None
            groups.append((gi, gj))
        else:
            return None
    return groups


def run_time_dims(x: str, src: list[int], out: list[int], known: dict[int, str] | None = None) -> list[str]:
    """Sizes of a reshape the capture baked into numbers (a concrete-shape or ATen trace),
    written against the run's own input `x`. Source and output dims are paired into groups of
    equal product: a kept dim is read from x (`x.shape[i]`), merged dims are their product, and
    a split dim gives each piece its name in `known` (a model attribute or a forward input's dim
    with that value, see named_sizes) or its number, except one piece, computed as the rest
    (`x.shape[i] // self.block_len`): the last one no model attribute names. A reshape with a
    single computed size writes it as -1."""
    known = known or {}
    out = list(out)
    if -1 in out:
        k = out.index(-1)
        rest = 1
        for i, d in enumerate(out):
            if i != k:
                rest *= d
        total = 1
        for d in src:
            total *= d
        out[k] = total // rest if rest else 0
    groups = _reshape_groups(src, out)
    if groups is None:
        return [str(d) for d in out]
    text = [""] * len(out)
    computed: list[int] = []
    for gi, gj in groups:
        if not gj:
            continue
        whole = " * ".join(f"{x}.shape[{i}]" for i in gi)
        if len(gj) == 1:
            text[gj[0]] = whole if gi else "1"
            if len(gi) > 1:
                text[gj[0]] = f"({whole})"
                computed.append(gj[0])
            continue
        free = [j for j in gj if out[j] != 1]
        # the piece computed from the rest: the last one no model attribute names
        c = next((j for j in reversed(free) if not known.get(out[j], "").startswith("self.")), free[-1])
        others = []
        for j in gj:
            text[j] = "1" if out[j] == 1 else known.get(out[j], str(out[j]))
            if j != c and out[j] != 1:
                others.append(text[j])
        lits = [t for t in others if t.isdigit()]
        named = [t for t in others if not t.isdigit()]
        lit = 1
        for t in lits:
            lit *= int(t)
        div = named + ([str(lit)] if lit != 1 or not named else [])
        base = f"({whole})" if len(gi) > 1 else whole
        text[c] = f"({base} // {' // '.join(div)})"
        computed.append(c)
    if len(computed) == 1:
        text[computed[0]] = "-1"
    return text


def host_expr(view: GraphView, n: OpNode, expr: Callable[[str], str], device_expr: str) -> str:
    """The Python expression computing host node `n`; `expr(name)` gives a value's variable."""

    def val(a: Any) -> str:
        if is_node(a):
            return expr(view.resolve(a["node"]))
        if isinstance(a, list):
            inner = ", ".join(val(x) for x in a)
            return f"({inner}{',' if len(a) == 1 else ''})"
        return literal(a, device_expr)

    def size(a: Any) -> str:
        """A size argument: a number the model holds as an attribute is read from it."""
        if isinstance(a, int) and not isinstance(a, bool):
            return named_sizes(view, inputs=False).get(a, str(a))
        if isinstance(a, list):
            inner = ", ".join(size(x) for x in a)
            return f"({inner}{',' if len(a) == 1 else ''})"
        return val(a)

    def call_args(args: list[Any], kwargs: dict[str, Any]) -> str:
        parts = [val(a) for a in args] + [f"{k}={val(v)}" for k, v in kwargs.items()]
        return ", ".join(parts)

    if n.kind == "call_module":
        src = val(n.args[0])
        if n.op == "flatten":
            s, e = n.module_attrs.get("start_dim", 1), n.module_attrs.get("end_dim", -1)
            return f"{src}.flatten({int(s)}, {int(e)})"
        raise Unsupported(f"module {n.module_type} as a view")
    if n.op == "getitem":
        return f"{val(n.args[0])}[{_index_text(n.args[1], val, size)}]"
    if n.op in ("view", "reshape") and n.args and is_node(n.args[0]):
        dims = n.args[1:] if len(n.args) > 2 or not isinstance(n.args[1], list) else n.args[1]
        src = view.nodes[view.resolve(n.args[0]["node"])]
        if all(isinstance(d, int) and not isinstance(d, bool) for d in dims) and src.shape:
            x = val(n.args[0])
            # a size both a model attribute and an input's dim is the attribute's
            known = {**named_sizes(view), **named_sizes(view, inputs=False)}
            return f"{x}.reshape({', '.join(run_time_dims(x, src.shape, list(dims), known))})"
    if n.op == "getattr":
        return f"{val(n.args[0])}.{n.args[1]}"
    if n.op in _BINARY and n.shape is None:
        # arithmetic on sizes (C // self.n_head)
        a = size(n.args[0]) if n.args else size(n.kwargs.get("input"))
        b = size(n.args[1]) if len(n.args) > 1 else size(n.kwargs.get("other"))
        return f"({a} {_BINARY[n.op]} {b})"
    if n.op == "neg" and n.shape is None:
        return f"(-{val(n.args[0])})"
    if n.op == "split" and n.args and is_node(n.args[0]) and n.shape is not None:
        # split(self.n_embd, dim) of a 3 * n_embd tensor: a size the capture baked; as chunk(3)
        # it holds for the run's own sizes too.
        size, dim = arg_value(n, 1, "split_size_or_sections"), arg_value(n, 2, "dim", 0)
        src = view.nodes[view.resolve(n.args[0]["node"])].shape or []
        if isinstance(size, int) and isinstance(dim, int) and src and size > 0 and src[dim] % size == 0:
            return f"{val(n.args[0])}.chunk({src[dim] // size}, {dim})"
    if n.kind == "call_method":
        # `view` after a dropped `contiguous()` (a passthrough of the op graph) must copy:
        # reshape does exactly what view does where view works, and copies where it would not.
        method = {"view": "reshape", "view_as": "reshape_as"}.get(n.target, n.target)
        if n.op in ("view", "reshape", "expand") and n.args and not n.kwargs:
            return f"{val(n.args[0])}.{method}({', '.join(size(a) for a in n.args[1:])})"
        return f"{val(n.args[0])}.{method}({call_args(n.args[1:], n.kwargs)})"
    if n.kind == "call_function":
        target = n.target
        if target.startswith("torch.") and "." not in target[len("torch.") :]:
            return f"{target}({call_args(n.args, n.kwargs)})"
        if target.startswith("torch.Tensor."):
            return f"{val(n.args[0])}.{target.rsplit('.', 1)[-1]}({call_args(n.args[1:], n.kwargs)})"
        if target in ("builtins.getattr", "getattr"):
            return f"{val(n.args[0])}.{n.args[1]}"
        if target.startswith("math.") or target in ("builtins.int", "builtins.float"):
            return f"{target.removeprefix('builtins.')}({call_args(n.args, n.kwargs)})"
        if target.startswith("operator."):
            raise Unsupported(f"python operator {target} on a view")
        raise Unsupported(f"{target} as a view")
    raise Unsupported(f"{n.op} ({n.kind}) as a host line")
