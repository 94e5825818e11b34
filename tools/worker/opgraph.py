"""Capture a reference module's computation as a list of OpNode dicts (runs in the worker).

torch.fx symbolic tracing gives the torch-level graph; ShapeProp (run on the real example inputs)
adds each node's shape and dtype. Ops get canonical names so the expert model can pattern-match
without caring whether the author wrote `torch.relu(x)`, `F.relu(x)`, `x.relu()` or `nn.ReLU()`.

When symbolic tracing fails because the forward turns a shape into Python values (e.g.
`n = q.shape[-2]; torch.ones(n, n, device=q.device).triu(1)`), a second tracer runs the same
torch-level trace with concrete values alongside: shapes, sizes, devices and dtypes are the
example inputs' own, so shape arithmetic specializes to them (the op graph records concrete
shapes anyway), while data-dependent control flow still fails.

Tensors the forward builds without touching its inputs become fx constants; a constant that is a
triangular mask (what `triu`/`tril` of ones, `~tril(...)`, `arange(n)[:, None] < arange(n)`...
produce) is reported as a canonical `tri_mask` node (rows, cols, diagonal, upper, fill) so a
family can compute it from indices; any other constant is an opaque `tensor_constant` node.
"""

from __future__ import annotations

import contextlib
import copy
import inspect
import math
import operator
import re
from typing import Any

import torch
import torch.fx
import torch.nn as nn
from torch.fx.passes.shape_prop import ShapeProp

# Raw function/method names whose canonical name differs from the name itself.
_ALIASES: dict[str, str] = {
    "add": "add",
    "iadd": "add",
    "sub": "sub",
    "isub": "sub",
    "subtract": "sub",
    "mul": "mul",
    "imul": "mul",
    "multiply": "mul",
    "truediv": "div",
    "itruediv": "div",
    "div": "div",
    "divide": "div",
    "true_divide": "div",
    "floordiv": "floor_divide",
    "neg": "neg",
    "negative": "neg",
    "pow": "pow",
    "ipow": "pow",
    "matmul": "matmul",
    "mm": "matmul",
    "bmm": "matmul",
    "clip": "clamp",
    "clamp": "clamp",
    "clamp_min": "clamp_min",
    "clamp_max": "clamp_max",
    "getitem": "getitem",
    "max_pool1d": "max_pool1d",
    "max_pool2d": "max_pool2d",
    "max_pool3d": "max_pool3d",
    "relu_": "relu",
    "sigmoid_": "sigmoid",
    "tanh_": "tanh",
    "lt": "lt",
    "gt": "gt",
    "le": "le",
    "ge": "ge",
    "eq": "eq",
    "ne": "ne",
    "abs": "abs",
    "absolute": "abs",
    "conv1d": "conv1d",
    "conv2d": "conv2d",
    "conv3d": "conv3d",
    "amax": "amax",
    "amin": "amin",
    "log_sigmoid": "logsigmoid",
    "special_expit": "sigmoid",
    "expit": "sigmoid",
    "arctan": "atan",
    "greater": "gt",
    "less": "lt",
}

# Tensor factories that draw new random values on every call.
RANDOM_OPS = {"randn", "rand", "randn_like", "rand_like", "normal"}

# nn.Module classes whose canonical op name is not just the snake_case class name.
_MODULE_OPS: dict[str, str] = {
    "Linear": "linear",
    "ReLU": "relu",
    "ReLU6": "relu6",
    "LeakyReLU": "leaky_relu",
    "GELU": "gelu",
    "SiLU": "silu",
    "Mish": "mish",
    "Softplus": "softplus",
    "ELU": "elu",
    "SELU": "selu",
    "CELU": "celu",
    "Hardtanh": "hardtanh",
    "Hardswish": "hardswish",
    "Hardsigmoid": "hardsigmoid",
    "Sigmoid": "sigmoid",
    "Tanh": "tanh",
    "Softsign": "softsign",
    "LogSigmoid": "logsigmoid",
    "Tanhshrink": "tanhshrink",
    "Softmax": "softmax",
    "LogSoftmax": "log_softmax",
    "Identity": "identity",
    "Dropout": "dropout",
    "Conv1d": "conv1d",
    "Conv2d": "conv2d",
    "Conv3d": "conv3d",
    "ConvTranspose1d": "conv_transpose1d",
    "ConvTranspose2d": "conv_transpose2d",
    "ConvTranspose3d": "conv_transpose3d",
    "BatchNorm1d": "batch_norm",
    "BatchNorm2d": "batch_norm",
    "BatchNorm3d": "batch_norm",
    "LayerNorm": "layer_norm",
    "GroupNorm": "group_norm",
    "InstanceNorm1d": "instance_norm",
    "InstanceNorm2d": "instance_norm",
    "InstanceNorm3d": "instance_norm",
    "RMSNorm": "rms_norm",
    "MaxPool1d": "max_pool1d",
    "MaxPool2d": "max_pool2d",
    "MaxPool3d": "max_pool3d",
    "AvgPool1d": "avg_pool1d",
    "AvgPool2d": "avg_pool2d",
    "AvgPool3d": "avg_pool3d",
    "Flatten": "flatten",
    "MSELoss": "mse_loss",
    "SmoothL1Loss": "smooth_l1_loss",
    "HuberLoss": "huber_loss",
    "KLDivLoss": "kl_div",
    "CrossEntropyLoss": "cross_entropy",
    "TripletMarginLoss": "triplet_margin_loss",
    "CosineSimilarity": "cosine_similarity",
    "LSTM": "lstm",
    "GRU": "gru",
    "RNN": "rnn",
    "MultiheadAttention": "multihead_attention",
    "AdaptiveAvgPool1d": "adaptive_avg_pool1d",
    "AdaptiveAvgPool2d": "adaptive_avg_pool2d",
    "AdaptiveAvgPool3d": "adaptive_avg_pool3d",
    "AdaptiveMaxPool1d": "adaptive_max_pool1d",
    "AdaptiveMaxPool2d": "adaptive_max_pool2d",
    "AdaptiveMaxPool3d": "adaptive_max_pool3d",
}

