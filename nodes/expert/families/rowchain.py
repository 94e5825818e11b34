"""Row chains: several row anchors over the same trailing (contiguous) dims, with elementwise ops
between them, lowered as one kernel that reads each row once.

Anchors: sum / mean / amax / amin (keepdim or not), var / std / norm, cumsum along the last dim,
layer_norm / rms_norm (affine or not), softmax / log_softmax; elementwise ops around them,
including a per-row value broadcast back over its row (cumsum(x) / x.sum(-1, keepdim=True),
x.softmax(-1) * x.sum(-1, keepdim=True), layer_norm(x).amax(-1), ...). The output is row-shaped
or one value per row.

The chain is planned as the rownorm family's DAG (rownorm.RowBuilder, with scans and per-row
results added) and written by its generator: each program loads whole rows into registers once
(a (ROWS, BLOCK_N) tile), computes every reduction, scan and elementwise value from that tile,
and stores only the chain's output. A row longer than a block at run time goes to the
multi-pass kernel in the same file (a streaming pass per level of reductions, scans carried
across tiles); rows longer than a block as captured are not taken here at all: the planner's
other groups lower them.

The family is tried before the partition of the same graph (families.FUSED_FAMILIES): its seed
comes first, the partition's seeds stay as the alternatives.
"""

from __future__ import annotations

from typing import Any

from graph.records import OpNode, TaskDescription

from .. import ewops
from ..graphview import GraphView, Unsupported, arg_value, is_node, numel
from . import rownorm
from .rownorm import WHOLE_ROW_MAX, DNode, RowPlan

ALGORITHM = "row-chain"
ALGORITHMS = (ALGORITHM,)
SCANS = {"cumsum"}
SOFTMAX = {"softmax", "log_softmax"}


class _ChainBuilder(rownorm.RowBuilder):
    flat_ok = True

    def add(self, n: OpNode) -> None:
        if n.op not in SCANS | SOFTMAX:
            super().add(n)
            return
        src_ref = n.args[0] if n.args else n.kwargs.get("input")
        if not is_node(src_ref):
            raise Unsupported(f"{n.op} of a constant")
        src = self.ref(src_ref)
        rank = len(n.shape or [])
        dim = arg_value(n, 1, "dim")
        if dim is None or is_node(dim) or rank == 0:
            raise Unsupported(f"{n.op} without a constant dim")
        if n.kwargs.get("dtype") is not None:
            raise Unsupported(f"{n.op} with a dtype")
        self.set_ndims(1, rank - 1 - int(dim) % rank)
        if n.op in SCANS:
            self.nodes.append(DNode(n.name, "scan", [src]))
            self.known.add(n.name)
            return
        m = self.red(self.fresh("mx"), src, "amax")
        ex = self.ew(self.fresh("ex"), [src, m], lambda e, s=src, m=m: f"tl.exp({e[s]} - {e[m]})")
        se = self.red(self.fresh("se"), ex, "sum")
        if n.op == "log_softmax":
            self.ew(n.name, [src, m, se], lambda e, s=src, m=m, d=se: f"{e[s]} - {e[m]} - tl.log({e[d]})")
        else:
            self.ew(n.name, [ex, se], lambda e, x=ex, d=se: f"{e[x]} / {e[d]}")


FULL, KEEP, FLAT = "full", "keep", "flat"


def _check_shapes(view: GraphView, nodes: list[OpNode], full: list[int], k: int) -> str:
    """Every value is row-shaped, one per row with the reduced dims kept, or one per row without
    them; a value without them is combined only with its kind (its dims would line up against
    the row's otherwise). Returns the output's kind."""
    keep, flat = full[:-k] + [1] * k, full[:-k]

    def kind(shape: list[int] | None) -> str | None:
        return next((c for c, s in ((FULL, full), (KEEP, keep), (FLAT, flat)) if shape == s), None)

    for n in nodes:
        c = kind(n.shape)
        if c is None:
            raise Unsupported(f"{n.op} of shape {n.shape} is not over the rows of {full}")
        for r in view.refs(n):
            ref = view.nodes[r]
            lf = view.leaves.get(r)
            rc = kind(ref.shape)
            if ewops.is_elementwise(n):
                if rc == FLAT and flat and c != FLAT:
                    raise Unsupported(f"{n.op} broadcasts a per-row value without its reduced dims")
                one = lf is not None and (lf.is_scalar or numel(ref.shape) == 1)
                if c == FLAT and lf is not None and not one:
                    raise Unsupported(f"{n.op} of per-row values reads tensor {lf.expr}")
            elif r == view.resolve((n.args[0] if n.args else n.kwargs["input"])["node"]) and rc != FULL:
                raise Unsupported(f"{n.op} of a value that is not row-shaped")
    out = kind(view.nodes[view.output].shape)
    assert out is not None
    return out


def match(view: GraphView) -> RowPlan | None:
    nodes = view.compute_nodes()
    anchors = [n for n in nodes if not ewops.is_elementwise(n)]
    # One anchor is a single family's graph (softmax, reduction, scan, rownorm).
    if len(anchors) < 2:
        return None
    b = _ChainBuilder(view)
    for n in nodes:
        b.add(n)
    if b.ndims is None or b.n_after != 0:
        raise Unsupported("row anchors not over the trailing dims")
    src = anchors[0].args[0] if anchors[0].args else anchors[0].kwargs.get("input")
    full = list(view.nodes[view.resolve(src["node"])].shape or [])
    if len(full) < b.ndims or view.nodes[view.output].shape is None:
        raise Unsupported("row anchors over more dims than their input has")
    r = numel(full[len(full) - b.ndims :])
    if r > WHOLE_ROW_MAX:
        raise Unsupported(f"rows of {r} elements do not fit one block ({WHOLE_ROW_MAX})")
    out_kind = _check_shapes(view, nodes, full, b.ndims)
    x = [lf for lf in b.leaves if lf.shape == full]
    if not x:
        raise Unsupported("no row-shaped tensor argument to size the launch")
    return b.plan(
        view.output,
        x[0],
        [n.op for n in nodes],
        out_kind="full" if out_kind == FULL else "row",
        out_shape=list(view.nodes[view.output].shape or []),
    )


def algorithms(plan: RowPlan) -> list[str]:
    return [ALGORITHM]


def defaults(plan: RowPlan, algorithm: str) -> dict[str, Any]:
    # ROW_WARPS 0: the whole-row kernel's warps follow the row length; BLOCK_N and num_warps are
    # the multi-pass fallback's, for rows longer than a block at run time.
    return {"ROW_WARPS": 0, "BLOCK_N": 4096, "num_warps": 8}


def space(plan: RowPlan, params: dict[str, Any], stage: str, sp: dict[str, list]) -> dict[str, list]:
    return {"memory": {"ROW_WARPS": [4, 8, 16, 2]}}.get(stage, {})


def generate(desc: TaskDescription, view: GraphView, plan: RowPlan, params: dict[str, Any]) -> str:
    doc = (
        f"EGG expert: rowchain family ({', '.join(sorted(set(plan.ops)))}), algorithm "
        f"{params['algorithm']}: each row read once, every row reduction from that one load."
    )
    return rownorm.emit(desc, plan, params, "whole-row", doc, row_warps=int(params.get("ROW_WARPS", 0)))
