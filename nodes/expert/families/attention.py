"""Attention: softmax(Q @ K^T * scale) @ V (written out, or F.scaled_dot_product_attention without
a mask), fused into one online-softmax kernel: the M x N score matrix never reaches memory.

Each program owns BLOCK_M query rows of one (batch, head) and streams K/V in BLOCK_N tiles,
keeping a running row max and rescaled row sum. fp32 operands use 3xTF32 dots (near-fp32
accuracy on tensor cores). Algorithms: "online-softmax" (3xTF32) and "online-softmax-ieee".

Causal attention: SDPA's is_causal, or a written-out mask that the op graph reports as a
canonical upper-triangular `tri_mask` (triu(ones(n, n), d), ~tril(...), arange comparisons...)
applied with masked_fill(mask, -inf) or added as a -inf/0 tensor. Key j is visible to query i
when j - i < d (d = 1: the usual causal mask). The kernel computes the mask from indices: key
blocks entirely visible run unmasked, diagonal blocks are masked, blocks past it are skipped.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from graph.records import TaskDescription

from ..graphview import GraphView, Unsupported, arg_value, assemble, is_node
from ..spaces import next_pow2
from .gemm import _operand

# The widest head dim (of Q/K and of V) the fused kernel holds: its Q tile and output accumulator
# live in registers. Wider attention is written out as matmul -> softmax -> matmul groups
# (nodes/expert/decompose.py).
MAX_HEAD_DIM = 256


@dataclass
class AttnPlan:
    q: str
    k: str  # K as (.., N, D) (the kernel reads it transposed through strides)
    v: str
    scale: float | None  # None: 1/sqrt(D) at run time
    causal: bool
    dtype: str
    diag: int = 1  # causal: key j is visible to query i when j - i < diag
    # Scale factors computed in forward (Python numbers, e.g. 1 / math.sqrt(k.size(-1)) of a
    # partitioned graph), multiplied into `scale` at run time.
    scale_exprs: list[str] = field(default_factory=list)
    # The widest head dim of Q/K and V as traced (0: unknown); the tiles are chosen for it.
    head_dim: int = 0


def _const(x: Any) -> float:
    if is_node(x) or not isinstance(x, (int, float)):
        raise Unsupported("attention scale is not a constant")
    return float(x)


def _head_dims_fit(view: GraphView, q: Any, v: Any) -> int:
    """The widest traced head dim of Q/K and V (0 when neither shape is known)."""
    widest = 0
    for what, ref in (("Q/K", q), ("V", v)):
        shape = view.nodes[view.resolve(ref["node"])].shape if is_node(ref) else None
        if shape and shape[-1] > MAX_HEAD_DIM:
            raise Unsupported(f"{what} head dim {shape[-1]} is wider than the fused kernel's {MAX_HEAD_DIM}")
        if shape:
            widest = max(widest, int(shape[-1]))
    return widest


def match(view: GraphView) -> AttnPlan | None:
    nodes = view.compute_nodes()
    sdpa = [n for n in nodes if n.op == "scaled_dot_product_attention"]
    if sdpa:
        n = sdpa[0]
        if len(nodes) != 1:
            return None
        if arg_value(n, 3, "attn_mask") is not None:
            raise Unsupported("scaled_dot_product_attention with attn_mask")
        if arg_value(n, 4, "dropout_p", 0.0) not in (0, 0.0):
            raise Unsupported("scaled_dot_product_attention with dropout")
        scale = arg_value(n, 6, "scale")
        head_dim = _head_dims_fit(view, n.args[0], n.args[2])
        return AttnPlan(
            _operand(view, n.args[0]),
            _operand(view, n.args[1]),
            _operand(view, n.args[2]),
            None if scale is None else _const(scale),
            bool(arg_value(n, 5, "is_causal", False)),
            n.dtype or "float32",
            head_dim=head_dim,
        )
    mms = [n for n in nodes if n.op == "matmul"]
    sms = [n for n in nodes if n.op == "softmax"]
    if len(mms) != 2 or len(sms) != 1:
        return None
    s1, sm, s2 = mms[0], sms[0], mms[1]
    if view.output != s2.name:
        raise Unsupported("attention followed by more ops")
    between = nodes[nodes.index(s1) + 1 : nodes.index(sm)]
    scale = 1.0
    scale_exprs: list[str] = []
    diag: int | None = None
    masks = {n.name for n in between if n.op == "tri_mask"}
    for n in between:
        refs = view.refs(n)
        scalars = [view.leaves[r] for r in refs if r in view.leaves and view.leaves[r].is_scalar]
        if n.op == "tri_mask":
            continue
        if n.op == "mul" and len(refs) == 2 and len(scalars) == 1:
            scale_exprs.append(f"float({scalars[0].expr})")
        elif n.op == "div" and len(refs) == 2 and len(scalars) == 1 and view.refs(n)[1] == scalars[0].name:
            scale_exprs.append(f"(1.0 / float({scalars[0].expr}))")
        elif n.op == "mul" and len(refs) == 1:
            scale *= _const(n.args[1] if is_node(n.args[0]) else n.args[0])
        elif n.op == "div" and len(refs) == 1 and is_node(n.args[0]):
            scale /= _const(n.args[1])
        elif n.op in ("masked_fill", "add") and diag is None and any(r in masks for r in refs):
            diag = _causal_mask(view, n, s1)
        else:
            raise Unsupported(f"{n.op} between the score matmul and the softmax")
    if diag is not None and (scale <= 0 or scale_exprs):
        raise Unsupported("causal mask with a non-positive or run-time score scale")
    rank = len(sm.shape or [])
    if int(arg_value(sm, 1, "dim", -1)) % max(rank, 1) != rank - 1:
        raise Unsupported("attention softmax not over the key dim")
    if view.refs(s2)[0] != sm.name:
        raise Unsupported("second matmul does not consume the softmax")
    # Q @ K^T: the right operand must be a transpose of the last two dims of a leaf.
    kt_ref = s1.args[1]
    kt = view.nodes[view.resolve(kt_ref["node"])]
    if kt.op not in ("transpose", "t", "getattr", "permute"):
        raise Unsupported("score matmul's right operand is not K transposed")
    # Undo the transpose in the forward (a view): pass K itself, read it transposed in the kernel.
    k_expr = f"{_operand(view, kt_ref)}.transpose(-2, -1)"
    # A constant scale of exactly 1/sqrt(head dim) is the usual attention scale, usually computed in
    # __init__ from a size argument: compute it from the run-time head dim so other sizes stay right
    # (the checker's second-shape trial caught a baked-in 1/sqrt(64)).
    q_node = view.nodes[view.resolve(s1.args[0]["node"])] if is_node(s1.args[0]) else None
    head_dim = (q_node.shape or [0])[-1] if q_node is not None else 0
    if head_dim and not scale_exprs and math.isclose(scale, 1.0 / math.sqrt(head_dim), rel_tol=1e-12):
        scale = None
    widest = _head_dims_fit(view, s1.args[0], s2.args[1])
    return AttnPlan(
        _operand(view, s1.args[0]),
        k_expr,
        _operand(view, s2.args[1]),
        scale,
        diag is not None,
        s2.dtype or "float32",
        diag if diag is not None else 1,
        scale_exprs,
        widest,
    )


def _neg_inf(v: Any) -> bool:
    if isinstance(v, dict):
        return v.get("float") == "-inf"
    return isinstance(v, (int, float)) and not isinstance(v, bool) and v <= -1e30


def _causal_mask(view: GraphView, n: Any, s1: Any) -> int:
    """The diagonal d of a causal mask applied by `n` (masked_fill or add), or Unsupported."""
    refs = view.refs(n)
    if n.op == "masked_fill":
        if len(refs) != 2:
            raise Unsupported("masked_fill with a tensor-valued fill in attention")
        mask = view.nodes[refs[1]]
        if refs[0] == refs[1] or mask.op != "tri_mask" or not is_node(n.args[0]):
            raise Unsupported("masked_fill of the scores with a mask that is not an index mask")
        if mask.kwargs.get("fill") is not True:
            raise Unsupported("masked_fill with a non-boolean mask")
        if not _neg_inf(arg_value(n, 2, "value")):
            raise Unsupported("attention mask fill is not -inf")
    else:
        masks = [r for r in refs if view.nodes[r].op == "tri_mask"]
        if len(refs) != 2 or len(masks) != 1:
            raise Unsupported("attention scores plus a tensor that is not an index mask")
        mask = view.nodes[masks[0]]
        if n.kwargs.get("alpha") not in (None, 1, 1.0) or not _neg_inf(mask.kwargs.get("fill")):
            raise Unsupported("additive attention mask is not 0 / -inf")
    kw = mask.kwargs
    if not kw.get("upper"):
        raise Unsupported("attention mask hides the lower triangle (not causal)")
    scores = s1.shape or []
    if len(scores) < 2 or [kw.get("rows"), kw.get("cols")] != scores[-2:]:
        raise Unsupported("attention mask does not span the score matrix")
    d = int(kw.get("diagonal", 1))
    if d < 1:
        raise Unsupported(f"causal mask with diagonal {d} hides whole rows")
    return d


def algorithms(plan: AttnPlan) -> list[str]:
    return ["online-softmax", "online-softmax-ieee"] if plan.dtype == "float32" else ["online-softmax"]


# Shared memory a block may use on sm_90 (227 KiB).
SMEM_LIMIT = 227 * 1024


def _split(plan: AttnPlan, params: dict[str, Any]) -> bool:
    """fp32 operands through 3xTF32 dots: each tile is held as a TF32 high and low part."""
    return plan.dtype == "float32" and not str(params.get("algorithm", "")).endswith("ieee")


def _block_d(plan: AttnPlan) -> int:
    return max(16, next_pow2(plan.head_dim or 64))


def shared_bytes(plan: AttnPlan, params: dict[str, Any]) -> int | None:
    """The 3xTF32 kernel's shared memory at the traced head dim, as Triton 3.6 lays it out for
    sm_90: 8 bytes per head-dim element for each Q row and for each K and V row of every
    pipeline stage. Exact for 64- and 128-row tiles (the compiles in
    tests/expert/test_attention_tiles.py, and the H100's "Required" figures for the tiles it
    refused); an upper bound for 32 x 32 ones, where Triton reuses a buffer (98304 bytes at head
    dim 256, not 131072), so the screen it drives never admits a tile that does not fit. None
    for other precisions (not modelled)."""
    if not _split(plan, params):
        return None
    rows = int(params["BLOCK_M"]) + int(params["num_stages"]) * int(params["BLOCK_N"])
    return 8 * _block_d(plan) * rows


def defaults(plan: AttnPlan, algorithm: str) -> dict[str, Any]:
    """The fastest tiles measured at the traced head dim (evals/h200/attn_tiles.py, one H100,
    2026-12-07, fp32 3xTF32, (8, 16, 1024, D), each configuration in its own process): at 128,
    128 x 64 with 8 warps and one stage, 1.476 ms against eager SDPA's 1.548 (the old 64 x 64
    with 4 warps and two stages: 2.333 ms, spilling; 128 x 32: 1.66-1.72 ms); at 256, 32 x 32
    with 4 warps and one stage, 4.817 ms against eager's 3.374 (64 x 32: 6.2-7.7 ms; 64 x 64
    needs 384 KiB of shared memory, more than a block may have). 64 x 64 with 4 warps at 64."""
    d = _block_d(plan)
    if plan.dtype == "float32" and d > 64:
        if d <= 128:
            return {"BLOCK_M": 128, "BLOCK_N": 64, "num_warps": 8, "num_stages": 1}
        return {"BLOCK_M": 32, "BLOCK_N": 32, "num_warps": 4, "num_stages": 1}
    return {"BLOCK_M": 64, "BLOCK_N": 64, "num_warps": 4, "num_stages": 2}


def space(plan: AttnPlan, params: dict[str, Any], stage: str, sp: dict[str, list]) -> dict[str, list]:
    return {
        "tiling": {"BLOCK_M": [128, 64, 32], "BLOCK_N": [32, 64]},
        "memory": {"num_warps": [8, 4], "num_stages": [3, 1, 2]},
    }.get(stage, {})


# Key tiles narrower than this faulted on the GPU: 64 x 16 with 8 warps hit an illegal memory
# access on an H100 (Triton 3.6, fp32 3xTF32, head dim 128; evals/h200/attn_tiles.py, 2026-12-07).
MIN_BLOCK_N = 32


def valid(plan: AttnPlan, params: dict[str, Any]) -> str | None:
    if params.get("BLOCK_M", 64) * params.get("BLOCK_N", 64) > 128 * 128:
        return "score tile too large"
    if params.get("BLOCK_N", 64) < MIN_BLOCK_N:
        return f"key tiles narrower than {MIN_BLOCK_N} faulted on the GPU"
    smem = shared_bytes(plan, params)
    if smem is not None and smem > SMEM_LIMIT:
        return f"needs {smem} bytes of shared memory at head dim {plan.head_dim} (sm_90 allows {SMEM_LIMIT})"
    return None


def _kernel(precision: str | None, causal: bool, diag: int = 1) -> str:
    prec = f', input_precision="{precision}"' if precision else ""

    def block(masked: bool, ind: str) -> str:
        lines = [
            "rn = start + tl.arange(0, BLOCK_N)",
            "kt = tl.load(k_ptr + bh * s_kb + rn[None, :] * s_kn + rd[:, None] * s_kd,",
            "             mask=(rn < N)[None, :] & (rd < D)[:, None], other=0.0)",
            f"s = tl.dot(q, kt{prec}) * scale",
            "s = tl.where((rn < N)[None, :], s, -float('inf'))",
            *([f"s = tl.where(rn[None, :] < rm[:, None] + {int(diag)}, s, -float('inf'))"] if masked else []),
            "m_new = tl.maximum(m_i, tl.max(s, 1))",
            "# rows with no valid key yet keep m = -inf: rescale by 0, not by exp(nan)",
            "alpha = tl.where(m_new == -float('inf'), 0.0, tl.exp(m_i - m_new))",
            "p = tl.exp(s - tl.where(m_new == -float('inf'), 0.0, m_new)[:, None])",
            "l_i = l_i * alpha + tl.sum(p, 1)",
            "v = tl.load(v_ptr + bh * s_vb + rn[:, None] * s_vn + rdv[None, :] * s_vd,",
            "            mask=(rn < N)[:, None] & (rdv < DV)[None, :], other=0.0)",
            f"acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v{prec})",
            "m_i = m_new",
        ]
        return "\n".join(ind + ln for ln in lines) + "\n"

    if causal:
        loops = (
            "    # keys below lo are visible to every row of this block: no mask needed there\n"
            f"    lo = tl.minimum(((pid_m * BLOCK_M + {int(diag)}) // BLOCK_N) * BLOCK_N, N)\n"
            "    # keys at or past hi are hidden from every row of this block: skipped\n"
            f"    hi = tl.minimum(pid_m * BLOCK_M + BLOCK_M{f' + {int(diag) - 1}' if diag != 1 else ''}, N)\n"
            "    for start in range(0, lo, BLOCK_N):\n"
            + block(False, "        ")
            + "    for start in range(lo, hi, BLOCK_N):\n"
            + block(True, "        ")
        )
    else:
        loops = "    for start in range(0, N, BLOCK_N):\n" + block(False, "        ")
    return f"""