# Constructor attributes worth reporting for call_module nodes (when the module has them).
_MODULE_ATTRS = (
    "in_features",
    "out_features",
    "in_channels",
    "out_channels",
    "kernel_size",
    "stride",
    "padding",
    "dilation",
    "groups",
    "output_padding",
    "padding_mode",
    "eps",
    "affine",
    "momentum",
    "track_running_stats",
    "num_features",
    "num_groups",
    "num_channels",
    "normalized_shape",
    "elementwise_affine",
    "dim",
    "negative_slope",
    "approximate",
    "alpha",
    "beta",
    "threshold",
    "min_val",
    "max_val",
    "p",
    "inplace",
    "ceil_mode",
    "count_include_pad",
    "return_indices",
    "start_dim",
    "end_dim",
    "reduction",
    "margin",
    "lambd",
    "delta",
    "log_target",
    "label_smoothing",
    "divisor_override",
    "ignore_index",
    "output_size",
    "batch_first",
    "bidirectional",
    "num_layers",
    "hidden_size",
    "input_size",
    "nonlinearity",
    "embed_dim",
    "num_heads",
    "unflattened_size",
    "proj_size",
    # ConstantPad*d's fill
    "value",
)


def _snake(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


def _canonical_name(raw: str) -> str:
    raw = raw.strip("_") if raw.startswith("__") else raw
    return _ALIASES.get(raw, raw)


def _jsonable(v: Any) -> Any:
    """Constants as JSON values; node references as {"node": name}."""
    if isinstance(v, torch.fx.Node):
        return {"node": v.name}
    if isinstance(v, bool) or v is None or isinstance(v, (int, str)):
        return v
    if isinstance(v, float):
        if math.isfinite(v):
            return v
        return {"float": repr(v)}  # inf / nan are not JSON; keep them recognisable
    if isinstance(v, (list, tuple)):
        return [_jsonable(x) for x in v]
    if isinstance(v, dict):
        return {str(k): _jsonable(x) for k, x in v.items()}
    if isinstance(v, torch.dtype):
        return {"dtype": str(v).replace("torch.", "")}
    if isinstance(v, torch.device):
        return {"device": str(v)}
    if isinstance(v, torch.Size):
        return [int(x) for x in v]
    if isinstance(v, slice):
        return {"slice": [_jsonable(v.start), _jsonable(v.stop), _jsonable(v.step)]}
    if v is Ellipsis:
        return {"ellipsis": True}
    if isinstance(v, torch.memory_format):
        return {"memory_format": str(v)}
    return {"repr": repr(v)[:200]}


def _function_name(target: Any) -> str:
    if target is operator.getitem:
        return "getitem"
    name = getattr(target, "__name__", None) or str(target)
    return _canonical_name(name)


def _target_text(target: Any) -> str:
    if isinstance(target, str):
        return target
    mod = getattr(target, "__module__", None) or ""
    name = getattr(target, "__qualname__", None) or getattr(target, "__name__", None) or repr(target)
    # torch.softmax's qualname is "_VariableFunctionsClass.softmax": report what the user wrote.
    name = name.replace("_VariableFunctionsClass.", "").replace("_TensorBase.", "")
    if mod in ("_operator", "operator"):
        mod = "operator"
    elif mod.startswith("torch._C._nn") or mod == "torch.nn.functional":
        mod = "torch.nn.functional"
    elif mod.startswith("torch._C") or mod.startswith("torch._tensor"):
        mod = "torch"
    return f"{mod}.{name}" if mod else name


def _module_attrs(mod: nn.Module) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for attr in _MODULE_ATTRS:
        if hasattr(mod, attr):
            v = getattr(mod, attr)
            if isinstance(v, (nn.Module, torch.Tensor)) or callable(v):
                continue
            out[attr] = _jsonable(v)
    # `bias` is a tensor attribute; what the generator needs is whether it exists.
    if hasattr(mod, "bias") and isinstance(mod.bias, (torch.Tensor, type(None))):
        out["bias"] = mod.bias is not None
    if isinstance(mod, nn.MultiheadAttention):
        out["packed_in_proj"] = bool(mod._qkv_same_embed_dim) and mod.in_proj_weight is not None
        out["in_proj_bias"] = mod.in_proj_bias is not None
        out["out_proj_bias"] = mod.out_proj.bias is not None
        out["bias_kv"] = mod.bias_k is not None
        out["add_zero_attn"] = bool(mod.add_zero_attn)
    return out


def _tensor_meta(node: torch.fx.Node) -> tuple[list[int] | None, str | None]:
    meta = node.meta.get("tensor_meta")
    if meta is None:
        return None, None
    shape = getattr(meta, "shape", None)
    dtype = getattr(meta, "dtype", None)
    if shape is None:  # tuple outputs: describe the first tensor
        if isinstance(meta, (list, tuple)) and meta and hasattr(meta[0], "shape"):
            return [int(s) for s in meta[0].shape], str(meta[0].dtype).replace("torch.", "")
        return None, None
    return [int(s) for s in shape], str(dtype).replace("torch.", "")


# Tensor attributes / methods that describe a tensor rather than compute on it: the concrete
# tracer answers them with the example value's own (a Python int, torch.Size, device, dtype).
_META_ATTRS = {"shape", "device", "dtype", "ndim", "is_cuda", "layout", "is_sparse", "is_quantized"}
_META_METHODS = {
    "size",
    "dim",
    "ndimension",
    "numel",
    "nelement",
    "stride",
    "element_size",
    "get_device",
    "is_contiguous",
    "is_floating_point",
    "is_complex",
}


class _ConcreteProxy(torch.fx.Proxy):
    """A proxy that knows its example value: shape/device/dtype queries return real values."""

    def __getattr__(self, k: str) -> Any:
        if k in _META_ATTRS:
            v = self.node.meta.get("egg_value")
            if isinstance(v, torch.Tensor):
                return getattr(v, k)
        return super().__getattr__(k)

    def __len__(self) -> int:
        v = self.node.meta.get("egg_value")
        if isinstance(v, torch.Tensor):
            return len(v)
        return super().__len__()


# nn.Module's own attribute lookup and call, as they are outside a trace.
_MODULE_GETATTR = nn.Module.__getattr__
_MODULE_CALL = nn.Module.__call__


@contextlib.contextmanager
def _unpatched_modules():
    """While fx traces, Module.__call__ and __getattr__ record into the graph; computing a
    submodule's real output (or reading its parameter) needs the originals back for a moment."""
    traced_getattr, traced_call = nn.Module.__getattr__, nn.Module.__call__
    nn.Module.__getattr__, nn.Module.__call__ = _MODULE_GETATTR, _MODULE_CALL  # type: ignore[method-assign]
    try:
        yield
    finally:
        nn.Module.__getattr__, nn.Module.__call__ = traced_getattr, traced_call  # type: ignore[method-assign]


class _ConcreteTracer(torch.fx.Tracer):
    """torch.fx tracing with each node's example value computed as it is created."""

    def __init__(self, example_inputs: list) -> None:
        super().__init__()
        self._examples = list(example_inputs)
        self._placeholder_i = 0

    def proxy(self, node: torch.fx.Node) -> torch.fx.Proxy:
        return _ConcreteProxy(node, self)

    def _value(self, a: Any) -> Any:
        def one(x: Any) -> Any:
            if isinstance(x, torch.fx.Proxy):
                if "egg_value" not in x.node.meta:
                    raise RuntimeError(f"no example value for {x.node.name}")
                return x.node.meta["egg_value"]
            return x

        return torch.fx.node.map_aggregate(a, one)

    def create_proxy(self, kind, target, args, kwargs, name=None, type_expr=None, proxy_factory_fn=None):  # type: ignore[override]
        if kind == "call_method" and target in _META_METHODS:
            vals = self._value(args)
            return getattr(vals[0], target)(*vals[1:], **self._value(kwargs))
        if kind == "placeholder":
            # past the examples: a parameter traced at its default (concrete_args)
            i = self._placeholder_i
            value = self._examples[i] if i < len(self._examples) else None
            self._placeholder_i += 1
        else:
            value = None
        p = super().create_proxy(kind, target, args, kwargs, name, type_expr, proxy_factory_fn)
        if kind == "placeholder":
            p.node.meta["egg_value"] = value
            return p
        vals, kw = self._value(args), self._value(kwargs)
        if kind == "get_attr":
            with _unpatched_modules():
                obj: Any = self.root
                for part in str(target).split("."):
                    obj = getattr(obj, part)
            value = obj
        elif kind == "call_module":
            with _unpatched_modules():
                value = self.root.get_submodule(str(target))(*vals, **kw)
        elif kind == "call_method":
            value = getattr(vals[0], str(target))(*vals[1:], **kw)
        elif kind == "call_function":
            value = target(*vals, **kw)
        p.node.meta["egg_value"] = value
        return p


def _defaults_not_given(model: torch.nn.Module, n_given: int) -> dict[str, Any]:
    """forward's parameters that get_inputs() leaves out, at their defaults (`mask=None`): traced
    as the constants they are, so `if mask is not None` takes the branch the reference runs."""
    try:
        params = list(inspect.signature(model.forward).parameters.values())
    except (TypeError, ValueError):
        return {}
    out: dict[str, Any] = {}
    for p in params[n_given:]:
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) or p.default is p.empty:
            return {}
        out[p.name] = p.default
    return out


