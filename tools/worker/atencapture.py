"""The third capture path: trace the forward at the ATen level (runs in the worker).

Used only when both torch.fx traces fail, e.g. when the forward hands its tensors to a library
that inspects them (einops' `rearrange` rejects an fx Proxy: "Tensor type unknown to einops"),
or checks `isinstance(x, torch.Tensor)`. `make_fx` runs the forward on fake tensors (shapes,
dtypes and devices of the examples, no data), so any Python code sees real tensors and only the
ops reaching the dispatcher are recorded. Pre-dispatch tracing keeps composite ops as the user
called them (`linear`, `einsum`, `softmax`, `layer_norm`, `matmul`); a plain dispatch trace is
the fallback and its lower-level ops (`t` + `addmm`, `_softmax`, `_unsafe_view`...) map too.
Data-dependent control flow fails on fake tensors, as it should: a graph specialised to one
input's values would be silently wrong for another.

Parameters, buffers and plain tensor attributes go in through `torch.func.functional_call` as
named placeholders, so they come back as `param` nodes whose target is the state-dict name
(`A`, `proj.weight`), as the fx path's get_attr nodes. Tensors the forward builds without its
inputs (`torch.tril(torch.ones(T, T))`) are folded into constants and described as the fx path
describes them (`tri_mask`, a scalar, or an opaque `tensor_constant`).

Every ATen op is mapped onto the op dict the fx path produces for its torch-level spelling:
canonical op name, `call_method` for tensor methods (views, masked_fill, reductions written as
methods), `call_function` with a `torch.*` / `operator.*` target otherwise, slicing as `getitem`
with the fx slice encoding. An op with no mapping fails the capture naming the op and node, never
a silently different graph; so does an in-place op whose effect a value graph cannot express
(a write into a view, an input or a parameter).
"""

from __future__ import annotations

import copy
import inspect
import operator
import re
from collections.abc import Callable
from typing import Any

import torch
import torch.fx
import torch.nn as nn

# Slice ends at or past this mean "to the end" (ATen writes sys.maxsize).
_TO_END = 2**62


class AtenCaptureError(Exception):
    """The ATen graph cannot be written as the op dicts the families know."""


def _dtype_name(d: Any) -> str:
    return str(d).replace("torch.", "")


def _meta(v: Any) -> tuple[list[int] | None, str | None]:
    if isinstance(v, torch.Tensor):
        return [int(s) for s in v.shape], _dtype_name(v.dtype)
    if isinstance(v, (list, tuple)):
        for x in v:
            if isinstance(x, torch.Tensor):
                return [int(s) for s in x.shape], _dtype_name(x.dtype)
    return None, None


def _state(model: nn.Module) -> dict[str, torch.Tensor]:
    """Parameters, buffers and plain tensor attributes by dotted name (what forward may read)."""
    state: dict[str, torch.Tensor] = dict(model.named_parameters())
    state.update(dict(model.named_buffers()))
    for prefix, mod in model.named_modules():
        for k, v in vars(mod).items():
            if isinstance(v, torch.Tensor) and not isinstance(v, nn.Parameter):
                state.setdefault(f"{prefix}.{k}" if prefix else k, v)
    return state


