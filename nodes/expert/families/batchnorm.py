"""Training-mode BatchNorm (batch statistics per channel), optionally after a library conv (mixed
policy) and followed by an elementwise epilogue — the conv -> BN -> activation chain of many
models.

Two Triton steps:
  1. statistics: partial sums of (x - shift) and (x - shift)^2 per channel (shift = the channel's
     first element, so the variance does not cancel catastrophically) over SPLIT programs per
     channel, then a small kernel turning them into mean and 1/sqrt(var + eps)
  2. one fused pass: (x - mean[c]) * rstd[c] * weight[c] + bias[c], then the epilogue
Algorithms: channel-tiles (first) runs both steps on 2-D tiles of (channels or (sample, channel)
rows) x pixels: rows of a channel plane, so no per-element index division, coalesced along the
pixels (along the channels when there are none, BatchNorm1d), masked only on ragged plane tails;
the split sized at launch to fill the SMs. library-conv+cl-channel-tiles (after a 2-d or 3-d
conv; offered last) calls the conv on a channels-last input, so cuDNN runs its channels-last
kernels (torch.compile's layout choice; 1.7x faster than NCHW at a 3x3, 128-channel shape on
the H200, PERF_NOTES), sums each channel over the (pixel x channel) rows of its output
coalesced along the channels, and keeps the output channels-last (a following conv reads it as
it is); through the agent it has lost to the NCHW seeds so far. split-stats+fused-normalize
walks each channel's flattened (sample, pixel) index and applies through the elementwise
family's broadcast kernel. channel-tiles+max-pool (the only algorithm where a 2-d max pool ends
the group, as in conv -> BN -> ReLU -> pool stages and ResNet stems): the same statistics, then
one pass per pooled output element over its window (normalise, affine, epilogue, max), so the
full-size normalised activation is never written and read back.
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
from ..kernelfiles import jit_source, kernel_source
from . import elementwise as ew
from .libconv import CL_HELPERS, LIB_OPS, LIBRARY_PRECISION, library_call, split_call
from .pooling import EPI_MODE, POOL_OPS, geometry_expr, window_args


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
    # the library conv's bias, left out of conv_call (None: none, or kept in the call)
    conv_bias: str | None = None
    # the same conv on a channels-last input, without its bias, and that bias (2-d/3-d convs
    # whose call splits and whose output only the norm reads; None otherwise)
    conv_cl_call: str | None = None
    conv_cl_bias: str | None = None
    # a 2-d max pool ending the group (over the epilogue's result): the normalise pass then
    # writes the pooled output only (BnPool); None without one
    pool: BnPool | None = None


@dataclass
class BnPool:
    node: OpNode
    # captured (kernel, stride, padding, dilation), each a pair
    window: tuple[list[int], list[int], list[int], list[int]]
    geometry: str | None  # forward's expression of a module's window, read at run time


def _trailing_pool(view: GraphView, bn: OpNode, rest: list[OpNode]) -> BnPool | None:
    """The 2-d max pool that ends the group after the norm and its elementwise epilogue, reading
    the epilogue's last value (or the norm's), or None when the group does not end in one."""
    if not rest or rest[-1].op not in POOL_OPS:
        return None
    p = rest[-1]
    kind, nd, ks, stride, padding, dilation, _ = window_args(p)
    if kind != "max" or nd != 2:
        raise Unsupported(f"{p.op} after batch_norm (only a 2-d max pool is fused)")
    src = view.refs(p)
    if len(src) != 1 or src[0] != (rest[-2].name if len(rest) > 1 else bn.name):
        raise Unsupported("the max pool does not read the norm's epilogue")
    return BnPool(p, (ks, stride, padding, dilation), geometry_expr(p))


def match(view: GraphView) -> BnPlan | None:
    nodes = view.compute_nodes()
    bns = [n for n in nodes if n.op == "batch_norm"]
    if len(bns) != 1:
        return None
    bn = bns[0]
    stats = _functional_stats(view, bn) if bn.kind != "call_module" else None
    i = [n.name for n in nodes].index(bn.name)
    pre = nodes[:i]
    conv_call = conv_bias = None
    cl: dict[str, Any] = {}
    if pre:
        # A library conv (mixed policy; the strict policy drops "library" algorithms). A linear
        # stays a group of its own: the gemm family lowers it to a Triton 3xTF32 GEMM, which
        # beats fp32 cuBLAS, with the library as its fallback seed, and this family takes the
        # norm and its epilogue after it (the same passes over memory as a library linear here).
        if len(pre) != 1 or pre[0].op not in LIB_OPS:
            raise Unsupported("batch_norm input is computed by something other than one convolution")
        c = pre[0]
        conv_call = library_call(view, c)
        x_expr = "t_conv"
        # The conv's bias is a pass of its own in PyTorch (an add over the whole output); batch
        # statistics cancel it exactly, so the conv runs without it and only the running
        # statistics' mean takes it into account (mean - bias, over C values).
        split = split_call(view, c, "")
        uses_conv = any(c.name in view.refs(n) for n in nodes[i + 1 :])
        if split is not None and split[1] is not None and not uses_conv:
            conv_call, conv_bias = split
        split_cl = split_call(view, c, "to_channels_last") if int(c.op[-2]) > 1 else None
        if split_cl is not None and not uses_conv:
            cl = {"conv_cl_call": split_cl[0], "conv_cl_bias": split_cl[1]}
    else:
        src = bn.args[0]
        lf = view.leaves.get(view.resolve(src["node"])) if is_node(src) else None
        if lf is None or lf.is_scalar:
            raise Unsupported("batch_norm input is not a tensor argument")
        x_expr = lf.expr
    rest = nodes[i + 1 :]
    pool = _trailing_pool(view, bn, rest)
    if pool is not None:
        rest = rest[:-1]
        cl = {}  # the pooled pass reads the conv's NCHW output
    epilogue = collect_chain(view, rest, internal={bn.name})
    if stats is not None:
        plan = BnPlan(
            x_expr=x_expr, conv_call=conv_call, conv_bias=conv_bias, bn=bn, epilogue=epilogue, **stats, **cl
        )
        return _with_pool(plan, pool)
    affine = bn.module_attrs.get("affine", True)
    m = f"self.{bn.target}"
    plan = BnPlan(
        x_expr=x_expr,
        conv_call=conv_call,
        conv_bias=conv_bias,
        bn=bn,
        weight=f"{m}.weight" if affine else None,
        bias=f"{m}.bias" if affine else None,
        eps=f"float({m}.eps)",
        epilogue=epilogue,
        # nn.BatchNorm uses batch statistics in training mode or when it keeps no running ones.
        use_batch=f"{m}.training or {m}.running_mean is None",
        running_mean=f"{m}.running_mean",
        running_var=f"{m}.running_var",
        **cl,
    )
    return _with_pool(plan, pool)


def _with_pool(plan: BnPlan, pool: BnPool | None) -> BnPlan:
    if pool is None:
        return plan
    if not _tiles_fit(plan):
        raise Unsupported("a pooled batch_norm epilogue reads a tensor of another broadcast")
    plan.pool = pool
    return plan


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


TILES = "channel-tiles"
# channel-tiles statistics, then one pass from the norm's input to a trailing max pool's output:
# each output element normalises its window's inputs, applies the epilogue and keeps the
# largest, so the full-size activation is never written and read back (torch.compile fuses
# BatchNorm, ReLU and the pool the same way)
POOLED = TILES + "+max-pool"
# The conv on a channels-last input (cuDNN's channels-last TF32 kernels; torch.compile's layout
# choice), statistics over (pixel x channel) tiles coalesced along the channels, and the
# normalise pass flat over the channels-last output, which it keeps: a following conv reads it
# as it is (to_channels_last returns a channels-last tensor unchanged).
CL_TILES = "library-conv+cl-" + TILES


def _tiles_fit(plan: BnPlan) -> bool:
    """The channel-tiles apply kernel reads epilogue operands of the output's shape, per channel
    ((C, 1, ..., 1)) or of one element; other broadcasts stay with the flat kernel."""
    out = plan.bn.shape or []
    for lf in plan.epilogue.tensor_leaves:
        shape = list(lf.shape or [])
        dims = [1] * (len(out) - len(shape)) + shape
        numel = 1
        for d in shape:
            numel *= d
        per_channel = (
            len(dims) == len(out)
            and len(out) > 1
            and all(d == (out[1] if i == 1 else 1) for i, d in enumerate(dims))
        )
        if not (dims == out or per_channel or numel == 1):
            return False
    return True


def _tiled(algorithm: str) -> bool:
    return algorithm.endswith((TILES, POOLED))


def algorithms(plan: BnPlan) -> list[str]:
    if plan.pool is not None:
        return [f"library-conv+{POOLED}" if plan.conv_call else POOLED]
    tiles = [TILES] if _tiles_fit(plan) else []
    if plan.conv_call:
        algos = [f"library-conv+{a}" for a in tiles] + ["library-conv+bn-stats+fused-epilogue"]
        if tiles and plan.conv_cl_call:
            # after the NCHW seeds: measured through the agent on an H100 (2026-12-07) it lost to
            # them on cx09 (0.352 against 0.309 ms), cx13 (0.896 against 0.576) and cv06 (0.220
            # against 0.172), although cuDNN's channels-last 3x3 conv alone is faster on cx09
            # (0.063 against 0.121 ms): the input's layout pass and the NCHW operands copied into
            # the output's layout take the gain back. Offered, so the search keeps it where it wins.
            algos.append(CL_TILES)
        return algos
    return tiles + ["split-stats+fused-normalize"]


def defaults(plan: BnPlan, algorithm: str) -> dict[str, Any]:
    # a library conv computes in PyTorch's default precision (TF32 where cuDNN picks it): a note
    # for reports (as the libconv family's), not a tunable
    lib = {"PRECISION": LIBRARY_PRECISION} if plan.conv_call else {}
    if _tiled(algorithm):
        # 2048-element tiles (8 per thread at 8 warps) for the statistics; 8 programs per SM. The
        # normalise pass flat over 1024-element blocks (0.997 of the H200's bandwidth roof in
        # evals/h200/membw_probe.py, against 0.90 for its best 2-D channel tiles).
        return {
            "BLOCK": 2048,
            "num_warps": 8,
            "PROGS_PER_SM": 8,
            "FLAT_APPLY": True,
            "APPLY_BLOCK": 1024,
            **lib,
        }
    return {"BLOCK": 2048, "num_warps": 8, "EVICT": "", "PERSISTENT": False, **lib}


def valid(plan: BnPlan, params: dict[str, Any]) -> str | None:
    if _tiled(params["algorithm"]) and params["BLOCK"] < 128:
        return "channel tiles need BLOCK >= 128"
    if params["algorithm"] == CL_TILES and plan.conv_cl_call is None:
        return "no channels-last call for this conv"
    return None


def space(plan: BnPlan, params: dict[str, Any], stage: str, sp: dict[str, list]) -> dict[str, list]:
    from ..spaces import SPACES

    if _tiled(params["algorithm"]):
        # the channels-last and pooled passes are always flat (2-D tiles would be NCHW rows)
        flat = {} if params["algorithm"] == CL_TILES or plan.pool else {"FLAT_APPLY": [False]}
        # BLOCK and PROGS_PER_SM shape only the statistics kernels: where the timed forward never
        # runs them, a variant of theirs is the same kernel timed again (a noise win at best)
        stats = _batch_stats_timed(plan)
        return {
            "tiling": {**({"BLOCK": [1024, 4096, 512]} if stats else {}), "APPLY_BLOCK": [2048, 4096]},
            "mapping": {**({"PROGS_PER_SM": [4, 16, 2]} if stats else {}), **flat},
            "memory": {"num_warps": [4, 16]},
        }.get(stage, {})
    return SPACES["elementwise"].get(stage, {})


def _batch_stats_timed(plan: BnPlan) -> bool:
    """Whether the forward the toolbox checks and times computes batch statistics. It runs
    models in eval mode (tools/worker/runner.py), where a BatchNorm module that tracks running
    statistics normalises by them; functional batch_norm follows its constant `training`."""
    if plan.bn.kind == "call_module":
        return not plan.bn.module_attrs.get("track_running_stats", True)
    return plan.use_batch == "True"


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
def bn_running_kernel(rm_ptr, rv_ptr, cb_ptr, mean_ptr, rstd_ptr, C, eps, HAS_CB: tl.constexpr,
                      BLOCK: tl.constexpr):
    c = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = c < C
    rm = tl.load(rm_ptr + c, mask=mask, other=0.0).to(tl.float32)
    if HAS_CB:  # the input came without the conv's bias: (x + b) - rm == x - (rm - b)
        rm = rm - tl.load(cb_ptr + c, mask=mask, other=0.0).to(tl.float32)
    rv = tl.load(rv_ptr + c, mask=mask, other=1.0).to(tl.float32)
    tl.store(mean_ptr + c, rm, mask=mask)
    tl.store(rstd_ptr + c, 1.0 / tl.sqrt(rv + eps), mask=mask)
"""


