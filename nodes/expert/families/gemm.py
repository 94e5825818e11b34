"""Matmul / linear (2D, batched, broadcast-batched, transposed operands) + fused elementwise epilogue.

Algorithms (the seeds):
  tiled          output-tiled tl.dot kernel, GROUP_M grouped tile order, epilogue fused into the
                 store; fp32 operands use 3xTF32 ("tf32x3": tensor cores at near-fp32 accuracy)
  tiled-ieee     the same with true fp32 dot products (slower, exact to fp32 rounding)
  split-k        K split over SPLIT_K programs writing fp32 partials, then a reduce kernel that
                 applies the epilogue (for small M*N with a long K)
  library+fused-epilogue  matmul stays a library call (mixed policy only), the whole epilogue
                 is one Triton kernel
Epilogue operands (bias, residuals, scales) are read through their broadcast strides, so any
tensor that broadcasts to the output works without a copy.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from graph.records import TaskDescription

from .. import ewops
from ..chain import Chain, collect_chain
from ..graphview import GraphView, Leaf, Unsupported, arg_value, assemble, is_node
from . import elementwise as ew

VIEW_OPS = {"t", "transpose", "permute", "T", "mT", "getattr"}


@dataclass
class GemmPlan:
    kind: str  # "linear" | "matmul"
    a_expr: str  # Python expression (forward scope) of the left operand (views applied)
    b_expr: str  # right operand as (.., K, N) — for linear the weight's transpose view
    bias_expr: str | None
    epilogue: Chain
    gemm_node: str
    m: int
    n: int
    k: int
    dtype: str
    leaves_in_forward: list[str] = field(default_factory=list)


def _operand(view: GraphView, ref: Any, depth: int = 0) -> str:
    """Python expression for a GEMM operand: a leaf, possibly through transpose/permute views."""
    if not is_node(ref):
        raise Unsupported("matmul with a constant operand")
    name = view.resolve(ref["node"])
    leaf = view.leaves.get(name)
    if leaf is not None:
        if leaf.is_scalar:
            raise Unsupported("matmul with a scalar operand")
        return leaf.expr
    n = view.nodes[name]
    if depth > 3 or n.kind not in ("call_method", "call_function"):
        raise Unsupported(f"matmul operand produced by {n.op}")
    inner = _operand(view, n.args[0], depth + 1)
    if n.op == "t":
        return f"{inner}.t()"
    if n.op == "transpose":
        d0, d1 = arg_value(n, 1, "dim0"), arg_value(n, 2, "dim1")
        return f"{inner}.transpose({int(d0)}, {int(d1)})"
    if n.op == "permute":
        dims = n.args[1:] if len(n.args) > 2 else n.args[1]
        return f"{inner}.permute({', '.join(str(int(d)) for d in dims)})"
    if n.op == "getattr" and len(n.args) > 1 and n.args[1] in ("T", "mT"):
        return f"{inner}.{n.args[1]}"
    raise Unsupported(f"matmul operand produced by {n.op}")


def match(view: GraphView) -> GemmPlan | None:
    nodes = view.compute_nodes()
    gem = [n for n in nodes if n.op in ("linear", "matmul")]
    if len(gem) != 1:
        return None
    g = gem[0]
    # Operand view ops (transposes) come before the GEMM and are folded into its strides.
    pre = nodes[: nodes.index(g)]
    for n in pre:
        if n.op not in VIEW_OPS:
            raise Unsupported(f"{n.op} before the matmul is not fused")
    epi_nodes = nodes[nodes.index(g) + 1 :]
    epilogue = collect_chain(view, epi_nodes, internal={g.name})
    for n in epi_nodes:
        if n.shape != g.shape:
            raise Unsupported("matmul epilogue changes the shape")
    shape = g.shape or []
    if g.op == "linear":
        if g.kind == "call_module":
            a = _operand(view, g.args[0])
            w = f"self.{g.target}.weight"
            bias = f"self.{g.target}.bias" if g.module_attrs.get("bias") else None
        else:
            a = _operand(view, g.args[0])
            w = _operand(view, arg_value(g, 1, "weight"))
            b = arg_value(g, 2, "bias")
            bias = _operand(view, b) if b is not None else None
        b_expr = f"{w}.t()"
        k = int(view.nodes[view.resolve(g.args[0]["node"])].shape[-1]) if is_node(g.args[0]) else 0
        return GemmPlan(
            "linear",
            a,
            b_expr,
            bias,
            epilogue,
            g.name,
            _prod(shape[:-1]),
            shape[-1] if shape else 0,
            k,
            g.dtype or "float32",
        )
    a_ref = g.args[0] if g.args else g.kwargs.get("input")
    b_ref = g.args[1] if len(g.args) > 1 else g.kwargs.get("other", g.kwargs.get("mat2"))
    a_shape = view.nodes[view.resolve(a_ref["node"])].shape or []
    b_shape = view.nodes[view.resolve(b_ref["node"])].shape or []
    if len(a_shape) not in (2, 3) or len(b_shape) not in (2, 3):
        raise Unsupported(f"matmul of ranks {len(a_shape)}x{len(b_shape)}")
    return GemmPlan(
        "matmul",
        _operand(view, a_ref),
        _operand(view, b_ref),
        None,
        epilogue,
        g.name,
        shape[-2],
        shape[-1],
        a_shape[-1],
        g.dtype or "float32",
    )


def _prod(xs: list[int]) -> int:
    p = 1
    for x in xs:
        p *= x
    return p


def algorithms(plan: GemmPlan) -> list[str]:
    algos = ["tiled"]
    if plan.dtype == "float32":
        algos.append("tiled-ieee")
    # Split-K pays off only when the output has too few tiles to fill the GPU.
    if plan.k >= 4 * max(plan.m, plan.n, 1) or plan.m * plan.n <= 256 * 256:
        algos.insert(1, "split-k")
    else:
        algos.append("split-k")
    if plan.epilogue.nodes:
        algos.append("library+fused-epilogue")
    return algos


def defaults(plan: GemmPlan, algorithm: str) -> dict[str, Any]:
    if algorithm == "split-k":
        return {"SPLIT_K": 8, "BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 64, "num_warps": 4, "num_stages": 3}
    if algorithm == "library+fused-epilogue":
        return {"BLOCK": 2048, "num_warps": 8, "EVICT": ""}
    return {"SPLIT_K": 1}


def valid(plan: GemmPlan, params: dict[str, Any]) -> str | None:
    algo = params["algorithm"]
    if algo == "library+fused-epilogue":
        return None
    if algo != "split-k" and params.get("SPLIT_K", 1) != 1:
        return "SPLIT_K applies to split-k only"
    bm, bn, bk = params["BLOCK_M"], params["BLOCK_N"], params["BLOCK_K"]
    if min(bm, bn, bk) < 16:
        return "tl.dot needs tiles of at least 16"
    # Shared memory for the pipelined operand tiles (fp32: 4 bytes) must fit in ~227 KB.
    stages = params.get("num_stages", 3)
    if (bm * bk + bk * bn) * 4 * max(stages - 1, 1) > 220 * 1024:
        return "operand tiles exceed shared memory"
    if bm * bn > 128 * 256:
        return "accumulator too large for the register file"
    return None


def space(plan: GemmPlan, params: dict[str, Any], stage: str, sp: dict[str, list]) -> dict[str, list]:
    if params["algorithm"] == "library+fused-epilogue":
        from ..spaces import SPACES

        return SPACES["elementwise"].get(stage, {})
    sp = dict(sp)
    if params["algorithm"] == "split-k" and stage == "mapping":
        sp["SPLIT_K"] = [4, 16, 2]
    return sp


def refinements(plan: GemmPlan, params: dict[str, Any]) -> list[tuple[str, dict[str, Any], str]]:
    out = []
    if params["algorithm"] == "library+fused-epilogue":
        p = {k: v for k, v in params.items() if k not in ("BLOCK", "EVICT")}
        from ..spaces import DEFAULTS

        p.update(DEFAULTS["gemm"], algorithm="tiled")
        out.append(("refine:fuse-epilogue-into-gemm", p, "write the output once: epilogue in the GEMM store"))
    if params["algorithm"] == "tiled-ieee" and plan.dtype == "float32":
        out.append(
            (
                "refine:3xtf32",
                dict(params, algorithm="tiled"),
                "3xTF32 tensor-core dot keeps fp32 accuracy at several times the fp32 FMA rate",
            )
        )
    return out


def safer(plan: GemmPlan, params: dict[str, Any], rule: str) -> list[tuple[str, dict[str, Any], str]]:
    if params["algorithm"] == "tiled" and plan.dtype == "float32" and "mismatch" in rule:
        return [
            (
                "fix:mismatch:ieee",
                dict(params, algorithm="tiled-ieee"),
                "exact fp32 dot products in case 3xTF32 rounding exceeds the tolerance",
            )
        ]
    return []


# ---------------------------------------------------------------------------------------------
# code generation
# ---------------------------------------------------------------------------------------------


def _leaf_args(chain: Chain) -> tuple[list[str], list[str]]:
    tensor = [f"l_{lf.name}" for lf in chain.tensor_leaves]
    scal = [f"l_{lf.name}" for lf in chain.scalar_leaves]
    return tensor, scal


def _epilogue_lines(plan: GemmPlan, acc: str) -> tuple[list[str], str]:
    env = {plan.gemm_node: acc}
    lines: list[str] = []
    for lf in plan.epilogue.tensor_leaves:
        p = f"l_{lf.name}"
        lines.append(
            f"x_{lf.name} = tl.load({p}_ptr + bid * {p}_sb + rm[:, None] * {p}_sm + rn[None, :] * {p}_sn, "
            "mask=cmask, other=0.0).to(tl.float32)"
        )
        env[lf.name] = f"x_{lf.name}"
    for lf in plan.epilogue.scalar_leaves:
        env[lf.name] = f"l_{lf.name}_val"
    body, last = plan.epilogue.body(env)
    return lines + body, last or acc


def _epi_sig(plan: GemmPlan) -> str:
    parts = []
    for lf in plan.epilogue.tensor_leaves:
        p = f"l_{lf.name}"
        parts += [f"{p}_ptr", f"{p}_sb", f"{p}_sm", f"{p}_sn"]
    parts += [f"l_{lf.name}_val" for lf in plan.epilogue.scalar_leaves]
    return "".join(f", {x}" for x in parts)


def _bias_lines(plan: GemmPlan) -> list[str]:
    if plan.bias_expr is None:
        return []
    return ["acc = acc + tl.load(bias_ptr + rn, mask=rn < N, other=0.0).to(tl.float32)[None, :]"]


def _gemm_kernel(plan: GemmPlan, precision: str | None, split: bool) -> str:
    bias_sig = ", bias_ptr" if plan.bias_expr else ""
    prec = f', input_precision="{precision}"' if precision else ""
    L = [
        "pid = tl.program_id(0)",
        "bid = tl.program_id(1).to(tl.int64)",
        "num_m = tl.cdiv(M, BLOCK_M)",
        "num_n = tl.cdiv(N, BLOCK_N)",
        # Grouped order: GROUP_M row-tiles share each column band of B while it sits in L2.
        "per_group = GROUP_M * num_n",
        "first_m = (pid // per_group) * GROUP_M",
        "rows_in_group = tl.minimum(num_m - first_m, GROUP_M)",
        "pid_m = first_m + (pid % per_group) % rows_in_group",
        "pid_n = (pid % per_group) // rows_in_group",
        "rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)",
        "rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)",
        "rk = tl.arange(0, BLOCK_K)",
        # Clamp rows/cols into range so the K loop needs no M/N masks; the store is masked.
        "ra = tl.where(rm < M, rm, 0)",
        "rb = tl.where(rn < N, rn, 0)",
        "a_ptrs = a_ptr + bid * s_ab + ra[:, None] * s_am + rk[None, :] * s_ak",
        "b_ptrs = b_ptr + bid * s_bb + rk[:, None] * s_bk + rb[None, :] * s_bn",
        "acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)",
    ]
    if split:
        L += [
            "sk = tl.program_id(2)",
            "k_per = tl.cdiv(tl.cdiv(K, SPLIT_K), BLOCK_K) * BLOCK_K",
            "k_lo = sk * k_per",
            "k_hi = tl.minimum(K, k_lo + k_per)",
            "a_ptrs += k_lo * s_ak",
            "b_ptrs += k_lo * s_bk",
            "for k0 in range(k_lo, k_hi, BLOCK_K):",
            "    kmask = (k0 + rk) < k_hi",
            "    a = tl.load(a_ptrs, mask=kmask[None, :], other=0.0)",
            "    b = tl.load(b_ptrs, mask=kmask[:, None], other=0.0)",
            f"    acc = tl.dot(a, b, acc{prec})",
            "    a_ptrs += BLOCK_K * s_ak",
            "    b_ptrs += BLOCK_K * s_bk",
            "cmask = (rm < M)[:, None] & (rn < N)[None, :]",
            "w_ptrs = ws_ptr + ((sk * n_batch + bid) * M + rm[:, None]) * N + rn[None, :]",
            "tl.store(w_ptrs, acc, mask=cmask)",
        ]
        sig = (
            "a_ptr, b_ptr, ws_ptr, M, N, K, n_batch, s_ab, s_am, s_ak, s_bb, s_bk, s_bn, "
            "BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, "
            "GROUP_M: tl.constexpr, SPLIT_K: tl.constexpr"
        )
        name = "gemm_splitk_kernel"
    else:
        epi, last = _epilogue_lines(plan, "acc")
        L += [
            "for k0 in range(0, K, BLOCK_K):",
            "    if EVEN_K:",
            "        a = tl.load(a_ptrs)",
            "        b = tl.load(b_ptrs)",
            "    else:",
            "        kmask = (k0 + rk) < K",
            "        a = tl.load(a_ptrs, mask=kmask[None, :], other=0.0)",
            "        b = tl.load(b_ptrs, mask=kmask[:, None], other=0.0)",
            f"    acc = tl.dot(a, b, acc{prec})",
            "    a_ptrs += BLOCK_K * s_ak",
            "    b_ptrs += BLOCK_K * s_bk",
            *_bias_lines(plan),
            "cmask = (rm < M)[:, None] & (rn < N)[None, :]",
            *epi,
            "c_ptrs = c_ptr + bid * s_cb + rm[:, None] * s_cm + rn[None, :] * s_cn",
            f"tl.store(c_ptrs, {last}.to(c_ptr.dtype.element_ty), mask=cmask)",
        ]
        sig = (
            f"a_ptr, b_ptr, c_ptr{bias_sig}, M, N, K, s_ab, s_am, s_ak, s_bb, s_bk, s_bn, "
            f"s_cb, s_cm, s_cn{_epi_sig(plan)}, "
            "BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, "
            "GROUP_M: tl.constexpr, EVEN_K: tl.constexpr"
        )
        name = "gemm_kernel"
    return f"@triton.jit\ndef {name}({sig}):\n" + "\n".join("    " + ln for ln in L) + "\n"


def _reduce_kernel(plan: GemmPlan) -> str:
    bias_sig = ", bias_ptr" if plan.bias_expr else ""
    epi, last = _epilogue_lines(plan, "acc")
    L = [
        "pid_m = tl.program_id(0)",
        "pid_n = tl.program_id(1)",
        "bid = tl.program_id(2).to(tl.int64)",
        "rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)",
        "rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)",
        "cmask = (rm < M)[:, None] & (rn < N)[None, :]",
        "acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)",
        "for sk in range(0, SPLIT_K):",
        "    w_ptrs = ws_ptr + ((sk * n_batch + bid) * M + rm[:, None]) * N + rn[None, :]",
        "    acc += tl.load(w_ptrs, mask=cmask, other=0.0)",
        *_bias_lines(plan),
        *epi,
        "c_ptrs = c_ptr + bid * s_cb + rm[:, None] * s_cm + rn[None, :] * s_cn",
        f"tl.store(c_ptrs, {last}.to(c_ptr.dtype.element_ty), mask=cmask)",
    ]
    sig = (
        f"ws_ptr, c_ptr{bias_sig}, M, N, n_batch, s_cb, s_cm, s_cn{_epi_sig(plan)}, "
        "BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, SPLIT_K: tl.constexpr"
    )
    return "@triton.jit\ndef gemm_reduce_kernel(" + sig + "):\n" + "\n".join("    " + ln for ln in L) + "\n"


_SHAPES = '''
def _gemm_operands(a, b):
    """(a3, b3, batch, M, N, K, out_shape): both operands as 3-D (batch, rows, cols) views."""
    if a.dim() == 3 and b.dim() == 2 and a.is_contiguous():
        # (B, M, K) @ (K, N): one GEMM with B*M rows reads B once.
        out_shape = (a.shape[0], a.shape[1], b.shape[1])
        a = a.reshape(1, a.shape[0] * a.shape[1], a.shape[2])
    elif a.dim() > 2 and b.dim() == 2:
        out_shape = tuple(a.shape[:-1]) + (b.shape[1],)
        a = a.reshape(-1, a.shape[-1]).unsqueeze(0)
    else:
        bs = torch.broadcast_shapes(a.shape[:-2], b.shape[:-2])
        out_shape = tuple(bs) + (a.shape[-2], b.shape[-1])
        if len(bs) > 1:
            raise ValueError(f"batch rank {len(bs)} is not supported")
        nb = bs[0] if len(bs) == 1 else 1
        a = a.expand(nb, a.shape[-2], a.shape[-1]) if a.dim() == 3 else a.unsqueeze(0).expand(nb, -1, -1)
        b = b.expand(nb, b.shape[-2], b.shape[-1]) if b.dim() == 3 else b.unsqueeze(0).expand(nb, -1, -1)
    if a.dim() == 2:
        a = a.unsqueeze(0)
    if b.dim() == 2:
        b = b.unsqueeze(0)
    if a.shape[2] != b.shape[1]:
        raise ValueError(f"inner dims differ: {tuple(a.shape)} @ {tuple(b.shape)}")
    nb = max(a.shape[0], b.shape[0])
    return a, b, nb, a.shape[1], b.shape[2], a.shape[2], out_shape


def _epi_view(t, out_shape, nb, M, N):
    """Broadcast strides of an epilogue operand over the (batch, M, N) output view."""
    e = t.expand(out_shape).reshape(nb, M, N)
    return e, e.stride(0), e.stride(1), e.stride(2)
'''


def generate(desc: TaskDescription, view: GraphView, plan: GemmPlan, params: dict[str, Any]) -> str:
    algo = params["algorithm"]
    tensors, scal = _leaf_args(plan.epilogue)
    leaf_exprs = [lf.expr for lf in plan.epilogue.tensor_leaves + plan.epilogue.scalar_leaves]
    if algo == "library+fused-epilogue":
        return _generate_library(desc, view, plan, params)
    precision = None
    if plan.dtype == "float32":
        precision = "ieee" if algo == "tiled-ieee" else "tf32x3"
    split = algo == "split-k"
    kernels = [ewops.HELPERS, _gemm_kernel(plan, precision, split)]
    if split:
        kernels.append(_reduce_kernel(plan))
    bias_arg = ", bias" if plan.bias_expr else ""
    sig = ", ".join(["a", "b"] + (["bias"] if plan.bias_expr else []) + tensors + scal)
    bm, bn, bk, gm = (int(params[k]) for k in ("BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M"))
    warps, stages = int(params["num_warps"]), int(params["num_stages"])
    L = [
        f"def launch_gemm({sig}):",
        "    a3, b3, nb, M, N, K, out_shape = _gemm_operands(a, b)",
        "    out = torch.empty(out_shape, device=a.device, dtype=a.dtype)",
        "    if out.numel() == 0:",
        "        return out",
        "    c3 = out.view(nb, M, N)",
    ]
    epi_call = []
    for t in tensors:
        L.append(f"    {t}_e, {t}_sb, {t}_sm, {t}_sn = _epi_view({t}, out_shape, nb, M, N)")
        epi_call += [f"{t}_e", f"{t}_sb", f"{t}_sm", f"{t}_sn"]
    epi_call += [f"float({s})" for s in scal]
    epi = "".join(f", {x}" for x in epi_call)
    if plan.bias_expr:
        L.append("    bias = bias.contiguous()")
    strides = (
        "a3.stride(0) if a3.shape[0] > 1 else 0, a3.stride(1), a3.stride(2), "
        "b3.stride(0) if b3.shape[0] > 1 else 0, b3.stride(1), b3.stride(2)"
    )
    if split:
        sk = int(params["SPLIT_K"])
        L += [
            f"    ws = torch.empty(({sk}, nb, M, N), device=a.device, dtype=torch.float32)",
            f"    grid = (triton.cdiv(M, {bm}) * triton.cdiv(N, {bn}), nb, {sk})",
            f"    gemm_splitk_kernel[grid](a3, b3, ws, M, N, K, nb, {strides}, BLOCK_M={bm}, BLOCK_N={bn}, "
            f"BLOCK_K={bk}, GROUP_M={gm}, SPLIT_K={sk}, num_warps={warps}, num_stages={stages})",
            "    rgrid = (triton.cdiv(M, 64), triton.cdiv(N, 64), nb)",
            f"    gemm_reduce_kernel[rgrid](ws, c3{bias_arg}, M, N, nb, c3.stride(0), c3.stride(1), "
            f"c3.stride(2){epi}, BLOCK_M=64, BLOCK_N=64, SPLIT_K={sk}, num_warps=4)",
            "    return out",
        ]
    else:
        L += [
            f"    grid = (triton.cdiv(M, {bm}) * triton.cdiv(N, {bn}), nb)",
            f"    gemm_kernel[grid](a3, b3, c3{bias_arg}, M, N, K, {strides}, c3.stride(0), c3.stride(1), "
            f"c3.stride(2){epi}, BLOCK_M={bm}, BLOCK_N={bn}, BLOCK_K={bk}, GROUP_M={gm}, "
            f"EVEN_K=(K % {bk} == 0), num_warps={warps}, num_stages={stages})",
            "    return out",
        ]
    call = [plan.a_expr, plan.b_expr] + ([plan.bias_expr] if plan.bias_expr else []) + leaf_exprs
    doc = f"EGG expert: gemm family ({plan.kind}), algorithm {algo}" + (
        f", precision {precision}." if precision else "."
    )
    return assemble(
        desc,
        "\n\n".join(kernels),
        _SHAPES + "\n\n" + "\n".join(L) + "\n",
        f"return launch_gemm({', '.join(call)})",
        doc,
    )


def _generate_library(desc: TaskDescription, view: GraphView, plan: GemmPlan, params: dict[str, Any]) -> str:
    if not plan.epilogue.nodes:
        raise Unsupported("library GEMM without an epilogue would be the reference itself")
    gleaf = Leaf(plan.gemm_node, f"t_{plan.gemm_node}", None)
    chain = Chain(
        nodes=plan.epilogue.nodes,
        tensor_leaves=[gleaf, *plan.epilogue.tensor_leaves],
        scalar_leaves=list(plan.epilogue.scalar_leaves),
    )
    ep = {k: v for k, v in params.items()}
    ep.setdefault("BLOCK", 2048)
    ep.setdefault("num_warps", 8)
    kernels = [ewops.HELPERS, ew._kernel("epilogue_kernel", chain, ep)]
    launchers = [ew.BCAST_HELPER, ew._launcher("epilogue_kernel", chain, ep)]
    if plan.kind == "linear":
        bias = plan.bias_expr or "None"
        w = plan.b_expr[: -len(".t()")]
        lib = f"t_{plan.gemm_node} = torch.nn.functional.linear({plan.a_expr}, {w}, {bias})"
    else:
        lib = f"t_{plan.gemm_node} = torch.matmul({plan.a_expr}, {plan.b_expr})"
    args = [lf.expr for lf in chain.tensor_leaves + chain.scalar_leaves]
    fwd = f"{lib}\nreturn launch_epilogue_kernel({', '.join(args)})"
    doc = (
        f"EGG expert: gemm family ({plan.kind}), algorithm library-{plan.kind}+fused-epilogue (mixed policy)."
    )
    return assemble(desc, "\n\n".join(kernels), "\n\n".join(launchers), fwd, doc)
