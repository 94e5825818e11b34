"""Training-mode BatchNorm (batch statistics per channel), optionally after a library conv (mixed
policy) and followed by an elementwise epilogue — the conv -> BN -> activation chain of many
models.

Two Triton steps:
  1. statistics: grid (C, SPLIT) partial sums of (x - shift) and (x - shift)^2 per channel (shift =
     the channel's first element, so the variance does not cancel catastrophically), then a small
     kernel turning them into mean and 1/sqrt(var + eps)
  2. one fused elementwise pass: (x - mean[c]) * rstd[c] * weight[c] + bias[c], then the epilogue
Running statistics are not updated (the forward output does not depend on them in training mode).

Which statistics apply is decided in the generated forward at run time, as PyTorch does: a
BatchNorm module in eval mode (the checker's mode) with running statistics normalises by them
(step 1 is then one tiny kernel over C channels); functional batch_norm follows its `training`
argument. eps is read from the module at run time, not baked from the captured graph.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from graph.records import OpNode, TaskDescription

from .. import ewops
from ..chain import Chain, collect_chain
from ..graphview import GraphView, Leaf, Unsupported, arg_value, assemble, flit, is_node
from . import elementwise as ew
from .libconv import LIB_OPS, library_call


@dataclass
class BnPlan:
    x_expr: str  # forward expression of the normalised input (a leaf, or a library conv call)
    conv_call: str | None
    bn: OpNode
    weight: str | None
    bias: str | None
    eps: str  # forward expression (module attribute) or literal
    epilogue: Chain
    # forward expression choosing batch statistics (True) over running statistics (False)
    use_batch: str
    running_mean: str | None
    running_var: str | None
    lib_op: str = "conv"  # what conv_call computes (names the algorithm)


def match(view: GraphView) -> BnPlan | None:
    nodes = view.compute_nodes()
    bns = [n for n in nodes if n.op == "batch_norm"]
    if len(bns) != 1:
        return None
    bn = bns[0]
    stats = _functional_stats(view, bn) if bn.kind != "call_module" else None
    i = [n.name for n in nodes].index(bn.name)
    pre = nodes[:i]
    conv_call = None
    lib_op = "conv"
    if pre:
        # A library conv / linear (mixed policy; the strict policy drops "library" algorithms).
        if len(pre) != 1 or pre[0].op not in LIB_OPS | {"linear"}:
            raise Unsupported("batch_norm input is computed by something other than one conv or linear")
        c = pre[0]
        conv_call = library_call(view, c)
        x_expr = "t_conv"
        lib_op = "linear" if c.op == "linear" else "conv"
    else:
        src = bn.args[0]
        lf = view.leaves.get(view.resolve(src["node"])) if is_node(src) else None
        if lf is None or lf.is_scalar:
            raise Unsupported("batch_norm input is not a tensor argument")
        x_expr = lf.expr
    epilogue = collect_chain(view, nodes[i + 1 :], internal={bn.name})
    if stats is not None:
        return BnPlan(x_expr=x_expr, conv_call=conv_call, bn=bn, epilogue=epilogue, lib_op=lib_op, **stats)
    affine = bn.module_attrs.get("affine", True)
    m = f"self.{bn.target}"
    return BnPlan(
        x_expr=x_expr,
        conv_call=conv_call,
        lib_op=lib_op,
        bn=bn,
        weight=f"{m}.weight" if affine else None,
        bias=f"{m}.bias" if affine else None,
        eps=f"float({m}.eps)",
        epilogue=epilogue,
        # nn.BatchNorm uses batch statistics in training mode or when it keeps no running ones.
        use_batch=f"{m}.training or {m}.running_mean is None",
        running_mean=f"{m}.running_mean",
        running_var=f"{m}.running_var",
    )


def _tensor_arg(view: GraphView, bn: OpNode, pos: int, key: str) -> str | None:
    a = arg_value(bn, pos, key)
    if a is None:
        return None
    lf = view.leaf_of(a["node"]) if is_node(a) else None
    if lf is None or lf.is_scalar:
        raise Unsupported(f"batch_norm {key} is not a tensor argument or parameter")
    return lf.expr


def _functional_stats(view: GraphView, bn: OpNode) -> dict[str, Any]:
    """F.batch_norm(input, running_mean, running_var, weight, bias, training, momentum, eps)."""
    training = arg_value(bn, 5, "training", False)
    eps = arg_value(bn, 7, "eps", 1e-5)
    if not isinstance(training, bool):
        raise Unsupported("batch_norm training flag is not a constant")
    rm = _tensor_arg(view, bn, 1, "running_mean")
    rv = _tensor_arg(view, bn, 2, "running_var")
    if not training and (rm is None or rv is None):
        raise Unsupported("eval-mode batch_norm without running statistics")
    w = _tensor_arg(view, bn, 3, "weight")
    b = _tensor_arg(view, bn, 4, "bias")
    if (w is None) != (b is None):
        raise Unsupported("batch_norm with only one of weight / bias")
    return {
        "weight": w,
        "bias": b,
        "eps": flit(eps),
        "use_batch": "True" if training else "False",
        "running_mean": rm,
        "running_var": rv,
    }


def algorithms(plan: BnPlan) -> list[str]:
    if plan.conv_call:
        return [f"library-{plan.lib_op}+bn-stats+fused-epilogue"]
    return ["split-stats+fused-normalize"]


def defaults(plan: BnPlan, algorithm: str) -> dict[str, Any]:
    return {"BLOCK": 2048, "num_warps": 8, "EVICT": "", "PERSISTENT": False}


def space(plan: BnPlan, params: dict[str, Any], stage: str, sp: dict[str, list]) -> dict[str, list]:
    from ..spaces import SPACES

    return SPACES["elementwise"].get(stage, {})


STATS = """
@triton.jit
def bn_partial_kernel(x_ptr, part_ptr, C, HW, total, chunk, SPLIT: tl.constexpr, BLOCK: tl.constexpr):
    c = tl.program_id(0).to(tl.int64)
    s = tl.program_id(1)
    shift = tl.load(x_ptr + c * HW).to(tl.float32)
    acc1 = tl.zeros([BLOCK], dtype=tl.float32)
    acc2 = tl.zeros([BLOCK], dtype=tl.float32)
    lo = s * chunk
    hi = tl.minimum(total, lo + chunk)
    for start in range(lo, hi, BLOCK):
        j = start + tl.arange(0, BLOCK)
        mask = j < hi
        n = j // HW
        addr = n.to(tl.int64) * C * HW + c * HW + (j - n * HW)
        d = tl.where(mask, tl.load(x_ptr + addr, mask=mask, other=0.0).to(tl.float32) - shift, 0.0)
        acc1 += d
        acc2 += d * d
    tl.store(part_ptr + (c * SPLIT + s) * 2, tl.sum(acc1, 0))
    tl.store(part_ptr + (c * SPLIT + s) * 2 + 1, tl.sum(acc2, 0))