def _concrete_trace(model: torch.nn.Module, example_inputs: list) -> torch.fx.GraphModule:
    # Clone the examples: an in-place op in the forward must not change the caller's inputs.
    examples = [x.clone() if isinstance(x, torch.Tensor) else x for x in example_inputs]
    tracer = _ConcreteTracer(examples)
    with torch.no_grad():
        graph = tracer.trace(model, concrete_args=_defaults_not_given(model, len(examples)) or None)
    for n in graph.nodes:
        n.meta.pop("egg_value", None)
    return torch.fx.GraphModule(tracer.root, graph, type(model).__name__)


def _tri_mask(t: torch.Tensor) -> dict[str, Any] | None:
    """(rows, cols, diagonal, upper, fill) when `t` is a triangular mask over its last two dims:
    upper: t[i, j] == fill where j - i >= diagonal, else 0/False (triu); lower: j - i <= diagonal.
    Leading dims must be 1 (a mask broadcast over batch and heads)."""
    if t.dim() < 2 or any(d != 1 for d in t.shape[:-2]) or t.numel() == 0:
        return None
    m = t.reshape(t.shape[-2], t.shape[-1])
    rows, cols = m.shape
    if m.dtype == torch.bool:
        on, fill = m, True
    else:
        nz = m[m != 0]
        if nz.numel() == 0 or not bool((nz == nz.flatten()[0]).all()):
            return None
        on = m != 0
        fill = nz.flatten()[0].item()
    if bool(on.all()) or not bool(on.any()):
        return None
    d = torch.arange(cols, device=m.device)[None, :] - torch.arange(rows, device=m.device)[:, None]
    k = int(d[on].min())
    if torch.equal(on, d >= k):
        return {"rows": rows, "cols": cols, "diagonal": k, "upper": True, "fill": _jsonable(fill)}
    k = int(d[on].max())
    if torch.equal(on, d <= k):
        return {"rows": rows, "cols": cols, "diagonal": k, "upper": False, "fill": _jsonable(fill)}
    return None