def _forward_names(model: nn.Module, n: int) -> list[str]:
    try:
        params = list(inspect.signature(model.forward).parameters.values())
    except (TypeError, ValueError):
        params = []
    names = [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return [names[i] if i < len(names) else f"input_{i}" for i in range(n)]


def trace(model: nn.Module, example_inputs: list) -> tuple[torch.fx.GraphModule, list[str]]:
    """make_fx of forward on fake tensors; (graph, state names of the leading placeholders)."""
    from torch.func import functional_call
    from torch.fx.experimental.proxy_tensor import make_fx

    model = copy.deepcopy(model)
    state = _state(model)
    names = list(state)
    k = len(names)

    def fwd(*flat: Any) -> Any:
        return functional_call(model, dict(zip(names, flat[:k], strict=True)), tuple(flat[k:]))

    flat = [*state.values(), *example_inputs]
    errors = []
    for pre_dispatch in (True, False):
        try:
            with torch.no_grad():
                gm = make_fx(fwd, tracing_mode="fake", pre_dispatch=pre_dispatch)(*flat)
            return gm, names
        except Exception as e:  # noqa: PERF203 - two attempts, each reported
            errors.append(f"{type(e).__name__}: {str(e).strip().splitlines()[0][:240] if str(e) else ''}")
    raise AtenCaptureError(f"aten capture: make_fx failed: {errors[0]}")


# ---------------------------------------------------------------------------------------------
# Op mapping
# ---------------------------------------------------------------------------------------------

# ATen ops that are the torch function of the same name, arguments in the same order.
_SAME_FN = {
    "exp",
    "exp2",
    "log",
    "log2",
    "log10",
    "log1p",
    "expm1",
    "sqrt",
    "rsqrt",
    "abs",
    "neg",
    "sin",
    "cos",
    "tan",
    "tanh",
    "sinh",
    "cosh",
    "asin",
    "acos",
    "atan",
    "atan2",
    "sigmoid",
    "relu",
    "erf",
    "erfc",
    "floor",
    "ceil",
    "round",
    "trunc",
    "frac",
    "sign",
    "reciprocal",
    "square",
    "logical_not",
    "logical_and",
    "logical_or",
    "logical_xor",
    "isnan",
    "isinf",
    "nan_to_num",
    "clamp",
    "clamp_min",
    "clamp_max",
    "minimum",
    "maximum",
    "fmax",
    "fmin",
    "where",
    "cumsum",
    "cumprod",
    "logcumsumexp",
    "tril",
    "triu",
    "flip",
    "roll",
    "cat",
    "stack",
    "zeros_like",
    "ones_like",
    "full_like",
    "empty_like",
    "rand_like",
    "randn_like",
    "einsum",
    "matmul",
    "mm",
    "bmm",
    "baddbmm",
    "outer",
    "diagonal",
    "gather",
    "index_select",
    "selu",
    "topk",
    "sort",
    "argsort",
    "cdist",
    "amax",
    "amin",
    "argmax",
    "argmin",
    "logsumexp",
    "norm",
    "dist",
    "bucketize",
    "searchsorted",
    "randn",
    "rand",
    "randint",
    "normal",
    "bernoulli",
}
# torch.nn.functional ops with the ATen op's name and argument order.
_SAME_F = {
    "silu",
    "mish",
    "hardswish",
    "hardsigmoid",
    "leaky_relu",
    "hardtanh",
    "softplus",
    "threshold",
    "celu",
    "hardshrink",
    "softshrink",
    "relu6",
    "rms_norm",
    "conv1d",
    "conv2d",
    "conv3d",
    "conv_transpose1d",
    "conv_transpose2d",
    "conv_transpose3d",
    "max_pool1d",
    "max_pool2d",
    "max_pool3d",
    "avg_pool1d",
    "avg_pool2d",
    "avg_pool3d",
    "adaptive_avg_pool1d",
    "adaptive_avg_pool2d",
    "adaptive_avg_pool3d",
    "adaptive_max_pool1d",
    "adaptive_max_pool2d",
    "adaptive_max_pool3d",
    "pixel_shuffle",
    "pixel_unshuffle",
    "one_hot",
    "cosine_similarity",
    "pairwise_distance",
}
# Tensor methods (the fx path records them as call_method) with ATen's argument order.
_SAME_METHOD = {
    "view",
    "permute",
    "transpose",
    "t",
    "unsqueeze",
    "squeeze",
    "flatten",
    "unflatten",
    "movedim",
    "split",
    "chunk",
    "unbind",
    "tensor_split",
    "narrow",
    "masked_fill",
    "repeat",
    "sum",
    "mean",
    "prod",
    "var",
    "std",
    "max",
    "min",
    "all",
    "any",
    "contiguous",
    "view_as",
    "reshape_as",
    "expand_as",
    "type_as",
    "swapaxes",
    "swapdims",
    "moveaxis",
    "new_zeros",
    "new_ones",
    "new_full",
    "new_empty",
}
# Binary arithmetic and comparisons: operator.<name> as the fx path writes `a + b`, `a < b`.
_OPERATORS = {
    "add": ("add", "operator.add"),
    "sub": ("sub", "operator.sub"),
    "mul": ("mul", "operator.mul"),
    "div": ("div", "operator.truediv"),
    "pow": ("pow", "operator.pow"),
    "remainder": ("mod", "operator.mod"),
    "floor_divide": ("floor_divide", "operator.floordiv"),
    "eq": ("eq", "operator.eq"),
    "ne": ("ne", "operator.ne"),
    "lt": ("lt", "operator.lt"),
    "le": ("le", "operator.le"),
    "gt": ("gt", "operator.gt"),
    "ge": ("ge", "operator.ge"),
    "bitwise_and": ("and_", "operator.and_"),
    "bitwise_or": ("or_", "operator.or_"),
    "bitwise_xor": ("xor", "operator.xor"),
    "bitwise_not": ("invert", "operator.invert"),
}
# ATen names whose torch-level op has another name.
_RENAMED_FN = {
    "log_sigmoid": ("logsigmoid", "torch.nn.functional.logsigmoid"),
    "special_expit": ("sigmoid", "torch.sigmoid"),
    "linalg_vector_norm": ("norm", "torch.norm"),
    "concat": ("cat", "torch.cat"),
    "concatenate": ("cat", "torch.cat"),
    "clip": ("clamp", "torch.clamp"),
    "absolute": ("abs", "torch.abs"),
    "arctan": ("atan", "torch.atan"),
    "negative": ("neg", "torch.neg"),
    "multiply": ("mul", "torch.mul"),
    "subtract": ("sub", "torch.sub"),
    "true_divide": ("div", "torch.div"),
    "divide": ("div", "torch.div"),
    "greater": ("gt", "torch.gt"),
    "less": ("lt", "torch.lt"),
}
# Ops that give back their input (for a value graph): looked through.
_ALIAS_OPS = {"alias", "detach", "lift_fresh_copy", "lift_fresh", "_assert_tensor_metadata"}
# Python-level calls a pre-dispatch trace records that compute nothing.
_IGNORED_CALLS = ("_set_grad_enabled", "_enter_autocast", "_exit_autocast", "_record_function")
# torch-level ops returning one tensor, whose ATen form returns a tuple (element 0 is it).
_FIRST_OF_TUPLE = {
    "native_layer_norm": "layer_norm",
    "native_group_norm": "group_norm",
    "native_dropout": "dropout",
    "max_pool2d_with_indices": "max_pool2d",
    "max_pool3d_with_indices": "max_pool3d",
    "_native_batch_norm_legit_no_training": "batch_norm",
    "_native_batch_norm_legit": "batch_norm",
    "native_batch_norm": "batch_norm",
}
# Keyword arguments that say nothing about the value.
_NOISE_KWARGS = {"pin_memory", "layout", "device", "non_blocking"}


def _target(name: str) -> str:
    return f"torch.{name}" if hasattr(torch, name) else f"torch.nn.functional.{name}"


class _Mapper:
    """One ATen graph as op dicts (see the module doc)."""

    def __init__(self, gm: torch.fx.GraphModule, state_names: list[str], input_names: list[str]):
        self.gm = gm
        self.nodes = list(gm.graph.nodes)
        self.pos = {n: i for i, n in enumerate(self.nodes)}
        self.state_names = state_names
        self.input_names = input_names
        self.name: dict[torch.fx.Node, str] = {}  # fx node -> op dict name
        self.out: list[dict] = []
        self.const: dict[torch.fx.Node, Any] = {}  # folded values (real tensors)
        self.const_emitted: dict[torch.fx.Node, str] = {}
        self.tuple_first: set[torch.fx.Node] = set()  # mapped to a one-tensor op: [0] is it
        self.params: set[torch.fx.Node] = set()
        self.taken = {n.name for n in self.nodes}
        self.k_const = 0

    # -- helpers -------------------------------------------------------------------------------

    def fresh(self, base: str) -> str:
        base = re.sub(r"\W", "_", base) or "v"
        if base[0].isdigit():
            base = f"p_{base}"
        name, i = base, 0
        while name in self.taken:
            i += 1
            name = f"{base}_{i}"
        self.taken.add(name)
        return name

    def where(self, n: torch.fx.Node) -> str:
        return f"node {n.name} (#{self.pos[n] + 1})"

    def ref(self, v: Any) -> Any:
        """An argument as JSON: node references {"node": name}, constants as fx's _jsonable."""
        from tools.worker.opgraph import _jsonable

        if isinstance(v, torch.fx.Node):
            if v in self.const:
                return {"node": self.const_node(v)}
            if v not in self.name:
                raise AtenCaptureError(f"aten capture: {v.name} is read before it is computed")
            return {"node": self.name[v]}
        if isinstance(v, (list, tuple)):
            return [self.ref(x) for x in v]
        return _jsonable(v)

    def emit(
        self,
        n: torch.fx.Node,
        kind: str,
        op: str,
        target: str,
        args: list,
        kwargs: dict | None = None,
        *,
        name: str | None = None,
        shape: list[int] | None = None,
    ) -> dict:
        """Append one op dict for fx node n (named n's name unless `name`; shape from n's meta
        unless `shape`)."""
        s, d = _meta(n.meta.get("val"))
        node = {
            "name": name or n.name,
            "kind": kind,
            "op": op,
            "target": target,
            "args": args,
            "kwargs": kwargs or {},
            "module_type": None,
            "module_attrs": {},
            "shape": s if shape is None else shape,
            "dtype": d,
        }
        self.out.append(node)
        if name is None:
            self.name[n] = n.name
        return node

    def shape_of(self, v: Any) -> list[int]:
        s, _ = _meta(v.meta.get("val")) if isinstance(v, torch.fx.Node) else (None, None)
        if s is None:
            raise AtenCaptureError(f"aten capture: no shape for {v}")
        return s

    def kw(self, kwargs: dict, drop: tuple[str, ...] = ()) -> dict:
        out = {}
        for k, v in kwargs.items():
            if k in _NOISE_KWARGS or k in drop or v is None:
                continue
            if k == "memory_format" and v == torch.preserve_format:
                continue
            out[k] = self.ref(v)
        return out

    # -- constants -----------------------------------------------------------------------------

    def const_node(self, n: torch.fx.Node) -> str:
        """The op dict describing folded constant n (emitted once, where first read)."""
        from tools.worker.opgraph import constant_op

        if n in self.const_emitted:
            return self.const_emitted[n]
        value = self.const[n]
        if not isinstance(value, torch.Tensor):
            raise AtenCaptureError(
                f"aten capture: constant {n.name} is a {type(value).__name__}, not a tensor"
            )
        name = self.fresh(f"_tensor_constant{self.k_const}")
        target = f"_tensor_constant{self.k_const}"
        self.k_const += 1
        op, kwargs = constant_op(value)
        self.out.append(
            {
                "name": name,
                "kind": "call_function",
                "op": op,
                "target": target,
                "args": [],
                "kwargs": kwargs,
                "module_type": None,
                "module_attrs": {},
                "shape": [int(s) for s in value.shape],
                "dtype": _dtype_name(value.dtype),
            }
        )
        self.const_emitted[n] = name
        return name

    def fold(self, live: set[torch.fx.Node]) -> None:
        """Evaluate every live node that reads no placeholder (masks, ranges, torch.tensor(...))."""
        for n in self.nodes:
            if n not in live:
                continue
            if n.op == "get_attr":
                v = getattr(self.gm, str(n.target), None)
                if isinstance(v, torch.Tensor):
                    self.const[n] = v
                continue
            if n.op != "call_function" or not all(a in self.const for a in n.all_input_nodes):
                continue
            if (
                isinstance(n.target, torch._ops.OpOverload)
                and torch.Tag.nondeterministic_seeded in n.target.tags
            ):
                continue  # fresh noise on every call is no constant

            def real(a: Any) -> Any:
                return self.const[a] if isinstance(a, torch.fx.Node) else a

            args = torch.fx.node.map_arg(n.args, real)
            kwargs = torch.fx.node.map_arg(n.kwargs, real)
            if _mutates(n) and args and isinstance(args[0], torch.Tensor):
                args = (args[0].clone(), *args[1:])
            try:
                with torch.no_grad():
                    self.const[n] = n.target(*args, **kwargs)
            except Exception:
                continue  # not folded: it stays an op of the graph (mapped, or named as unmappable)

    # -- the graph -----------------------------------------------------------------------------

    def run(self) -> list[dict]:
        out_node = next(n for n in self.nodes if n.op == "output")
        live = self.live(out_node)
        self.check_mutations(live)
        self.fold(live)
        k = len(self.state_names)
        placeholders = [n for n in self.nodes if n.op == "placeholder"]
        for i, n in enumerate(placeholders):
            if i < k:
                if n not in live:
                    continue
                target = self.state_names[i]
                name = self.fresh(target.replace(".", "_").lower())
                self.emit(n, "get_attr", "param", target, [], name=name)
                self.params.add(n)
            else:
                arg = self.input_names[i - k]
                name = arg if arg not in self.taken else self.fresh(arg)
                self.taken.add(name)
                self.emit(n, "placeholder", "input", arg, [], name=name)
            self.name[n] = name
        for n in self.nodes:
            if n.op in ("placeholder", "output") or n not in live or n in self.const:
                continue
            if n.op == "get_attr":
                raise AtenCaptureError(
                    f"aten capture: attribute {n.target} is not a tensor at {self.where(n)}"
                )
            self.map(n)
        res = out_node.args[0]
        if isinstance(res, torch.fx.Node):
            args: list = [self.ref(res)]
            shape, dtype = _meta(res.meta.get("val"))
        elif isinstance(res, (list, tuple)) and all(isinstance(r, torch.fx.Node) for r in res):
            args = [[self.ref(r) for r in res]]
            shape, dtype = _meta(res[0].meta.get("val")) if res else (None, None)
        else:
            raise AtenCaptureError(f"aten capture: forward returns {res!r}, not tensors")
        self.out.append(
            {
                "name": "output",
                "kind": "output",
                "op": "output",
                "target": "output",
                "args": args,
                "kwargs": {},
                "module_type": None,
                "module_attrs": {"capture": "aten"},
                "shape": shape,
                "dtype": dtype,
            }
        )
        return self.out

    def live(self, out_node: torch.fx.Node) -> set[torch.fx.Node]:
        seen: set[torch.fx.Node] = set()
        stack = [out_node]
        while stack:
            n = stack.pop()
            if n in seen:
                continue
            seen.add(n)
            stack.extend(n.all_input_nodes)
        return seen

    def check_mutations(self, live: set[torch.fx.Node]) -> None:
        """An in-place op is the out-of-place op when nothing can tell the difference: it writes
        a tensor the forward computed (not an input, parameter or view), and no other reader of
        that tensor comes after it (later reads go through the in-place op's own result)."""
        for n in self.nodes:
            if n.op != "call_function" or not _mutates(n):
                continue
            dst = n.args[0] if n.args else None
            chain = [dst]  # the written tensor and, through views, the tensors it is a view of
            while (
                isinstance(chain[-1], torch.fx.Node)
                and chain[-1].op == "call_function"
                and _is_view(chain[-1])
            ):
                chain.append(chain[-1].args[0] if chain[-1].args else None)
            if n not in live and not any(c in live for c in chain):
                continue  # writes a value nothing reads
            what = f"in-place {_op_text(n)} at {self.where(n)}"
            if not isinstance(dst, torch.fx.Node):
                raise AtenCaptureError(f"aten capture: {what} writes no tensor node")
            if dst.op == "placeholder":
                raise AtenCaptureError(f"aten capture: {what} writes an input or parameter ({dst.name})")
            if dst.op == "call_function" and _is_view(dst):
                raise AtenCaptureError(f"aten capture: {what} writes into a view ({dst.name})")
            for u in dst.users:
                if u is n:
                    continue
                if self.pos[u] > self.pos[n]:
                    raise AtenCaptureError(f"aten capture: {what}: {u.name} reads {dst.name} after the write")
                if u.op == "call_function" and _is_view(u):
                    raise AtenCaptureError(f"aten capture: {what}: {dst.name} has a view ({u.name})")

    def map(self, n: torch.fx.Node) -> None:
        t = n.target
        if t is operator.getitem:
            src, idx = n.args[0], n.args[1]
            if src in self.tuple_first:
                if idx != 0:
                    raise AtenCaptureError(
                        f"aten capture: element {idx} of {_op_text(src)} is used at {self.where(n)}"
                    )
                self.name[n] = self.name[src]
                return
            self.emit(n, "call_function", "getitem", "operator.getitem", [self.ref(src), idx])
            return
        if not isinstance(t, torch._ops.OpOverload):
            name = getattr(t, "__name__", str(t))
            if any(s in name for s in _IGNORED_CALLS):
                return
            raise AtenCaptureError(f"aten capture: no canonical op for {name} at {self.where(n)}")
        packet = t.overloadpacket.__name__
        base = packet[:-1] if packet.endswith("_") and not packet.startswith("_") and _mutates(n) else packet
        handler = _HANDLERS.get(base)
        if handler is None:
            if base in _ALIAS_OPS or packet in ("detach_",):
                self.name[n] = self.name_of(n.args[0], n)
                return
            handler = _generic(base)
        if handler is None or handler(self, n, t._overloadname, list(n.args), dict(n.kwargs)) is False:
            raise AtenCaptureError(f"aten capture: no canonical op for {_op_text(n)} at {self.where(n)}")

    def name_of(self, v: Any, n: torch.fx.Node) -> str:
        r = self.ref(v)
        if not (isinstance(r, dict) and "node" in r):
            raise AtenCaptureError(f"aten capture: {_op_text(n)} of a constant at {self.where(n)}")
        return r["node"]


def _mutates(n: torch.fx.Node) -> bool:
    t = n.target
    return isinstance(t, torch._ops.OpOverload) and t._schema.is_mutable


def _is_view(n: torch.fx.Node) -> bool:
    t = n.target
    return isinstance(t, torch._ops.OpOverload) and (
        t.is_view or t.overloadpacket.__name__ in ("view", "reshape", "expand", "slice", "select")
    )


def _op_text(n: torch.fx.Node) -> str:
    return (
        str(n.target) if isinstance(n.target, torch._ops.OpOverload) else getattr(n.target, "__name__", "?")
    )


# Each handler writes the op dict(s) for one ATen node, or returns False (no mapping).
Handler = Callable[[_Mapper, torch.fx.Node, str, list, dict], Any]


def _generic(base: str) -> Handler | None:
    if base in _SAME_FN or base in _SAME_F:

        def fn(m: _Mapper, n: torch.fx.Node, ov: str, a: list, k: dict) -> None:
            from tools.worker.opgraph import _canonical_name

            target = f"torch.nn.functional.{base}" if base in _SAME_F else _target(base)
            m.emit(n, "call_function", _canonical_name(base), target, m.ref(a), m.kw(k))

        return fn
    if base in _RENAMED_FN:
        op, target = _RENAMED_FN[base]

        def renamed(m: _Mapper, n: torch.fx.Node, ov: str, a: list, k: dict) -> None:
            m.emit(n, "call_function", op, target, m.ref(a), m.kw(k))

        return renamed
    if base in _SAME_METHOD:

        def method(m: _Mapper, n: torch.fx.Node, ov: str, a: list, k: dict) -> None:
            m.emit(n, "call_method", base, base, m.ref(a), m.kw(k))

        return method
    if base in _OPERATORS:
        op, target = _OPERATORS[base]

        def binary(m: _Mapper, n: torch.fx.Node, ov: str, a: list, k: dict) -> None:
            kw = m.kw(k)
            if kw.get("alpha") in (1, 1.0):
                kw.pop("alpha")
            m.emit(n, "call_function", op, target if not kw else f"torch.{base}", m.ref(a), kw)

        return binary
    return None


def _h_rsub(m: _Mapper, n: torch.fx.Node, ov: str, a: list, k: dict) -> Any:
    if k.get("alpha", 1) != 1:
        return False
    m.emit(n, "call_function", "sub", "operator.sub", [m.ref(a[1]), m.ref(a[0])])
    return None


def _h_reshape(m: _Mapper, n: torch.fx.Node, ov: str, a: list, k: dict) -> None:
    method = "view" if n.target.overloadpacket.__name__ == "view" else "reshape"
    m.emit(n, "call_method", method, method, [m.ref(a[0]), [int(s) for s in a[1]]])


def _h_expand(m: _Mapper, n: torch.fx.Node, ov: str, a: list, k: dict) -> None:
    """expand(x, sizes): a dim x already has stays -1 (the run's own size), as a user writes it."""
    src = m.shape_of(a[0])
    sizes = [int(s) for s in a[1]]
    lead = len(sizes) - len(src)
    out = [s if i < lead or src[i - lead] != s or s == 1 else -1 for i, s in enumerate(sizes)]
    m.emit(n, "call_method", "expand", "expand", [m.ref(a[0]), *out])


def _full_slice() -> dict:
    return {"slice": [None, None, None]}


def _index(m: _Mapper, n: torch.fx.Node, src: Any, dim: int, item: Any) -> None:
    rank = len(m.shape_of(src))
    dim = dim % max(rank, 1)
    idx: Any = item if dim == 0 else [_full_slice()] * dim + [item]
    m.emit(n, "call_function", "getitem", "operator.getitem", [m.ref(src), idx])


def _h_slice(m: _Mapper, n: torch.fx.Node, ov: str, a: list, k: dict) -> Any:
    if ov != "Tensor":
        return False
    src = a[0]
    dim = a[1] if len(a) > 1 else k.get("dim", 0)
    start = a[2] if len(a) > 2 else k.get("start")
    end = a[3] if len(a) > 3 else k.get("end")
    step = a[4] if len(a) > 4 else k.get("step", 1)
    size = m.shape_of(src)[dim % len(m.shape_of(src))]
    start = None if start in (None, 0) else int(start)
    end = None if end is None or end >= min(size, _TO_END) else int(end)
    step = None if step in (None, 1) else int(step)
    if start is None and end is None and step is None:
        m.name[n] = m.name_of(src, n)  # x[:] is x
        return None
    _index(m, n, src, dim, {"slice": [start, end, step]})
    return None


def _h_select(m: _Mapper, n: torch.fx.Node, ov: str, a: list, k: dict) -> Any:
    if ov != "int":
        return False
    _index(m, n, a[0], int(a[1]), int(a[2]))
    return None


def _h_index(m: _Mapper, n: torch.fx.Node, ov: str, a: list, k: dict) -> Any:
    if ov != "Tensor":
        return False
    items = [_full_slice() if i is None else m.ref(i) for i in a[1]]
    m.emit(
        n,
        "call_function",
        "getitem",
        "operator.getitem",
        [m.ref(a[0]), items[0] if len(items) == 1 else items],
    )
    return None


def _h_clone(m: _Mapper, n: torch.fx.Node, ov: str, a: list, k: dict) -> None:
    m.emit(n, "call_method", "contiguous", "contiguous", [m.ref(a[0])])


def _h_to(m: _Mapper, n: torch.fx.Node, ov: str, a: list, k: dict) -> None:
    """_to_copy / to(...): a dtype change is x.to(dtype); a device move or a copy is x itself."""
    src = a[0]
    want = _meta(n.meta.get("val"))[1]
    have = _meta(src.meta.get("val"))[1] if isinstance(src, torch.fx.Node) else None
    if want is None or want == have:
        m.name[n] = m.name_of(src, n)
        return
    m.emit(n, "call_method", "to", "to", [m.ref(src), {"dtype": want}])


def _h_softmax(m: _Mapper, n: torch.fx.Node, ov: str, a: list, k: dict) -> None:
    packet = n.target.overloadpacket.__name__
    op = "log_softmax" if "log" in packet else "softmax"
    m.emit(n, "call_function", op, f"torch.{op}", [m.ref(a[0]), int(a[1])])


def _dims_arg(d: Any) -> Any:
    if isinstance(d, (list, tuple)):
        return int(d[0]) if len(d) == 1 else [int(x) for x in d]
    return d


def _h_reduce(m: _Mapper, n: torch.fx.Node, ov: str, a: list, k: dict) -> Any:
    """sum/mean/prod/amax/amin/max/min/argmax/argmin/logsumexp/all/any with dims: written as the
    fx path records `x.sum(dim, keepdim=True)`; the whole-tensor form as `x.sum()`."""
    base = n.target.overloadpacket.__name__
    if base in ("max", "min") and ov in ("other", "binary"):
        op = "maximum" if base == "max" else "minimum"
        m.emit(n, "call_function", op, f"torch.{op}", m.ref(a))
        return None
    dim = a[1] if len(a) > 1 else k.get("dim")
    keep = a[2] if len(a) > 2 else k.get("keepdim", False)
    kw = {}
    if keep:
        kw["keepdim"] = True
    if k.get("dtype") is not None:
        kw["dtype"] = m.ref(k["dtype"])
    args = [m.ref(a[0])]
    if dim is not None and dim != []:
        args.append(_dims_arg(dim))
    if base in ("amax", "amin", "argmax", "argmin", "logsumexp"):
        m.emit(n, "call_function", base, f"torch.{base}", args, kw)
    else:
        m.emit(n, "call_method", base, base, args, kw)
    return None


def _h_var(m: _Mapper, n: torch.fx.Node, ov: str, a: list, k: dict) -> None:
    base = n.target.overloadpacket.__name__
    dim = a[1] if len(a) > 1 else k.get("dim")
    kw: dict[str, Any] = {}
    corr = k.get("correction")
    if ov == "correction":
        kw["correction"] = 1 if corr is None else m.ref(corr)
    elif len(a) > 2 and isinstance(a[2], bool):
        kw["unbiased"] = a[2]
    if k.get("keepdim") or (ov != "correction" and len(a) > 3 and a[3]):
        kw["keepdim"] = True
    args = [m.ref(a[0])] + ([_dims_arg(dim)] if dim is not None else [])
    m.emit(n, "call_method", base, base, args, kw)


def _h_addmm(m: _Mapper, n: torch.fx.Node, ov: str, a: list, k: dict) -> Any:
    """addmm(bias, x, w.t()) -> linear(x, w, bias); any other addmm -> bias + x @ y."""
    if k.get("beta", 1) != 1 or k.get("alpha", 1) != 1:
        return False
    bias, x, y = a[0], a[1], a[2]
    if (
        isinstance(y, torch.fx.Node)
        and y.op == "call_function"
        and isinstance(y.target, torch._ops.OpOverload)
        and y.target.overloadpacket.__name__ == "t"
        and len(m.shape_of(bias)) == 1
    ):
        m.emit(
            n,
            "call_function",
            "linear",
            "torch.nn.functional.linear",
            [m.ref(x), m.ref(y.args[0]), m.ref(bias)],
        )
        return None
    mm = m.fresh(f"{n.name}_mm")
    shape, _ = _meta(n.meta.get("val"))
    m.emit(n, "call_function", "matmul", "torch.mm", [m.ref(x), m.ref(y)], name=mm, shape=shape)
    m.emit(n, "call_function", "add", "operator.add", [{"node": mm}, m.ref(bias)])
    return None


def _h_mm_linear(m: _Mapper, n: torch.fx.Node, ov: str, a: list, k: dict) -> None:
    """mm(x, w.t()) of a 2-D parameter w is linear(x, w) (what F.linear without bias traces to)."""
    x, y = a[0], a[1]
    if (
        isinstance(y, torch.fx.Node)
        and y.op == "call_function"
        and isinstance(y.target, torch._ops.OpOverload)
        and y.target.overloadpacket.__name__ == "t"
        and isinstance(y.args[0], torch.fx.Node)
        and y.args[0] in m.params
    ):
        m.emit(n, "call_function", "linear", "torch.nn.functional.linear", [m.ref(x), m.ref(y.args[0]), None])
        return
    packet = n.target.overloadpacket.__name__
    m.emit(n, "call_function", "matmul", f"torch.{packet}", m.ref(a))


def _h_first_of_tuple(m: _Mapper, n: torch.fx.Node, ov: str, a: list, k: dict) -> Any:
    base = n.target.overloadpacket.__name__
    op = _FIRST_OF_TUPLE[base]
    if base == "native_layer_norm":
        args = [m.ref(a[0]), [int(s) for s in a[1]], m.ref(a[2]), m.ref(a[3]), a[4]]
    elif base == "native_group_norm":
        # (x, weight, bias, N, C, HxW, group, eps)
        args = [m.ref(a[0]), int(a[6]), m.ref(a[1]), m.ref(a[2]), a[7]]
    elif base == "native_dropout":
        args = [m.ref(a[0]), a[1], bool(a[2])]
    elif base.startswith("max_pool"):
        args = m.ref(a)
    elif base == "_native_batch_norm_legit_no_training":
        # (x, weight, bias, running_mean, running_var, momentum, eps)
        args = [m.ref(a[0]), m.ref(a[3]), m.ref(a[4]), m.ref(a[1]), m.ref(a[2]), False, a[5], a[6]]
    elif base in ("_native_batch_norm_legit", "native_batch_norm"):
        # (x, weight, bias, running_mean, running_var, training, momentum, eps)
        if len(a) < 8:
            return False
        args = [m.ref(a[0]), m.ref(a[3]), m.ref(a[4]), m.ref(a[1]), m.ref(a[2]), bool(a[5]), a[6], a[7]]
    else:
        return False
    m.emit(n, "call_function", op, f"torch.nn.functional.{op}", args)
    m.tuple_first.add(n)
    return None


def _h_batch_norm(m: _Mapper, n: torch.fx.Node, ov: str, a: list, k: dict) -> None:
    # aten.batch_norm(x, weight, bias, running_mean, running_var, training, momentum, eps, cudnn)
    args = [m.ref(a[0]), m.ref(a[3]), m.ref(a[4]), m.ref(a[1]), m.ref(a[2]), bool(a[5]), a[6], a[7]]
    m.emit(n, "call_function", "batch_norm", "torch.nn.functional.batch_norm", args)


def _h_instance_norm(m: _Mapper, n: torch.fx.Node, ov: str, a: list, k: dict) -> None:
    # aten.instance_norm(x, weight, bias, running_mean, running_var, use_input_stats, momentum, eps, cudnn)
    args = [m.ref(a[0]), m.ref(a[3]), m.ref(a[4]), m.ref(a[1]), m.ref(a[2]), bool(a[5]), a[6], a[7]]
    m.emit(n, "call_function", "instance_norm", "torch.nn.functional.instance_norm", args)


def _h_constant_pad(m: _Mapper, n: torch.fx.Node, ov: str, a: list, k: dict) -> None:
    value = a[2] if len(a) > 2 else k.get("value", 0)
    kw = {"mode": "constant", "value": None if value in (0, 0.0) else m.ref(value)}
    m.emit(n, "call_function", "pad", "torch.nn.functional.pad", [m.ref(a[0]), [int(p) for p in a[1]]], kw)


def _h_pad(m: _Mapper, n: torch.fx.Node, ov: str, a: list, k: dict) -> None:
    mode = a[2] if len(a) > 2 else k.get("mode", "constant")
    value = a[3] if len(a) > 3 else k.get("value")
    kw = {"mode": mode, "value": None if value in (None, 0, 0.0) else m.ref(value)}
    m.emit(n, "call_function", "pad", "torch.nn.functional.pad", [m.ref(a[0]), [int(p) for p in a[1]]], kw)


def _h_convolution(m: _Mapper, n: torch.fx.Node, ov: str, a: list, k: dict) -> None:
    # aten.convolution(x, w, b, stride, padding, dilation, transposed, output_padding, groups)
    x, w, b, stride, padding, dilation, transposed, out_pad, groups = a[:9]
    nd = len(m.shape_of(w)) - 2
    if transposed:
        op = f"conv_transpose{nd}d"
        args = [
            m.ref(x),
            m.ref(w),
            m.ref(b),
            list(stride),
            list(padding),
            list(out_pad),
            groups,
            list(dilation),
        ]
    else:
        op = f"conv{nd}d"
        args = [m.ref(x), m.ref(w), m.ref(b), list(stride), list(padding), list(dilation), groups]
    m.emit(n, "call_function", op, f"torch.nn.functional.{op}", args)


def _h_embedding(m: _Mapper, n: torch.fx.Node, ov: str, a: list, k: dict) -> None:
    # aten.embedding(weight, indices, ...) -> F.embedding(indices, weight)
    m.emit(n, "call_function", "embedding", "torch.nn.functional.embedding", [m.ref(a[1]), m.ref(a[0])])


def _h_elu(m: _Mapper, n: torch.fx.Node, ov: str, a: list, k: dict) -> Any:
    alpha = a[1] if len(a) > 1 else k.get("alpha", 1.0)
    scale = a[2] if len(a) > 2 else k.get("scale", 1.0)
    in_scale = a[3] if len(a) > 3 else k.get("input_scale", 1.0)
    if scale != 1 or in_scale != 1:
        return False
    m.emit(n, "call_function", "elu", "torch.nn.functional.elu", [m.ref(a[0]), alpha])
    return None


def _h_gelu(m: _Mapper, n: torch.fx.Node, ov: str, a: list, k: dict) -> None:
    approx = k.get("approximate", "none")
    kw = {} if approx == "none" else {"approximate": approx}
    m.emit(n, "call_function", "gelu", "torch.nn.functional.gelu", [m.ref(a[0])], kw)


def _h_like(m: _Mapper, n: torch.fx.Node, ov: str, a: list, k: dict) -> None:
    """zeros_like(x) and friends: the same dtype as x unless a dtype is given."""
    base = n.target.overloadpacket.__name__
    kw = m.kw(k, drop=("memory_format",))
    src_dtype = _meta(a[0].meta.get("val"))[1] if isinstance(a[0], torch.fx.Node) else None
    if kw.get("dtype") == {"dtype": src_dtype}:
        kw.pop("dtype")
    m.emit(n, "call_function", base, f"torch.{base}", m.ref(a), kw)


def _h_sdpa(m: _Mapper, n: torch.fx.Node, ov: str, a: list, k: dict) -> None:
    m.emit(
        n,
        "call_function",
        "scaled_dot_product_attention",
        "torch.nn.functional.scaled_dot_product_attention",
        m.ref(a),
        m.kw(k),
    )


def _h_norm(m: _Mapper, n: torch.fx.Node, ov: str, a: list, k: dict) -> None:
    """layer_norm(x, shape, w, b, eps, cudnn_enable) / group_norm(x, G, w, b, eps, cudnn_enable):
    F's arguments are the first five."""
    base = n.target.overloadpacket.__name__
    args = m.ref(a[:5])
    if base == "layer_norm":
        args[1] = [int(s) for s in a[1]]
    m.emit(n, "call_function", base, f"torch.nn.functional.{base}", args)


def _h_linear(m: _Mapper, n: torch.fx.Node, ov: str, a: list, k: dict) -> None:
    args = m.ref(a) + [None] * (3 - len(a))
    m.emit(n, "call_function", "linear", "torch.nn.functional.linear", args)


_REDUCTIONS = {0: "none", 1: "mean", 2: "sum"}
_LOSS_EXTRA = {"smooth_l1_loss": "beta", "huber_loss": "delta"}


def _h_loss(m: _Mapper, n: torch.fx.Node, ov: str, a: list, k: dict) -> Any:
    """mse_loss(x, y, reduction: int, ...) -> F.mse_loss(x, y, reduction=str, ...)."""
    base = n.target.overloadpacket.__name__
    red = a[2] if len(a) > 2 else k.get("reduction", 1)
    if red not in _REDUCTIONS:
        return False
    kw = {"reduction": _REDUCTIONS[red]}
    if len(a) > 3 and base in _LOSS_EXTRA:
        kw[_LOSS_EXTRA[base]] = a[3]
    m.emit(n, "call_function", base, f"torch.nn.functional.{base}", m.ref(a[:2]), kw)
    return None


def _h_split_sizes(m: _Mapper, n: torch.fx.Node, ov: str, a: list, k: dict) -> None:
    m.emit(n, "call_method", "split", "split", m.ref(a), m.kw(k))


def _h_dropout(m: _Mapper, n: torch.fx.Node, ov: str, a: list, k: dict) -> None:
    m.emit(n, "call_function", "dropout", "torch.nn.functional.dropout", [m.ref(a[0]), a[1], bool(a[2])])


_HANDLERS: dict[str, Handler] = {
    "rsub": _h_rsub,
    "view": _h_reshape,
    "reshape": _h_reshape,
    "_unsafe_view": _h_reshape,
    "expand": _h_expand,
    "slice": _h_slice,
    "select": _h_select,
    "index": _h_index,
    "clone": _h_clone,
    "_to_copy": _h_to,
    "to": _h_to,
    "_softmax": _h_softmax,
    "softmax": _h_softmax,
    "_log_softmax": _h_softmax,
    "log_softmax": _h_softmax,
    "sum": _h_reduce,
    "mean": _h_reduce,
    "prod": _h_reduce,
    "amax": _h_reduce,
    "amin": _h_reduce,
    "max": _h_reduce,
    "min": _h_reduce,
    "argmax": _h_reduce,
    "argmin": _h_reduce,
    "logsumexp": _h_reduce,
    "all": _h_reduce,
    "any": _h_reduce,
    "var": _h_var,
    "std": _h_var,
    "addmm": _h_addmm,
    "mm": _h_mm_linear,
    "batch_norm": _h_batch_norm,
    "instance_norm": _h_instance_norm,
    "constant_pad_nd": _h_constant_pad,
    "pad": _h_pad,
    "convolution": _h_convolution,
    "embedding": _h_embedding,
    "elu": _h_elu,
    "gelu": _h_gelu,
    "zeros_like": _h_like,
    "ones_like": _h_like,
    "full_like": _h_like,
    "empty_like": _h_like,
    "rand_like": _h_like,
    "randn_like": _h_like,
    "scaled_dot_product_attention": _h_sdpa,
    "dropout": _h_dropout,
    "layer_norm": _h_norm,
    "group_norm": _h_norm,
    "linear": _h_linear,
    "mse_loss": _h_loss,
    "l1_loss": _h_loss,
    "smooth_l1_loss": _h_loss,
    "huber_loss": _h_loss,
    "split_with_sizes": _h_split_sizes,
    **{name: _h_first_of_tuple for name in _FIRST_OF_TUPLE},
}


def capture_aten(model: nn.Module, example_inputs: list) -> list[dict]:
    """The forward as op dicts (not yet normalised); raises AtenCaptureError naming what failed."""
    gm, state_names = trace(model, example_inputs)
    names = _forward_names(model, len(example_inputs))
    return _Mapper(gm, state_names, names).run()