@triton.jit
def bn_finalize_kernel(x_ptr, part_ptr, mean_ptr, rstd_ptr, HW, total, eps, SPLIT: tl.constexpr):
    c = tl.program_id(0).to(tl.int64)
    k = tl.arange(0, SPLIT)
    s1 = tl.sum(tl.load(part_ptr + (c * SPLIT + k) * 2), 0)
    s2 = tl.sum(tl.load(part_ptr + (c * SPLIT + k) * 2 + 1), 0)
    shift = tl.load(x_ptr + c * HW).to(tl.float32)
    m = s1 / total
    var = tl.maximum(s2 / total - m * m, 0.0)
    tl.store(mean_ptr + c, shift + m)
    tl.store(rstd_ptr + c, 1.0 / tl.sqrt(var + eps))


@triton.jit
def bn_running_kernel(rm_ptr, rv_ptr, mean_ptr, rstd_ptr, C, eps, BLOCK: tl.constexpr):
    c = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = c < C
    rm = tl.load(rm_ptr + c, mask=mask, other=0.0).to(tl.float32)
    rv = tl.load(rv_ptr + c, mask=mask, other=1.0).to(tl.float32)
    tl.store(mean_ptr + c, rm, mask=mask)
    tl.store(rstd_ptr + c, 1.0 / tl.sqrt(rv + eps), mask=mask)