def _constant_node(
    gm: torch.fx.GraphModule, model: torch.nn.Module, n: torch.fx.Node
) -> tuple[str, dict] | None:
    """(op, kwargs) for a get_attr of a tensor the forward built (an fx constant), else None."""
    target = str(n.target)
    if "." in target or not target.startswith("_tensor_constant") or hasattr(model, target):
        return None
    value = getattr(gm, target, None)
    if not isinstance(value, torch.Tensor):
        return None
    return constant_op(value)


def constant_op(value: torch.Tensor) -> tuple[str, dict]:
    """(op, kwargs) describing a tensor the forward built without its inputs: a triangular mask
    (`tri_mask`), a number (`scalar_constant`), or else an opaque `tensor_constant`."""
    tri = _tri_mask(value)
    if tri is not None:
        return "tri_mask", tri
    if value.numel() == 1 and value.dim() == 0 and value.dtype.is_floating_point:
        # torch.tensor(self.c) built in forward: a number, written into the ops that read it
        return "scalar_constant", {"value": _jsonable(float(value.item()))}
    return "tensor_constant", {}


def _shape_only_tensors(gm: torch.fx.GraphModule) -> list[str]:
    """Tensor-valued nodes computed from input *shapes* only (e.g. `torch.arange(x.size(1))`,
    `torch.ones(n, n).triu(1)` with n traced): constants once shapes are specialized."""
    data: dict[str, bool] = {}
    found: list[str] = []
    for n in gm.graph.nodes:
        if n.op in ("placeholder", "get_attr"):
            data[n.name] = True
            continue
        if n.op == "output":
            continue
        meta_query = (n.op == "call_method" and n.target in _META_METHODS) or (
            n.op == "call_function" and n.target is getattr and len(n.args) > 1 and n.args[1] in _META_ATTRS
        )
        if meta_query:
            data[n.name] = False
            continue
        data[n.name] = any(data.get(a.name, True) for a in n.all_input_nodes)
        if n.op == "call_function" and getattr(n.target, "__name__", "") in RANDOM_OPS:
            # fresh noise on every call (torch.randn(n, d)): a constant it is not
            data[n.name] = True
        if (
            not data[n.name]
            and n.meta.get("tensor_meta") is not None
            and hasattr(n.meta["tensor_meta"], "shape")
        ):
            found.append(n.name)
    return found


def _traced(gm: torch.fx.GraphModule, model: torch.nn.Module) -> torch.fx.GraphModule:
    """The traced module with every attribute the graph reads restored from a fresh copy of
    `model`: a forward that assigns to self (`self.h = torch.tanh(...)`) leaves a proxy of the
    trace in the traced root, which shape propagation would then extend instead of running."""
    clean = copy.deepcopy(model)
    for n in gm.graph.nodes:
        if n.op != "get_attr":
            continue
        *path, last = str(n.target).split(".")
        src: Any = clean
        dst: Any = gm
        try:
            for p in path:
                src, dst = getattr(src, p), getattr(dst, p)
            value = getattr(src, last)
        except AttributeError:
            continue  # an fx constant the trace created
        if isinstance(value, torch.Tensor) and not isinstance(value, nn.Parameter):
            setattr(dst, last, value)
    return gm