@triton.jit
def attn_fwd_kernel(q_ptr, k_ptr, v_ptr, o_ptr, M, N, D, DV, n_heads_total, scale,
                    s_qb, s_qm, s_qd, s_kb, s_kn, s_kd, s_vb, s_vn, s_vd, s_ob, s_om, s_od,
                    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_DV: tl.constexpr):
    pid_m = tl.program_id(0)
    bh = tl.program_id(1).to(tl.int64)
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rd = tl.arange(0, BLOCK_D)
    rdv = tl.arange(0, BLOCK_DV)
    q = tl.load(q_ptr + bh * s_qb + rm[:, None] * s_qm + rd[None, :] * s_qd,
                mask=(rm < M)[:, None] & (rd < D)[None, :], other=0.0)
    m_i = tl.full([BLOCK_M], -float('inf'), tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_DV], dtype=tl.float32)
{loops}    out = acc / l_i[:, None]
    tl.store(o_ptr + bh * s_ob + rm[:, None] * s_om + rdv[None, :] * s_od, out.to(o_ptr.dtype.element_ty),
             mask=(rm < M)[:, None] & (rdv < DV)[None, :])
"""


def generate(desc: TaskDescription, view: GraphView, plan: AttnPlan, params: dict[str, Any]) -> str:
    algo = params["algorithm"]
    precision = None
    if plan.dtype == "float32":
        precision = "ieee" if algo.endswith("ieee") else "tf32x3"
    bm, bn = int(params["BLOCK_M"]), int(params["BLOCK_N"])
    warps, stages = int(params["num_warps"]), int(params["num_stages"])
    scale = "None" if plan.scale is None else " * ".join([repr(plan.scale), *plan.scale_exprs])
    launcher = f'''
import math


def _as3(t):
    """(batch*heads, rows, cols) view; the leading dims must merge without a copy."""
    t3 = t.reshape(-1, t.shape[-2], t.shape[-1])
    return t3


def launch_attention(q, k, v, scale):
    if scale is None:
        scale = 1.0 / math.sqrt(q.shape[-1])
    out_shape = tuple(q.shape[:-1]) + (v.shape[-1],)
    out = torch.empty(out_shape, device=q.device, dtype=q.dtype)
    q3, k3, v3 = _as3(q), _as3(k), _as3(v)
    o3 = out.view(-1, out.shape[-2], out.shape[-1])
    if not (q3.shape[0] == k3.shape[0] == v3.shape[0]):
        raise ValueError("q, k, v batch dims differ (broadcast attention is not supported)")
    M, D = q3.shape[1], q3.shape[2]
    N, DV = k3.shape[1], v3.shape[2]
    if D > {MAX_HEAD_DIM} or DV > {MAX_HEAD_DIM}:
        raise ValueError("head dims above {MAX_HEAD_DIM} are not supported")
    if out.numel() == 0:
        return out
    block_d = max(16, triton.next_power_of_2(D))
    block_dv = max(16, triton.next_power_of_2(DV))
    grid = (triton.cdiv(M, {bm}), q3.shape[0])
    attn_fwd_kernel[grid](q3, k3, v3, o3, M, N, D, DV, q3.shape[0], scale,
                          q3.stride(0), q3.stride(1), q3.stride(2), k3.stride(0), k3.stride(1), k3.stride(2),
                          v3.stride(0), v3.stride(1), v3.stride(2), o3.stride(0), o3.stride(1), o3.stride(2),
                          BLOCK_M={bm}, BLOCK_N={bn}, BLOCK_D=block_d, BLOCK_DV=block_dv,
                          num_warps={warps}, num_stages={stages})
    return out
'''
    doc = f"EGG expert: attention family, algorithm {algo}" + (
        f", precision {precision}." if precision else "."
    )
    return assemble(
        desc,
        _kernel(precision, plan.causal, plan.diag),
        launcher,
        f"return launch_attention({plan.q}, {plan.k}, {plan.v}, {scale})",
        doc,
    )