def generate(desc: TaskDescription, view: GraphView, plan: BnPlan, params: dict[str, Any]) -> str:
    if _tiled(params["algorithm"]):
        return _generate_tiles(desc, plan, params)
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
    stats_launch = (
        RUNNING_LAUNCH
        + '''

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
    )
    fwd = _forward_stats(plan, "launch_bn_stats")
    args = [lf.expr for lf in chain.tensor_leaves + chain.scalar_leaves]
    fwd.append(f"return launch_bn_apply_kernel({', '.join(args)})")
    doc = f"EGG expert: batchnorm family (batch or running statistics), algorithm {params['algorithm']}."
    return assemble(
        desc, "\n\n".join(kernels), stats_launch + "\n\n" + "\n\n".join(launchers), "\n".join(fwd), doc
    )


RUNNING_LAUNCH = '''
def launch_bn_running(x, rm, rv, eps, cb=None):
    """Per-channel running mean (less the conv bias `cb` left out of x) and
    1/sqrt(running_var + eps), shaped (C, 1, ..., 1)."""
    C = x.shape[1]
    if rm.numel() != C or rv.numel() != C:
        raise ValueError("running statistics do not match the channel count")
    mean = torch.empty((C,), device=x.device, dtype=torch.float32)
    rstd = torch.empty((C,), device=x.device, dtype=torch.float32)
    bn_running_kernel[(triton.cdiv(C, 256),)](rm.contiguous(), rv.contiguous(),
                                               rm if cb is None else cb.contiguous(), mean, rstd, C, eps,
                                               HAS_CB=cb is not None, BLOCK=256, num_warps=4)
    view_shape = (C,) + (1,) * (x.dim() - 2)
    return mean.view(view_shape), rstd.view(view_shape)
'''


def _forward_stats(plan: BnPlan, stats_launcher: str, cl: bool = False) -> list[str]:
    """forward() lines up to the per-channel statistics: x_bn (the input, or the library conv's
    output: channels-last with `cl`), mean_v / rstd_v from the batch (stats_launcher) or the
    running statistics, and the affine w_v / b_v, all shaped (C, 1, ..., 1)."""
    if cl:
        # cuDNN returns a channels-last output for a channels-last input; to_channels_last only
        # makes sure of it (it returns such a tensor as it is)
        fwd = [f"x_bn = to_channels_last({plan.conv_cl_call})"]
    else:
        fwd = [f"x_bn = {plan.conv_call if plan.conv_call else plan.x_expr}.contiguous()"]
    conv_bias = plan.conv_cl_bias if cl else plan.conv_bias
    fwd.append(f"if {plan.use_batch}:")
    fwd.append(f"    mean_v, rstd_v = {stats_launcher}(x_bn, {plan.eps})")
    if plan.running_mean is not None and plan.running_var is not None:
        fwd.append("else:")
        fwd.append(
            f"    mean_v, rstd_v = launch_bn_running(x_bn, {plan.running_mean}, {plan.running_var}, "
            f"{plan.eps}, {conv_bias})"
        )
    if plan.weight:
        fwd.append(f"w_v = {plan.weight}.view(mean_v.shape)")
        fwd.append(f"b_v = {plan.bias}.view(mean_v.shape)")
    return fwd


# -- channel-tiles: per-channel statistics and normalisation on (channel, pixel) tiles ----------

TILE_KERNELS = """
@triton.jit
def bn_tile_partial_kernel(x_ptr, part_ptr, C, HW, HB, n_blocks, b_per, SPLIT: tl.constexpr,
                           BC: tl.constexpr, BHW: tl.constexpr):
    # Shifted sums over this program's run of (sample, pixel-block) blocks for BC channels; the
    # blocks are rows of one channel plane, so there is no per-element index division, and
    # loads are coalesced along the pixels (along the channels when HW is 1).
    cc = tl.program_id(0) * BC + tl.arange(0, BC)
    s = tl.program_id(1)
    cm = cc < C
    shift = tl.load(x_ptr + cc * HW, mask=cm, other=0.0).to(tl.float32)
    hw0 = tl.arange(0, BHW)
    acc1 = tl.zeros([BC, BHW], dtype=tl.float32)
    acc2 = tl.zeros([BC, BHW], dtype=tl.float32)
    b_lo = s * b_per
    b_hi = tl.minimum(n_blocks, b_lo + b_per)
    for b in range(b_lo, b_hi):
        n = b // HB
        hw = (b - n * HB) * BHW + hw0
        m = cm[:, None] & (hw < HW)[None, :]
        ptrs = x_ptr + n.to(tl.int64) * C * HW + cc[:, None] * HW + hw[None, :]
        d = tl.where(m, tl.load(ptrs, mask=m, other=0.0).to(tl.float32) - shift[:, None], 0.0)
        acc1 += d
        acc2 += d * d
    tl.store(part_ptr + (cc * SPLIT + s) * 2, tl.sum(acc1, 1), mask=cm)
    tl.store(part_ptr + (cc * SPLIT + s) * 2 + 1, tl.sum(acc2, 1), mask=cm)
"""

TILE_STATS_LAUNCH = """
def launch_bn_tile_stats(x, eps):
    \\"\\"\\"Per-channel mean and 1/sqrt(var + eps) over (N, *spatial), shaped (C, 1, ..., 1).\\"\\"\\"
    N, C = x.shape[0], x.shape[1]
    HW = x.numel() // (N * C) if N * C else 0
    total = N * HW
    if total == 0:
        raise ValueError("batch_norm over an empty batch")
    bhw = min({block}, triton.next_power_of_2(HW))
    bc = min(max(1, {block} // bhw), triton.next_power_of_2(C))
    hb = triton.cdiv(HW, bhw)
    n_blocks = N * hb
    sms = torch.cuda.get_device_properties(x.device).multi_processor_count if x.is_cuda else 4
    want = triton.cdiv(sms * {per_sm}, triton.cdiv(C, bc))
    split = min(256, triton.next_power_of_2(max(1, want)), triton.next_power_of_2(n_blocks))
    b_per = triton.cdiv(n_blocks, split)
    part = torch.empty((C, split, 2), device=x.device, dtype=torch.float32)
    bn_tile_partial_kernel[(triton.cdiv(C, bc), split)](x, part, C, HW, hb, n_blocks, b_per, SPLIT=split,
                                                        BC=bc, BHW=bhw, num_warps={warps})
    mean = torch.empty((C,), device=x.device, dtype=torch.float32)
    rstd = torch.empty((C,), device=x.device, dtype=torch.float32)
    bn_finalize_kernel[(C,)](x, part, mean, rstd, HW, total, eps, SPLIT=split, num_warps=1)
    view_shape = (C,) + (1,) * (x.dim() - 2)
    return mean.view(view_shape), rstd.view(view_shape)
"""


CL_KERNELS = """
@triton.jit
def bn_cl_partial_kernel(x_ptr, part_ptr, R, C, r_per, SPLIT: tl.constexpr, BR: tl.constexpr,
                         BC: tl.constexpr):
    # Shifted sums over this program's run of rows of the channels-last output seen as an
    # (N * pixels, C) matrix, for BC channels: loads coalesced along the channels.
    cc = tl.program_id(0) * BC + tl.arange(0, BC)
    s = tl.program_id(1)
    cm = cc < C
    shift = tl.load(x_ptr + cc, mask=cm, other=0.0).to(tl.float32)
    rr0 = tl.arange(0, BR)
    acc1 = tl.zeros([BR, BC], dtype=tl.float32)
    acc2 = tl.zeros([BR, BC], dtype=tl.float32)
    lo = s * r_per
    hi = tl.minimum(R, lo + r_per)
    for r in range(lo, hi, BR):
        rr = r + rr0
        m = (rr < hi)[:, None] & cm[None, :]
        ptrs = x_ptr + rr.to(tl.int64)[:, None] * C + cc[None, :]
        d = tl.where(m, tl.load(ptrs, mask=m, other=0.0).to(tl.float32) - shift[None, :], 0.0)
        acc1 += d
        acc2 += d * d
    tl.store(part_ptr + (cc * SPLIT + s) * 2, tl.sum(acc1, 0), mask=cm)
    tl.store(part_ptr + (cc * SPLIT + s) * 2 + 1, tl.sum(acc2, 0), mask=cm)
"""

CL_STATS_LAUNCH = '''
def _epi_mode_cl(t, x):
    """_epi_mode for the channels-last output `x`: an operand of its shape is read in its layout
    (copied into it when laid out otherwise); per-channel and one-element operands as there."""
    if t.numel() != 1 and [1] * (x.dim() - t.dim()) + list(t.shape) == list(x.shape):
        e = t.expand(x.shape)
        return (e if e.stride() == x.stride() else torch.empty_like(x).copy_(e)), 0
    return _epi_mode(t, x.shape)


def launch_bn_cl_stats(x, eps):
    """Per-channel mean and 1/sqrt(var + eps) of the channels-last `x` over (N, *spatial): the
    columns of its (N * pixels, C) rows, split over programs to fill the SMs; shaped (C, 1, ..., 1)."""
    C = x.shape[1]
    R = x.numel() // C if C else 0
    if R == 0:
        raise ValueError("batch_norm over an empty batch")
    bc = min(64, triton.next_power_of_2(C))
    br = max(1, {block} // bc)
    ncb = triton.cdiv(C, bc)
    sms = torch.cuda.get_device_properties(x.device).multi_processor_count if x.is_cuda else 4
    want = triton.cdiv(sms * {per_sm}, ncb)
    split = min(256, triton.next_power_of_2(max(1, want)), triton.next_power_of_2(triton.cdiv(R, br)))
    r_per = triton.cdiv(triton.cdiv(R, split), br) * br
    part = torch.empty((C, split, 2), device=x.device, dtype=torch.float32)
    bn_cl_partial_kernel[(ncb, split)](x, part, R, C, r_per, SPLIT=split, BR=br, BC=bc, num_warps={warps})
    mean = torch.empty((C,), device=x.device, dtype=torch.float32)
    rstd = torch.empty((C,), device=x.device, dtype=torch.float32)
    # the shift of channel c is its first element, at offset c here (HW = 1 in the finalize)
    bn_finalize_kernel[(C,)](x, part, mean, rstd, 1, R, eps, SPLIT=split, num_warps=1)
    view_shape = (C,) + (1,) * (x.dim() - 2)
    return mean.view(view_shape), rstd.view(view_shape)
'''


def _apply_sig(plan: BnPlan, dims: str, consts: list[str]) -> str:
    """A normalise kernel's parameters: input, output, the per-channel mean and rstd (and affine
    weight and bias), the sizes `dims`, the epilogue's tensors and scalars, the constexprs
    `consts`, then each epilogue tensor's launch mode."""
    leaves = plan.epilogue.tensor_leaves
    aff = ", w_ptr, b_ptr" if plan.weight else ""
    return (
        f"x_ptr, out_ptr, mean_ptr, rstd_ptr{aff}, {dims}"
        + "".join(f", t_{lf.name}_ptr" for lf in leaves)
        + "".join(f", l_{lf.name}_val" for lf in plan.epilogue.scalar_leaves)
        + "".join(f", {c}: tl.constexpr" for c in consts)
        + "".join(f", t_{lf.name}_MODE: tl.constexpr" for lf in leaves)
    )


def _tile_apply_kernel(plan: BnPlan, flat: bool) -> str:
    """y = (x - mean[c]) * rstd[c] (* w[c] + b[c]), then the epilogue. Tiles (flat False): a [BR
    rows of (n, c), BHW pixels] tile, per-channel values gathered once per row. Flat: BLOCK
    consecutive elements, the channel decoded and gathered per element (L1 hits); on the H200
    (eval BN over (64, 64, 512, 512), evals/h200/membw_probe.py) the flat form ran at 0.997 of
    the bandwidth roof and the 2-D tiles at 0.90 at best."""
    sig = _apply_sig(plan, "C, HW, NC", ["BIG", "BLOCK"] if flat else ["BR", "BHW"])
    if flat:
        # NC is the element count here; 32-bit offsets (cheaper division) unless it needs 64
        L = [
            "offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)",
            "if BIG:",
            "    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)",
            "m = offs < NC",
            "c = (offs // HW) % C",
        ]
        cm, col = "m", ""
    else:
        L = [
            "rr = tl.program_id(0) * BR + tl.arange(0, BR)",
            "hw = tl.program_id(1) * BHW + tl.arange(0, BHW)",
            "rmask = rr < NC",
            "c = rr % C",
            "m = rmask[:, None] & (hw < HW)[None, :]",
            "offs = rr.to(tl.int64)[:, None] * HW + hw[None, :]",
        ]
        cm, col = "rmask", "[:, None]"
    L += [
        "x = tl.load(x_ptr + offs, mask=m, other=0.0).to(tl.float32)",
        f"mean = tl.load(mean_ptr + c, mask={cm}, other=0.0){col}",
        f"rstd = tl.load(rstd_ptr + c, mask={cm}, other=0.0){col}",
        "y = (x - mean) * rstd",
    ]
    if plan.weight:
        L += [
            f"w = tl.load(w_ptr + c, mask={cm}, other=0.0).to(tl.float32){col}",
            f"bb = tl.load(b_ptr + c, mask={cm}, other=0.0).to(tl.float32){col}",
            "y = y * w + bb",
        ]
    epi, last = _epilogue_lines(plan, "offs", "m", cm, col)
    L += [*epi, f"tl.store(out_ptr + offs, {last}.to(out_ptr.dtype.element_ty), mask=m)"]
    return jit_source("bn_tile_apply_kernel", sig, L)


def _epilogue_lines(plan: BnPlan, at: str, mask: str, cmask: str, col: str = "") -> tuple[list[str], str]:
    """The epilogue on the normalised `y`: its tensors loaded by launch mode (0: the input's
    shape, at offsets `at` under `mask`; 1: per channel `c` under `cmask`, broadcast by `col`;
    2: one element), then its statements; and the variable holding the result."""
    env = {plan.bn.name: "y", **{lf.name: f"l_{lf.name}_val" for lf in plan.epilogue.scalar_leaves}}
    L: list[str] = []
    for lf in plan.epilogue.tensor_leaves:
        P = f"t_{lf.name}"
        L += [
            f"if {P}_MODE == 0:",
            f"    {P} = tl.load({P}_ptr + {at}, mask={mask}, other=0.0).to(tl.float32)",
            f"elif {P}_MODE == 1:",
            f"    {P} = tl.load({P}_ptr + c, mask={cmask}, other=0.0).to(tl.float32){col}",
            "else:",
            f"    {P} = tl.load({P}_ptr).to(tl.float32)",
        ]
        env[lf.name] = P
    epi, last = plan.epilogue.body(env)
    return L + epi, last or "y"


def _pool_apply_kernel(plan: BnPlan) -> str:
    """The normalise pass into a 2-d max pool: BLOCK flat NCHW output elements per program; for
    each window element (the window a constexpr, unrolled) the input is normalised, the affine
    and the epilogue applied, and the largest kept (padding counts as -inf, as in PyTorch)."""
    window = ["KH", "KW", "SH", "SW", "PH", "PW", "DH", "DW"]
    sig = _apply_sig(plan, "C, H, W, OH, OW, NOUT", ["BIG", "BLOCK", *window])
    L = [
        "offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)",
        "if BIG:",
        "    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)",
        "m = offs < NOUT",
        "ow = offs % OW",
        "oh = (offs // OW) % OH",
        "plane = offs // (OW * OH)",
        "c = plane % C",
        "mean = tl.load(mean_ptr + c, mask=m, other=0.0)",
        "rstd = tl.load(rstd_ptr + c, mask=m, other=0.0)",
    ]
    if plan.weight:
        L += [
            "w = tl.load(w_ptr + c, mask=m, other=0.0).to(tl.float32)",
            "bb = tl.load(b_ptr + c, mask=m, other=0.0).to(tl.float32)",
        ]
    L += [
        "base = plane * H * W",
        "acc = tl.full([BLOCK], -float('inf'), tl.float32)",
        "for kh in tl.static_range(KH):",
        "    for kw in tl.static_range(KW):",
    ]
    inner = [
        "ih = oh * SH - PH + kh * DH",
        "iw = ow * SW - PW + kw * DW",
        "ok = m & (ih >= 0) & (ih < H) & (iw >= 0) & (iw < W)",
        "at = base + ih * W + iw",
        "x = tl.load(x_ptr + at, mask=ok, other=0.0).to(tl.float32)",
        "y = (x - mean) * rstd",
        *(["y = y * w + bb"] if plan.weight else []),
    ]
    epi, last = _epilogue_lines(plan, "at", "ok", "m")
    inner += [*epi, f"acc = tl.maximum(acc, tl.where(ok, {last}, -float('inf')))"]
    L += ["        " + ln for ln in inner]
    L.append("tl.store(out_ptr + offs, acc.to(out_ptr.dtype.element_ty), mask=m)")
    return jit_source("bn_pool_apply_kernel", sig, L)


def _pool_launcher(plan: BnPlan, params: dict[str, Any]) -> list[str]:
    """launch_bn_pool_apply(): the pooled output's shape from the window (the module's, read at
    run time, else the captured one), the epilogue operands in the input's shape, one launch."""
    assert plan.pool is not None
    ablock, warps = int(params.get("APPLY_BLOCK", 1024)), int(params["num_warps"])
    leaves = plan.epilogue.tensor_leaves
    targs = [f"t_{lf.name}" for lf in leaves]
    sargs = [f"l_{lf.name}" for lf in plan.epilogue.scalar_leaves]
    aff = ["w_v", "b_v"] if plan.weight else []
    k, st, pad, dil = plan.pool.window
    return [
        f"def launch_bn_pool_apply(x, mean, rstd{''.join(', ' + a for a in aff + targs + sargs)}, window=None):",
        "    if x.dim() != 4:",
        '        raise ValueError(f"max pool over a {x.dim()}-d input (a 4-d one expected)")',
        "    N, C, H, W = x.shape",
        f"    k, s, p, d = {k!r}, {st!r}, {pad!r}, {dil!r}",
        "    if window is not None:",
        "        pair = lambda v: [int(a) for a in v] if isinstance(v, (list, tuple)) else [int(v)] * 2",
        "        k = pair(window[0])",
        "        s = k if window[1] is None or window[1] == [] else pair(window[1])",
        "        p, d = pair(window[2]), pair(window[3])",
        "    OH = (H + 2 * p[0] - d[0] * (k[0] - 1) - 1) // s[0] + 1",
        "    OW = (W + 2 * p[1] - d[1] * (k[1] - 1) - 1) // s[1] + 1",
        "    if OH <= 0 or OW <= 0:",
        '        raise ValueError("pooling window larger than the padded input")',
        "    out = torch.empty((N, C, OH, OW), device=x.device, dtype=x.dtype)",
        "    if out.numel() == 0:",
        "        return out",
        *(f"    {t}_c, {t}_m = _epi_mode({t}, x.shape)" for t in targs),
        f"    grid = (triton.cdiv(out.numel(), {ablock}),)",
        "    bn_pool_apply_kernel[grid](x, out, mean, rstd"
        + "".join(f", {a}.reshape(-1)" for a in aff)
        + ", C, H, W, OH, OW, out.numel()"
        + "".join(f", {t}_c" for t in targs)
        + "".join(f", float({x})" for x in sargs)
        + f", BIG=x.numel() + {ablock} >= 2**31, BLOCK={ablock}"
        + ", KH=k[0], KW=k[1], SH=s[0], SW=s[1], PH=p[0], PW=p[1], DH=d[0], DW=d[1]"
        + "".join(f", {t}_MODE={t}_m" for t in targs)
        + f", num_warps={warps})",
        "    return out",
    ]


def _generate_tiles(desc: TaskDescription, plan: BnPlan, params: dict[str, Any]) -> str:
    block, warps = int(params["BLOCK"]), int(params["num_warps"])
    cl = params["algorithm"] == CL_TILES
    if cl and plan.conv_cl_call is None:
        raise Unsupported("no channels-last call for this conv")
    # channels-last: the flat pass with HW = 1 reads element i's channel as i % C
    flat, ablock = cl or bool(params.get("FLAT_APPLY", False)), int(params.get("APPLY_BLOCK", 1024))
    per_sm = int(params.get("PROGS_PER_SM", 8))
    leaves = plan.epilogue.tensor_leaves
    targs = [f"t_{lf.name}" for lf in leaves]
    sargs = [f"l_{lf.name}" for lf in plan.epilogue.scalar_leaves]
    aff = ["w_v", "b_v"] if plan.weight else []
    L = [
        f"def launch_bn_tile_apply(x, mean, rstd{''.join(', ' + a for a in aff + targs + sargs)}):",
        "    N, C = x.shape[0], x.shape[1]",
        "    HW = 1" if cl else "    HW = x.numel() // (N * C) if N * C else 0",
        "    out = torch.empty_like(x)",
        "    if out.numel() == 0:",
        "        return out",
        *(
            f"    {t}_c, {t}_m = _epi_mode_cl({t}, x)"
            if cl
            else f"    {t}_c, {t}_m = _epi_mode({t}, x.shape)"
            for t in targs
        ),
        *(
            [f"    grid = (triton.cdiv(x.numel(), {ablock}),)"]
            if flat
            else [
                f"    bhw = min({block}, triton.next_power_of_2(HW))",
                f"    br = max(1, {block} // bhw)",
                "    grid = (triton.cdiv(N * C, br), triton.cdiv(HW, bhw))",
            ]
        ),
        "    bn_tile_apply_kernel[grid](x, out, mean, rstd"
        + "".join(f", {a}.reshape(-1)" for a in aff)
        + (", C, HW, x.numel()" if flat else ", C, HW, N * C")
        + "".join(f", {t}_c" for t in targs)
        + "".join(f", float({x})" for x in sargs)
        + (f", BIG=x.numel() + {ablock} >= 2**31, BLOCK={ablock}" if flat else ", BR=br, BHW=bhw")
        + "".join(f", {t}_MODE={t}_m" for t in targs)
        + f", num_warps={warps})",
        "    return out",
    ]
    if plan.pool is not None:
        L = _pool_launcher(plan, params)
    if cl:
        stats = CL_STATS_LAUNCH.format(block=block, per_sm=per_sm, warps=warps)
        stats += "\n\n" + kernel_source("layout.py", *CL_HELPERS)
    else:
        stats = TILE_STATS_LAUNCH.replace('\\"', '"').format(block=block, per_sm=per_sm, warps=warps)
    launchers = RUNNING_LAUNCH + "\n\n" + stats + "\n\n" + EPI_MODE + "\n\n" + "\n".join(L) + "\n"
    fwd = _forward_stats(plan, "launch_bn_cl_stats" if cl else "launch_bn_tile_stats", cl)
    call = ["x_bn", "mean_v.reshape(-1)", "rstd_v.reshape(-1)", *aff, *(lf.expr for lf in leaves)]
    call += [lf.expr for lf in plan.epilogue.scalar_leaves]
    if plan.pool is not None:
        if plan.pool.geometry:
            call.append(f"window={plan.pool.geometry}")
        fwd.append(f"return launch_bn_pool_apply({', '.join(call)})")
        apply_kernel = _pool_apply_kernel(plan)
    else:
        fwd.append(f"return launch_bn_tile_apply({', '.join(call)})")
        apply_kernel = _tile_apply_kernel(plan, flat)
    doc = f"EGG expert: batchnorm family (batch or running statistics), algorithm {params['algorithm']}."
    kernels = [ewops.HELPERS, STATS, TILE_KERNELS, apply_kernel]
    if cl:
        kernels += [CL_KERNELS, kernel_source("layout.py", "nchw_to_nhwc_kernel")]
    return assemble(desc, "\n\n".join(kernels), launchers, "\n".join(fwd), doc)