def capture(model: torch.nn.Module, example_inputs: list) -> tuple[list[dict], str | None]:
    """Trace `model` and propagate shapes with `example_inputs`: torch.fx symbolic tracing, then
    the concrete-shape fx tracer, then (when both fail) the ATen-level trace. The output node's
    module_attrs["capture"] says which ("fx", "fx-concrete", "aten").

    Returns (nodes, None) on success and ([], reason) when tracing or shape propagation fails.
    """
    own_attrs = set(vars(model))
    own_attrs |= {n for n, _ in model.named_parameters()} | {n for n, _ in model.named_buffers()}
    try:
        # Each trace gets its own copy: a forward that assigns to self (self.h = ...) would
        # otherwise leave a proxy of this trace in the module for the next trace to extend.
        defaults = _defaults_not_given(model, len(example_inputs)) or None
        gm = _traced(torch.fx.symbolic_trace(copy.deepcopy(model), concrete_args=defaults), model)
        path = "fx"
    except Exception as e:  # shape-derived Python values, data-dependent control flow...
        first = f"torch.fx symbolic_trace failed: {type(e).__name__}: {str(e)[:300]}"
        try:
            gm = _traced(_concrete_trace(copy.deepcopy(model), example_inputs), model)
            path = "fx-concrete"
        except Exception as e2:  # data-dependent control flow etc.: a description, not a crash
            fx_failed = f"{first}; concrete-shape trace failed: {type(e2).__name__}: {str(e2)[:200]}"
            return _capture_aten(model, example_inputs, fx_failed)
    try:
        with torch.no_grad():
            ShapeProp(gm).propagate(*example_inputs)
    except Exception as e:
        return [], f"shape propagation failed: {type(e).__name__}: {str(e)[:300]}"
    if _shape_only_tensors(gm):
        # Masks/positions built from traced sizes: trace again with concrete shapes so they become
        # constants (and canonical tri_mask nodes); keep the symbolic graph if that fails.
        try:
            cgm = _traced(_concrete_trace(copy.deepcopy(model), example_inputs), model)
            with torch.no_grad():
                ShapeProp(cgm).propagate(*example_inputs)
            gm, path = cgm, "fx-concrete"
        except Exception:
            pass

    modules = dict(gm.named_modules())
    nodes: list[dict] = []
    for n in gm.graph.nodes:
        shape, dtype = _tensor_meta(n)
        module_type = None
        attrs: dict[str, Any] = {}
        if n.op == "placeholder":
            op = "input"
            target = str(n.target)
        elif n.op == "get_attr":
            op = "param"
            target = str(n.target)
            const = _constant_node(gm, own_attrs, n)
            if const is not None:
                # Built inside forward (not a parameter or buffer): ModelNew has no such attribute.
                op, attrs_kw = const
                nodes.append(
                    {
                        "name": n.name,
                        "kind": "call_function",
                        "op": op,
                        "target": target,
                        "args": [],
                        "kwargs": attrs_kw,
                        "module_type": None,
                        "module_attrs": {},
                        "shape": shape,
                        "dtype": dtype,
                    }
                )
                continue
        elif n.op == "output":
            op = "output"
            target = "output"
            attrs = {"capture": path}
        elif n.op == "call_module":
            mod = modules[str(n.target)]
            module_type = type(mod).__name__
            op = _MODULE_OPS.get(module_type, _snake(module_type))
            attrs = _module_attrs(mod)
            target = str(n.target)
        elif n.op == "call_method":
            op = _canonical_name(str(n.target))
            target = str(n.target)
        else:
            op = _function_name(n.target)
            target = _target_text(n.target)
        nodes.append(
            {
                "name": n.name,
                "kind": n.op,
                "op": op,
                "target": target,
                "args": _jsonable(list(n.args)),
                "kwargs": _jsonable(dict(n.kwargs)),
                "module_type": module_type,
                "module_attrs": attrs,
                "shape": shape,
                "dtype": dtype,
            }
        )
    return normalize(nodes), None


def _capture_aten(
    model: torch.nn.Module, example_inputs: list, fx_failed: str
) -> tuple[list[dict], str | None]:
    """The third path (tools/worker/atencapture.py), when neither fx trace works: the graph, or
    why not (both fx failures and the ATen one)."""
    from tools.worker.atencapture import AtenCaptureError, capture_aten

    try:
        nodes = capture_aten(model, example_inputs)
    except AtenCaptureError as e:
        return [], f"{fx_failed}; {str(e)[:400]}"
    except Exception as e:  # a tracer crash is a description too
        return [], f"{fx_failed}; aten capture failed: {type(e).__name__}: {str(e)[:300]}"
    return normalize(nodes), None


# ---------------------------------------------------------------------------------------------
# Normalisation: spellings the families do not know, rewritten into ops they do
# ---------------------------------------------------------------------------------------------


def _ones(v: Any, nd: int) -> bool:
    vals = v if isinstance(v, list) else [v] * nd
    return len(vals) == nd and all(x == 1 for x in vals)


def _adaptive_pool(n: dict) -> dict | None:
    """adaptive_{avg,max}_pool{n}d to a single output element per channel -> mean / amax over
    the pooled dims, keepdim (what global pooling computes, at any input size)."""
    op = n["op"]
    m = re.fullmatch(r"adaptive_(avg|max)_pool([123])d", op)
    if m is None:
        return None
    nd = int(m.group(2))
    if n["kind"] == "call_module":
        out_size = n["module_attrs"].get("output_size")
        if n["module_attrs"].get("return_indices"):
            return None
        src = n["args"][0] if n["args"] else None
    else:
        out_size = n["args"][1] if len(n["args"]) > 1 else n["kwargs"].get("output_size")
        src = n["args"][0] if n["args"] else n["kwargs"].get("input")
    if not _ones(out_size, nd) or not isinstance(src, dict) or "node" not in src:
        return None
    red = "mean" if m.group(1) == "avg" else "amax"
    return {
        **n,
        "kind": "call_function",
        "op": red,
        "target": f"torch.{red}",
        "args": [src, list(range(-nd, 0))],
        "kwargs": {"keepdim": True},
        "module_type": None,
        "module_attrs": {},
    }


def _node(
    name: str, kind: str, op: str, target: str, args: list, shape: list[int] | None, dtype: Any
) -> dict:
    return {
        "name": name,
        "kind": kind,
        "op": op,
        "target": target,
        "args": args,
        "kwargs": {},
        "module_type": None,
        "module_attrs": {},
        "shape": shape,
        "dtype": dtype,
    }


