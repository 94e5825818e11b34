"""Composite ops a family cannot take whole, written out as the ops they are made of, so the
partition planner lowers them group by group instead of giving up.

Today: `scaled_dot_product_attention` whose head dims are wider than the fused attention kernel
holds (its Q tile and output accumulator live in registers). Written out it is what a reader
would write by hand: `softmax((q @ k.transpose(-2, -1)) * scale) @ v`, with the
default scale read from the run's own head dim (`1 / math.sqrt(q.size(-1))`), so a second shape
keeps it right. Node names of the original survive on the last op, so every user still reads it.
"""

from __future__ import annotations

from typing import Any

from graph.records import OpNode, TaskDescription

from .families.attention import MAX_HEAD_DIM
from .graphview import arg_value, is_node


def _node(
    name: str, kind: str, op: str, target: str, args: list, shape: list[int] | None, dtype: Any, **kw
) -> OpNode:
    return OpNode(name=name, kind=kind, op=op, target=target, args=args, shape=shape, dtype=dtype, **kw)


def _wide(n: OpNode, shapes: dict[str, list[int] | None]) -> bool:
    if n.op != "scaled_dot_product_attention" or len(n.args) < 3 or not all(is_node(a) for a in n.args[:3]):
        return False
    if arg_value(n, 3, "attn_mask") is not None or arg_value(n, 4, "dropout_p", 0.0) not in (0, 0.0):
        return False  # the attention family names these itself
    if arg_value(n, 5, "is_causal", False):
        # written out, the causal mask is a constant no group computes (only the fused kernel
        # makes it from indices): left whole, the attention family names the head dim
        return False
    q, v = shapes.get(n.args[0]["node"]), shapes.get(n.args[2]["node"])
    return bool(q and v) and (q[-1] > MAX_HEAD_DIM or v[-1] > MAX_HEAD_DIM)


def _sdpa(n: OpNode, shapes: dict[str, list[int] | None]) -> list[OpNode]:
    q, k, v = n.args[:3]
    qs, ks = shapes[q["node"]] or [], shapes[k["node"]] or []
    cols = ks[-2]
    p = f"{n.name}__"
    score_shape = [*qs[:-1], cols]
    out: list[OpNode] = [
        _node(
            f"{p}kt",
            "call_method",
            "transpose",
            "transpose",
            [k, -2, -1],
            [*ks[:-2], ks[-1], ks[-2]],
            n.dtype,
        ),
        _node(
            f"{p}scores",
            "call_function",
            "matmul",
            "operator.matmul",
            [q, {"node": f"{p}kt"}],
            score_shape,
            n.dtype,
        ),
    ]
    scale = arg_value(n, 6, "scale")
    if scale is None:
        out += [
            _node(f"{p}d", "call_method", "size", "size", [q, -1], None, None),
            _node(f"{p}sqrt_d", "call_function", "sqrt", "math.sqrt", [{"node": f"{p}d"}], None, None),
            _node(
                f"{p}scale",
                "call_function",
                "div",
                "operator.truediv",
                [1.0, {"node": f"{p}sqrt_d"}],
                None,
                None,
            ),
        ]
        factor: Any = {"node": f"{p}scale"}
    else:
        factor = float(scale)
    out.append(
        _node(
            f"{p}scaled",
            "call_function",
            "mul",
            "operator.mul",
            [{"node": f"{p}scores"}, factor],
            score_shape,
            n.dtype,
        )
    )
    last = f"{p}scaled"
    out += [
        _node(
            f"{p}probs",
            "call_function",
            "softmax",
            "torch.nn.functional.softmax",
            [{"node": last}],
            score_shape,
            n.dtype,
            kwargs={"dim": -1},
        ),
        n.model_copy(
            update={
                "kind": "call_function",
                "op": "matmul",
                "target": "operator.matmul",
                "args": [{"node": f"{p}probs"}, v],
                "kwargs": {},
            }
        ),
    ]
    return out


def decompose(desc: TaskDescription) -> TaskDescription:
    """`desc` with every composite op no family takes whole written out (the same object when
    there is none)."""
    shapes = {n.name: n.shape for n in desc.op_graph}
    wide = {n.name for n in desc.op_graph if _wide(n, shapes)}
    if not wide:
        return desc
    graph: list[OpNode] = []
    for n in desc.op_graph:
        graph += _sdpa(n, shapes) if n.name in wide else [n]
    return desc.model_copy(update={"op_graph": graph})