"""


def generate(desc: TaskDescription, view: GraphView, plan: BnPlan, params: dict[str, Any]) -> str:
    name = plan.bn.name
    x_leaf = Leaf("bn_x", "x_bn", None)
    stats = [Leaf("bn_mean", "mean_v", None), Leaf("bn_rstd", "rstd_v", None)]
    aff = []
    if plan.weight:
        aff = [Leaf("bn_w", "w_v", None), Leaf("bn_b", "b_v", None)]
    # The BN node becomes elementwise ops over the per-channel leaves.
    chain_nodes = [
        OpNode(
            name=f"{name}_c",
            kind="call_function",
            op="sub",
            target="sub",
            args=[{"node": "bn_x"}, {"node": "bn_mean"}],
        ),
        OpNode(
            name=f"{name}_n",
            kind="call_function",
            op="mul",
            target="mul",
            args=[{"node": f"{name}_c"}, {"node": "bn_rstd"}],
        ),
    ]
    last = f"{name}_n"
    if plan.weight:
        chain_nodes += [
            OpNode(
                name=f"{name}_w",
                kind="call_function",
                op="mul",
                target="mul",
                args=[{"node": last}, {"node": "bn_w"}],
            ),
            OpNode(
                name=name,
                kind="call_function",
                op="add",
                target="add",
                args=[{"node": f"{name}_w"}, {"node": "bn_b"}],
            ),
        ]
    else:
        chain_nodes.append(
            OpNode(name=name, kind="call_function", op="mul", target="mul", args=[{"node": last}, 1.0])
        )
    chain = Chain(
        nodes=chain_nodes + plan.epilogue.nodes,
        tensor_leaves=[x_leaf, *stats, *aff, *plan.epilogue.tensor_leaves],
        scalar_leaves=list(plan.epilogue.scalar_leaves),
    )
    kernels = [ewops.HELPERS, STATS, ew._kernel("bn_apply_kernel", chain, params)]
    launchers = [ew.BCAST_HELPER, ew._launcher("bn_apply_kernel", chain, params)]
    stats_launch = '''
def launch_bn_running(x, rm, rv, eps):
    """Per-channel running mean and 1/sqrt(running_var + eps), shaped (C, 1, ..., 1)."""
    C = x.shape[1]
    if rm.numel() != C or rv.numel() != C:
        raise ValueError("running statistics do not match the channel count")
    mean = torch.empty((C,), device=x.device, dtype=torch.float32)
    rstd = torch.empty((C,), device=x.device, dtype=torch.float32)
    bn_running_kernel[(triton.cdiv(C, 256),)](rm.contiguous(), rv.contiguous(), mean, rstd, C, eps,
                                               BLOCK=256, num_warps=4)
    view_shape = (C,) + (1,) * (x.dim() - 2)
    return mean.view(view_shape), rstd.view(view_shape)


def launch_bn_stats(x, eps):
    """Per-channel mean and 1/sqrt(var + eps) over (N, *spatial), shaped (C, 1, ..., 1)."""
    N, C = x.shape[0], x.shape[1]
    HW = x.numel() // (N * C) if N * C else 0
    total = N * HW
    if total == 0:
        raise ValueError("batch_norm over an empty batch")
    split = 1
    while split < 64 and split * 2 * C <= 1024 and total // (split * 2) >= 4096:
        split *= 2
    chunk = triton.cdiv(triton.cdiv(total, split), 1024) * 1024
    part = torch.empty((C, split, 2), device=x.device, dtype=torch.float32)
    bn_partial_kernel[(C, split)](x, part, C, HW, total, chunk, SPLIT=split, BLOCK=1024, num_warps=4)
    mean = torch.empty((C,), device=x.device, dtype=torch.float32)
    rstd = torch.empty((C,), device=x.device, dtype=torch.float32)
    bn_finalize_kernel[(C,)](x, part, mean, rstd, HW, total, eps, SPLIT=split, num_warps=1)
    view_shape = (C,) + (1,) * (x.dim() - 2)
    return mean.view(view_shape), rstd.view(view_shape)
'''
    fwd = []
    if plan.conv_call:
        fwd.append(f"x_bn = {plan.conv_call}.contiguous()")
    else:
        fwd.append(f"x_bn = {plan.x_expr}.contiguous()")
    fwd.append(f"if {plan.use_batch}:")
    fwd.append(f"    mean_v, rstd_v = launch_bn_stats(x_bn, {plan.eps})")
    if plan.running_mean is not None and plan.running_var is not None:
        fwd.append("else:")
        fwd.append(
            f"    mean_v, rstd_v = launch_bn_running(x_bn, {plan.running_mean}, {plan.running_var}, "
            f"{plan.eps})"
        )
    if plan.weight:
        fwd.append(f"w_v = {plan.weight}.view(mean_v.shape)")
        fwd.append(f"b_v = {plan.bias}.view(mean_v.shape)")
    args = [lf.expr for lf in chain.tensor_leaves + chain.scalar_leaves]
    fwd.append(f"return launch_bn_apply_kernel({', '.join(args)})")
    doc = f"EGG expert: batchnorm family (batch or running statistics), algorithm {algorithms(plan)[0]}."
    return assemble(
        desc, "\n\n".join(kernels), stats_launch + "\n\n" + "\n\n".join(launchers), "\n".join(fwd), doc
    )