def _einsum(n: dict, by_name: dict[str, dict]) -> list[dict] | None:
    """A two-operand einsum as views around one batched matmul: permute each operand to
    (batch, free, contracted) / (batch, contracted, free), merge each group into one dim (sizes
    read from the operands at run time), matmul, split the dims back and permute to the output
    order. None for what this does not cover (ellipsis, repeated or summed-out indices)."""
    parsed = _einsum_terms(n)
    if parsed is None or len(parsed[0]) != 2:
        return None
    (a_idx, b_idx), out_idx, ops = parsed
    sa, sb = (by_name[o["node"]]["shape"] for o in ops)
    if sa is None or sb is None or len(sa) != len(a_idx) or len(sb) != len(b_idx):
        return None
    if any(len(set(x)) != len(x) for x in (a_idx, b_idx, out_idx)):
        return None
    batch = [c for c in out_idx if c in a_idx and c in b_idx]
    contr = [c for c in a_idx if c in b_idx and c not in out_idx]
    left = [c for c in out_idx if c in a_idx and c not in b_idx]
    right = [c for c in out_idx if c in b_idx and c not in a_idx]
    if set(a_idx) != set(batch + contr + left) or set(b_idx) != set(batch + contr + right):
        return None
    size = {c: sa[a_idx.index(c)] for c in a_idx} | {c: sb[b_idx.index(c)] for c in b_idx}
    name, dtype = n["name"], n["dtype"]
    new: list[dict] = []
    k = [0]

    def fresh() -> str:
        k[0] += 1
        return f"{name}_e{k[0]}"

    def size_of(c: str) -> Any:
        """A run-time size node of index c (read from the operand that has it)."""
        src, idx = (ops[0], a_idx) if c in a_idx else (ops[1], b_idx)
        m = fresh()
        new.append(_node(m, "call_method", "size", "size", [src, idx.index(c)], None, None))
        return {"node": m}

    def product(cs: list[str]) -> Any:
        if not cs:
            return 1
        acc = size_of(cs[0])
        for c in cs[1:]:
            m = fresh()
            new.append(_node(m, "call_function", "mul", "operator.mul", [acc, size_of(c)], None, None))
            acc = {"node": m}
        return acc

    def permuted(src: dict, idx: str, order: list[str]) -> tuple[dict, list[int]]:
        perm = [idx.index(c) for c in order]
        shape = [size[c] for c in order]
        if perm == list(range(len(perm))):
            return src, shape
        m = fresh()
        new.append(_node(m, "call_method", "permute", "permute", [src, perm], shape, dtype))
        return {"node": m}, shape

    def merged(src: dict, groups: list[list[str]]) -> dict:
        m = fresh()
        shape = [math.prod(size[c] for c in g) for g in groups]
        new.append(
            _node(m, "call_method", "reshape", "reshape", [src, [product(g) for g in groups]], shape, dtype)
        )
        return {"node": m}

    pa, _ = permuted(ops[0], a_idx, batch + left + contr)
    pb, _ = permuted(ops[1], b_idx, batch + contr + right)
    ra = merged(pa, [batch, left, contr])
    rb = merged(pb, [batch, contr, right])
    mm = fresh()
    nb, nl, nr = (math.prod(size[c] for c in g) for g in (batch, left, right))
    new.append(_node(mm, "call_function", "matmul", "torch.matmul", [ra, rb], [nb, nl, nr], dtype))
    split = batch + left + right
    perm = [split.index(c) for c in out_idx]
    last = name if perm == list(range(len(perm))) else fresh()
    new.append(
        _node(
            last,
            "call_method",
            "reshape",
            "reshape",
            [{"node": mm}, [size_of(c) for c in split]],
            [size[c] for c in split],
            dtype,
        )
    )
    if last != name:
        new.append(
            _node(name, "call_method", "permute", "permute", [{"node": last}, perm], n["shape"], dtype)
        )
    return new


def _einsum_terms(n: dict) -> tuple[list[str], str, list] | None:
    """(operand index strings, output indices, operand refs) of an explicit einsum, else None."""
    args = n["args"]
    if n["op"] != "einsum" or not args or not isinstance(args[0], str):
        return None
    ops = args[1:]
    if len(ops) == 1 and isinstance(ops[0], list):
        ops = ops[0]
    eq = args[0].replace(" ", "")
    if "..." in eq or "->" not in eq or not all(isinstance(o, dict) and "node" in o for o in ops):
        return None
    lhs, out = eq.split("->")
    terms = lhs.split(",")
    if len(terms) != len(ops):
        return None
    return terms, out, ops


def _einsum_scale(n: dict, by_name: dict[str, dict]) -> list[dict] | None:
    """A two-operand einsum that contracts nothing and where one operand's indices are all the
    other's (`bclhn,bhcl->bclhn`): a broadcast multiply. Each operand is permuted to the output's
    order and given size-1 dims (unsqueeze) for the indices it lacks."""
    parsed = _einsum_terms(n)
    if parsed is None or len(parsed[0]) != 2:
        return None
    (a_idx, b_idx), out, ops = parsed
    if any(len(set(x)) != len(x) for x in (a_idx, b_idx, out)) or set(a_idx) | set(b_idx) != set(out):
        return None
    if not (set(a_idx) <= set(b_idx) or set(b_idx) <= set(a_idx)):
        return None  # an outer product: the batched matmul of _einsum
    name, dtype = n["name"], n["dtype"]
    size: dict[str, int] = {}
    for idx, o in zip((a_idx, b_idx), ops, strict=True):
        shape = by_name[o["node"]]["shape"]
        if shape is None or len(shape) != len(idx):
            return None
        size.update(zip(idx, shape, strict=True))
    new: list[dict] = []

    def aligned(src: dict, idx: str, tag: str) -> dict:
        order = [c for c in out if c in idx]
        perm = [idx.index(c) for c in order]
        if perm != list(range(len(perm))):
            m = f"{name}_{tag}p"
            new.append(
                _node(m, "call_method", "permute", "permute", [src, perm], [size[c] for c in order], dtype)
            )
            src = {"node": m}
        have = list(order)
        for j, c in enumerate(out):
            if c not in idx:
                have.insert(j, c)
                m = f"{name}_{tag}u{j}"
                shape = [size[x] if x in idx else 1 for x in have]
                new.append(_node(m, "call_method", "unsqueeze", "unsqueeze", [src, j], shape, dtype))
                src = {"node": m}
        return src

    a = aligned(ops[0], a_idx, "a")
    b = aligned(ops[1], b_idx, "b")
    new.append(_node(name, "call_function", "mul", "operator.mul", [a, b], n["shape"], dtype))
    return new


