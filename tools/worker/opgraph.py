"""Capture a reference module's computation as a list of OpNode dicts (runs in the worker).

torch.fx symbolic tracing gives the torch-level graph; ShapeProp (run on the real example inputs)
adds each node's shape and dtype. Ops get canonical names so the expert model can pattern-match
without caring whether the author wrote `torch.relu(x)`, `F.relu(x)`, `x.relu()` or `nn.ReLU()`.
"""

from __future__ import annotations

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


def capture(model: torch.nn.Module, example_inputs: list) -> tuple[list[dict], str | None]:
    """Trace `model` and propagate shapes with `example_inputs`.

    Returns (nodes, None) on success and ([], reason) when tracing or shape propagation fails.
    """
    try:
        gm = torch.fx.symbolic_trace(model)
    except Exception as e:  # data-dependent control flow etc.: a description, not a crash
        return [], f"torch.fx symbolic_trace failed: {type(e).__name__}: {str(e)[:300]}"
    try:
        with torch.no_grad():
            ShapeProp(gm).propagate(*example_inputs)
    except Exception as e:
        return [], f"shape propagation failed: {type(e).__name__}: {str(e)[:300]}"

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
        elif n.op == "output":
            op = "output"
            target = "output"
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
    return nodes, None
