"""Exact rewrites of the op graph before it is planned: ops that undo each other are removed.

Today: a crop that removes exactly the border a pad added. `F.pad(t, [0, 0, s, s, s, s])[:, s:-s,
s:-s, :]` is `t` itself, whatever the pad's mode and whatever the sizes (the slices count from
the ends), so the crop's users read `t` and neither the padded copy nor the gather back is made;
the pad stays only where something else reads it. A shifted-window block written this way (the
suite's cx31) had its LayerNorm, pad, crop and residual add in four kernels; without the pair the
norm and the add are one chain. Only crops whose bounds hold at any size are taken: start = the
border before, stop = minus the border after (None where it is 0), step 1.
"""

from __future__ import annotations

from typing import Any

from graph.records import OpNode, TaskDescription

from .families.pad import literal_ints
from .graphview import arg_value, is_node, node_refs

PAD_TARGETS = frozenset({"torch.nn.functional.pad", "torch._C._nn.pad"})


def _border(n: OpNode, rank: int) -> list[tuple[int, int]] | None:
    """(before, after) per dim of a functional pad with a literal, non-negative pad list."""
    if n.op != "pad" or n.kind != "call_function" or n.target not in PAD_TARGETS:
        return None
    pad = literal_ints(arg_value(n, 1, "pad"))
    if pad is None or len(pad) % 2 or len(pad) // 2 > rank or min(pad, default=0) < 0:
        return None
    border = [(0, 0)] * rank
    for i in range(len(pad) // 2):  # F.pad lists the last dim first
        border[rank - 1 - i] = (pad[2 * i], pad[2 * i + 1])
    return border


def _undoes(index: Any, border: list[tuple[int, int]]) -> bool:
    """The getitem index is one slice per dim that cuts exactly `border` off, at any size."""
    if not isinstance(index, list | tuple) or len(index) != len(border):
        return False
    for item, (before, after) in zip(index, border, strict=True):
        if not isinstance(item, dict) or set(item) != {"slice"}:
            return False
        start, stop, step = item["slice"]
        if step not in (None, 1):
            return False
        if start not in ((None, 0) if before == 0 else (before,)):
            return False
        if stop != (None if after == 0 else -after):
            return False
    return True


def _replace(x: Any, names: dict[str, str]) -> Any:
    if is_node(x):
        return {"node": names.get(x["node"], x["node"])}
    if isinstance(x, list):
        return [_replace(v, names) for v in x]
    if isinstance(x, tuple):
        return tuple(_replace(v, names) for v in x)
    if isinstance(x, dict):
        return {k: _replace(v, names) for k, v in x.items()}
    return x


def simplify(desc: TaskDescription) -> TaskDescription:
    """`desc` with every crop of a pad's exact border read as the unpadded tensor (the same
    object when there is none)."""
    by_name = {n.name: n for n in desc.op_graph}
    names: dict[str, str] = {}  # a removed crop -> the tensor it equals
    for n in desc.op_graph:
        if n.op != "getitem" or len(n.args) != 2 or not is_node(n.args[0]):
            continue
        pad = by_name.get(n.args[0]["node"])
        src = pad.args[0] if pad is not None and pad.args else None
        if pad is None or not is_node(src) or not n.shape:
            continue
        source = by_name.get(src["node"])
        border = _border(pad, len(n.shape))
        if source is None or border is None or source.shape != n.shape or not _undoes(n.args[1], border):
            continue
        names[n.name] = src["node"]
    if not names:
        return desc
    pads = {by_name[n.name].args[0]["node"] for n in desc.op_graph if n.name in names}
    graph = [
        n.model_copy(update={"args": _replace(n.args, names), "kwargs": _replace(n.kwargs, names)})
        for n in desc.op_graph
        if n.name not in names
    ]
    # a pad read by nothing else now is not made at all
    dead = pads - {r for n in graph for r in node_refs(n)}
    return desc.model_copy(update={"op_graph": [n for n in graph if n.name not in dead]})