def _einsum_chain(n: dict, by_name: dict[str, dict]) -> list[dict] | None:
    """An einsum of three or more operands as two-operand einsums, left to right (as torch
    contracts them without opt_einsum): each step keeps the indices the output or a later operand
    needs. Each step is lowered as a broadcast multiply (_einsum_scale) or a batched matmul
    (_einsum); None when a step is neither."""
    parsed = _einsum_terms(n)
    if parsed is None or len(parsed[0]) < 3:
        return None
    terms, out, ops = parsed
    size: dict[str, int] = {}
    for idx, o in zip(terms, ops, strict=True):
        shape = by_name.get(o["node"], {}).get("shape")
        if shape is None or len(shape) != len(idx) or len(set(idx)) != len(idx):
            return None
        size.update(zip(idx, shape, strict=True))
    known = dict(by_name)
    new: list[dict] = []
    cur_idx, cur = terms[0], ops[0]
    for k in range(1, len(terms)):
        last = k == len(terms) - 1
        needed = set(out) | set("".join(terms[k + 1 :]))
        res = out if last else "".join(c for c in dict.fromkeys(cur_idx + terms[k]) if c in needed)
        step = {
            **n,
            "name": n["name"] if last else f"{n['name']}_c{k}",
            "args": [f"{cur_idx},{terms[k]}->{res}", cur, ops[k]],
            "kwargs": {},
            "shape": [size[c] for c in res],
        }
        lowered = _einsum_scale(step, known) or _einsum(step, known)
        if lowered is None:
            return None
        for m in lowered:
            known[m["name"]] = m
        new += lowered
        cur_idx, cur = res, {"node": step["name"]}
    return new


def _mha(n: dict, nodes: list[dict]) -> list[dict] | None:
    """nn.MultiheadAttention self-attention (query, key and value one tensor, no masks, packed
    input projection) as the ops it computes: one linear with in_proj_weight, the head split as
    views, scaled_dot_product_attention, the heads merged back, and out_proj. The module's
    (output, weights) tuple: `getitem(attn, 0)` becomes the output; the weights are not built."""
    a = n["module_attrs"]
    if n["kind"] != "call_module" or n["op"] != "multihead_attention":
        return None
    if not a.get("packed_in_proj") or a.get("bias_kv") or a.get("add_zero_attn"):
        return None
    q, k, v = (n["args"] + [None, None, None])[:3]
    k = k if k is not None else n["kwargs"].get("key")
    v = v if v is not None else n["kwargs"].get("value")
    if not (isinstance(q, dict) and "node" in q) or q != k or q != v:
        return None
    if any(n["kwargs"].get(m) is not None for m in ("key_padding_mask", "attn_mask")):
        return None
    if n["kwargs"].get("is_causal"):
        return None
    users = [u for u in nodes if _refs(u, n["name"])]
    for u in users:
        weights = u["kind"] == "output" or u["op"] != "getitem" or u["args"][1] != 0
        if weights and (u["kind"] == "output" or any(_refs(w, u["name"]) for w in nodes)):
            return None  # the attention weights are used: not rewritten
    name, dtype, shape = n["name"], n["dtype"], n["shape"]
    mod, heads = n["target"], int(a["num_heads"])
    seq_dim, batch_dim = (1, 0) if a.get("batch_first") else (0, 1)
    e = int(a["embed_dim"])
    new: list[dict] = []

    def add(op: str, kind: str, target: str, args: list, shape: Any, kwargs: dict | None = None) -> dict:
        m = f"{name}_m{len(new) + 1}"
        node = _node(m, kind, op, target, args, shape, dtype if shape is not None else None)
        node["kwargs"] = kwargs or {}
        new.append(node)
        return {"node": m}

    def param(attr: str, pshape: list[int]) -> dict:
        m = f"{name}_m{len(new) + 1}"
        new.append(_node(m, "get_attr", "param", f"{mod}.{attr}", [], pshape, dtype))
        return {"node": m}

    sl, nb = shape[seq_dim], shape[batch_dim]
    hd = e // heads
    w_in = param("in_proj_weight", [3 * e, e])
    b_in = param("in_proj_bias", [3 * e]) if a.get("in_proj_bias") else None
    qkv = add("linear", "call_function", "torch.nn.functional.linear", [q, w_in, b_in], shape[:2] + [3 * e])
    parts = add("chunk", "call_method", "chunk", [qkv, 3, -1], shape[:2] + [e])
    s_len = add("size", "call_method", "size", [q, seq_dim], None)
    s_b = add("size", "call_method", "size", [q, batch_dim], None)
    s_e = add("size", "call_method", "size", [q, 2], None)
    s_hd = add("floor_divide", "call_function", "operator.floordiv", [s_e, heads], None)
    s_bh = add("mul", "call_function", "operator.mul", [s_b, heads], None)
    heads_out = []
    for i in range(3):
        t = add("getitem", "call_function", "operator.getitem", [parts, i], shape[:2] + [e])
        if seq_dim == 1:  # batch_first: (N, L, E) -> (L, N, E)
            t = add("transpose", "call_method", "transpose", [t, 0, 1], [sl, nb, e])
        heads_out.append(
            add("reshape", "call_method", "reshape", [t, [s_len, s_bh, s_hd]], [sl, nb * heads, hd])
        )
    qh, kh, vh = (
        add("transpose", "call_method", "transpose", [t, 0, 1], [nb * heads, sl, hd]) for t in heads_out
    )
    att = add(
        "scaled_dot_product_attention",
        "call_function",
        "torch.nn.functional.scaled_dot_product_attention",
        [qh, kh, vh],
        [nb * heads, sl, hd],
    )
    att = add("transpose", "call_method", "transpose", [att, 0, 1], [sl, nb * heads, hd])
    att = add("reshape", "call_method", "reshape", [att, [s_len, s_b, s_e]], [sl, nb, e])
    if seq_dim == 1:
        att = add("transpose", "call_method", "transpose", [att, 0, 1], [nb, sl, e])
    w_out = param("out_proj.weight", [e, e])
    b_out = param("out_proj.bias", [e]) if a.get("out_proj_bias") else None
    out = add("linear", "call_function", "torch.nn.functional.linear", [att, w_out, b_out], shape)
    for u in users:
        if u["op"] == "getitem" and u["args"][1] == 0:
            u.update(op="identity", kind="call_function", target="identity", args=[out], kwargs={})
    return new


def _refs(n: dict, name: str) -> bool:
    found = False

    def walk(x: Any) -> None:
        nonlocal found
        if isinstance(x, dict) and x.get("node") == name:
            found = True
        elif isinstance(x, (list, dict)):
            for y in x.values() if isinstance(x, dict) else x:
                walk(y)

    walk(n["args"])
    walk(n["kwargs"])
    return found


def _substitute(x: Any, values: dict[str, Any]) -> Any:
    if isinstance(x, dict) and set(x) == {"node"} and x["node"] in values:
        return values[x["node"]]
    if isinstance(x, list):
        return [_substitute(y, values) for y in x]
    if isinstance(x, dict):
        return {k: _substitute(y, values) for k, y in x.items()}
    return x


def _binary_min_max(n: dict) -> dict | None:
    """torch.min/max(a, b) of two tensors (not a dim) is the elementwise minimum/maximum."""
    if n["op"] not in ("min", "max") or len(n["args"]) < 2:
        return None
    other = n["args"][1]
    if isinstance(other, (int, bool)) or (isinstance(other, dict) and "node" not in other):
        return None  # a dim
    if isinstance(other, list):
        return None
    return {**n, "op": "minimum" if n["op"] == "min" else "maximum"}


def _state_copies(nodes: list[dict]) -> list[dict]:
    """`self.h.copy_(x)` then reads of `self.h`: module state overwritten in forward. Reads after
    the copy see x, so they (and the copy) become x itself; the candidate needs no state."""
    by_name = {n["name"]: n for n in nodes}
    written: dict[str, dict] = {}
    out = []
    for n in nodes:
        if n["kind"] == "get_attr" and n["target"] in written:
            n = {
                **n,
                "kind": "call_function",
                "op": "identity",
                "target": "identity",
                "args": [written[n["target"]]],
            }
        elif n["kind"] == "call_method" and n["op"] == "copy_" and len(n["args"]) >= 2:
            dst, src = n["args"][0], n["args"][1]
            dn = by_name.get(dst["node"]) if isinstance(dst, dict) and "node" in dst else None
            sn = by_name.get(src["node"]) if isinstance(src, dict) and "node" in src else None
            if dn is not None and sn is not None and dn["kind"] == "get_attr" and dn["shape"] == sn["shape"]:
                written[dn["target"]] = src
                n = {**n, "kind": "call_function", "op": "identity", "target": "identity", "args": [src]}
        out.append(n)
    return out


def _lp_normalize(n: dict) -> list[dict] | None:
    """F.normalize(x, p=2, dim, eps) = x / max(||x||_2 over dim (keepdim), eps)."""
    if n["op"] != "normalize" or n["kind"] != "call_function":
        return None
    args, kw = n["args"], n["kwargs"]
    x = args[0] if args else kw.get("input")
    p = args[1] if len(args) > 1 else kw.get("p", 2.0)
    dim = args[2] if len(args) > 2 else kw.get("dim", 1)
    eps = args[3] if len(args) > 3 else kw.get("eps", 1e-12)
    if p not in (2, 2.0) or not isinstance(dim, int) or not isinstance(eps, (int, float)) or kw.get("out"):
        return None
    name, shape, dtype = n["name"], n["shape"], n["dtype"]
    red = list(shape or [])
    if red:
        red[dim % len(red)] = 1
    norm = _node(f"{name}_norm", "call_function", "norm", "torch.norm", [x, 2], red, dtype)
    norm["kwargs"] = {"dim": [dim], "keepdim": True}
    low = _node(
        f"{name}_clamp",
        "call_function",
        "clamp_min",
        "torch.clamp_min",
        [{"node": norm["name"]}, eps],
        red,
        dtype,
    )
    div = _node(name, "call_function", "div", "operator.truediv", [x, {"node": low["name"]}], shape, dtype)
    return [norm, low, div]


def normalize(nodes: list[dict]) -> list[dict]:
    """Rewrite nodes into the op set the expert's families know (same names, same values)."""
    nodes = _state_copies(nodes)
    out: list[dict] = []
    by_name: dict[str, dict] = {}
    scalars = {n["name"]: n["kwargs"]["value"] for n in nodes if n["op"] == "scalar_constant"}
    if scalars:
        nodes = [
            {**n, "args": _substitute(n["args"], scalars), "kwargs": _substitute(n["kwargs"], scalars)}
            for n in nodes
            if n["name"] not in scalars
        ]
    for n in nodes:
        if n["kind"] in ("call_module", "call_function", "call_method"):
            new = _adaptive_pool(n) or _binary_min_max(n)
            rewritten = (
                [new]
                if new is not None
                else (
                    _einsum_chain(n, by_name)
                    or _einsum_scale(n, by_name)
                    or _einsum(n, by_name)
                    or _mha(n, nodes)
                    or _lp_normalize(n)
                )
            )
        else:
            rewritten = None
        for m in rewritten or [n]:
            out.append(m)
            by_name[m["name"]] = m
    return out
