"""A library convolution followed by a normalisation over (sample, channel group): group norm,
or instance norm (one channel per group), with elementwise ops before and after it (mixed
policy: the conv stays a library call).

The conv is called without its bias (cuDNN adds a bias in a pass of its own); its output is then
read twice and written once, in whatever layout the library returned it:
  1. statistics: programs of (pixel chunk, channel block, sample) walk (pixel x channel) tiles,
     add the conv bias and the ops before the norm on the fly, and keep a running Welford
     (count, mean, squared deviations) per tile lane, merged across lanes once at the end (Chan's
     formula: no cancellation of sum-of-squares on long rows, and no reduction across threads in
     the loop, which had made a channels-last tile's pass 2.4x slower than its NCHW twin on an
     H200); the chunk count is sized at launch to fill the SMs, since one (sample, group) row is
     long (every pixel of its channels) and rows may be few
  2. a tiny kernel per (sample, group) merges its channels' chunk partials into mean and
     1 / sqrt(var + eps)
  3. one pass of (pixel x channel) tiles: bias and the ops before the norm again, normalise,
     the per-channel affine, the ops after the norm, and the store into a contiguous (NCHW)
     output, the layout the rest of the forward reads (a channels-last tile is turned around in
     the kernel, like kernels/layout.py does)

Algorithms (the seeds):
  library-conv+cl-stats+normalize   the conv on a channels-last input (turned around by a Triton
                 layout kernel): cuDNN's channels-last kernels are much faster than NCHW ones
                 (level2/17's conv 1.62 vs 2.72 ms on an H200) and return channels-last output;
                 first for large outputs. Where cuDNN's channels-last kernel runs in TF32 and the
                 reference's NCHW one does not (8 input channels), the checker refuses it and the
                 NCHW seed stands.
  library-conv+stats+normalize      the conv on the input as it is (NCHW), the same two passes.
Both are offered beside the partition's own groups (conv group, then the norm group): see
lowering.py, which lists these seeds first and keeps the others after them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from graph.records import OpNode, TaskDescription

from .. import ewops
from ..chain import Chain, collect_chain
from ..graphview import GraphView, Leaf, Unsupported, arg_value, assemble, flit, is_node
from ..kernelfiles import jit_source, kernel_source
from .libconv import (
    CL_HELPERS,
    LIB_OPS,
    LIBRARY_PRECISION,
    TAIL_HELPERS,
    library_call,
    split_call,
    tail_leaf_launch,
    tile_leaf_loads,
)
from .library import CL_FIRST_NUMEL

NORM_OPS = {"group_norm", "instance_norm"}
CL_ALGORITHM = "library-conv+cl-stats+normalize"
ALGORITHM = "library-conv+stats+normalize"
ALGORITHMS = (CL_ALGORITHM, ALGORITHM)
# Stats partials per (sample, channel) at most (the merge kernel holds them in one tile row).
MAX_SPLIT = 1024


@dataclass
class CnPlan:
    op: str  # the conv op
    nd: int
    conv_node: str
    norm_node: str
    norm_op: str
    pre: Chain  # elementwise ops between the conv and the norm
    post: Chain  # elementwise ops after the norm
    groups: str  # forward expression of the group count ("None": one channel per group)
    eps: str
    weight: str | None
    bias: str | None
    # (conv call without its bias, the bias or None) on the input as it is / turned channels-last
    split: tuple[str, str | None]
    split_cl: tuple[str, str | None] | None
    out_numel: int = 0

    @property
    def leaves(self) -> list[Leaf]:
        seen: dict[str, Leaf] = {}
        for lf in self.pre.tensor_leaves + self.post.tensor_leaves:
            seen.setdefault(lf.name, lf)
        return list(seen.values())

    @property
    def scalars(self) -> list[Leaf]:
        seen: dict[str, Leaf] = {}
        for lf in self.pre.scalar_leaves + self.post.scalar_leaves:
            seen.setdefault(lf.name, lf)
        return list(seen.values())


def _tensor_arg(view: GraphView, a: Any, what: str) -> str | None:
    if a is None:
        return None
    lf = view.leaf_of(a["node"]) if is_node(a) else None
    if lf is None or lf.is_scalar:
        raise Unsupported(f"{what} is not a tensor argument or parameter")
    return lf.expr


def _norm_args(view: GraphView, n: OpNode) -> tuple[str, str, str | None, str | None]:
    """(groups, eps, weight, bias) forward expressions of a group / instance norm node."""
    if n.kind == "call_module":
        m = f"self.{n.target}"
        affine = bool(n.module_attrs.get("affine", n.op == "group_norm"))
        if n.op == "instance_norm":
            if n.module_attrs.get("track_running_stats"):
                raise Unsupported("instance_norm with running statistics (eval mode normalises by them)")
            groups = "None"
        else:
            groups = f"int({m}.num_groups)"
        w, b = (f"{m}.weight", f"{m}.bias") if affine else (None, None)
        return groups, f"float({m}.eps)", w, b
    if n.op == "group_norm":
        g = arg_value(n, 1, "num_groups")
        if not isinstance(g, int):
            raise Unsupported("group_norm with a non-constant group count")
        w = _tensor_arg(view, arg_value(n, 2, "weight"), "group_norm weight")
        b = _tensor_arg(view, arg_value(n, 3, "bias"), "group_norm bias")
        return str(g), flit(arg_value(n, 4, "eps", 1e-5)), w, b
    # F.instance_norm(input, running_mean, running_var, weight, bias, use_input_stats, momentum, eps)
    if arg_value(n, 1, "running_mean") is not None or arg_value(n, 2, "running_var") is not None:
        raise Unsupported("instance_norm with running statistics")
    if arg_value(n, 5, "use_input_stats", True) is not True:
        raise Unsupported("instance_norm without input statistics")
    w = _tensor_arg(view, arg_value(n, 3, "weight"), "instance_norm weight")
    b = _tensor_arg(view, arg_value(n, 4, "bias"), "instance_norm bias")
    return "None", flit(arg_value(n, 7, "eps", 1e-5)), w, b


def match(view: GraphView) -> CnPlan | None:
    nodes = view.compute_nodes()
    if not nodes or nodes[0].op not in LIB_OPS:
        return None
    norms = [n for n in nodes if n.op in NORM_OPS]
    if len(norms) != 1:
        return None
    c, nrm = nodes[0], norms[0]
    nd = int(c.op[-2])
    shape = c.shape or []
    if len(shape) != nd + 2:
        raise Unsupported(f"{c.op} output of rank {len(shape)} (an unbatched conv) before {nrm.op}")
    i = [n.name for n in nodes].index(nrm.name)
    pre, post = nodes[1:i], nodes[i + 1 :]
    for n in pre + [nrm] + post:
        if n.shape != c.shape:
            raise Unsupported(f"{n.op} between the conv and its norm changes the shape")
    src = nrm.args[0] if nrm.args else nrm.kwargs.get("input")
    want = pre[-1].name if pre else c.name
    if not is_node(src) or view.resolve(src["node"]) != want:
        raise Unsupported(f"{nrm.op} does not read the value computed just before it")
    pre_chain = collect_chain(view, pre, internal={c.name})
    post_chain = collect_chain(view, post, internal={c.name, nrm.name} | {n.name for n in pre})
    groups, eps, w, b = _norm_args(view, nrm)
    if (w is None) != (b is None):
        raise Unsupported(f"{nrm.op} with only one of weight / bias")
    split = split_call(view, c, "")
    if split is None:
        # padding modes other than zeros, extra call arguments: the library adds its own bias
        split = (library_call(view, c), None)
    split_cl = None
    if nd > 1:
        split_cl = split_call(view, c, "to_channels_last")
    numel = 1
    for d in shape:
        numel *= int(d)
    return CnPlan(
        op=c.op,
        nd=nd,
        conv_node=c.name,
        norm_node=nrm.name,
        norm_op=nrm.op,
        pre=pre_chain,
        post=post_chain,
        groups=groups,
        eps=eps,
        weight=w,
        bias=b,
        split=split,
        split_cl=split_cl,
        out_numel=numel,
    )


def algorithms(plan: CnPlan) -> list[str]:
    if plan.split_cl is None:
        return [ALGORITHM]
    # as the library family orders its channels-last conv: first where the output is large
    # enough for the conv's speed to outweigh the input's layout pass
    return [CL_ALGORITHM, ALGORITHM] if plan.out_numel >= CL_FIRST_NUMEL else [ALGORITHM, CL_ALGORITHM]


def defaults(plan: CnPlan, algorithm: str) -> dict[str, Any]:
    # 4096-element tiles at 8 warps (16 elements a thread); the statistics pass split into
    # about 4 programs per SM; the library conv's precision is PyTorch's default (a note for
    # reports, not a tunable)
    return {"BLOCK": 4096, "num_warps": 8, "PROGS_PER_SM": 4, "PRECISION": LIBRARY_PRECISION}


def valid(plan: CnPlan, params: dict[str, Any]) -> str | None:
    if params["algorithm"] == CL_ALGORITHM and plan.split_cl is None:
        return "a 1-d convolution has no channels-last layout"
    if int(params.get("BLOCK", 4096)) < 64:
        return "tiles below 64 elements"
    return None


def space(plan: CnPlan, params: dict[str, Any], stage: str, sp: dict[str, list]) -> dict[str, list]:
    return {
        "mapping": {"PROGS_PER_SM": [8, 2, 16]},
        "tiling": {"BLOCK": [2048, 8192, 1024]},
        "memory": {"num_warps": [4, 16]},
    }.get(stage, {})


# -- kernels -----------------------------------------------------------------------------


def _leaf_sig(plan: CnPlan) -> tuple[str, str]:
    """(runtime arguments, constexpr arguments) of the chains' operands."""
    sig = ""
    for lf in plan.leaves:
        p = f"l_{lf.name}"
        sig += f", {p}_ptr, {p}_sn, {p}_sc, {p}_sp"
    sig += "".join(f", l_{lf.name}_val" for lf in plan.scalars)
    modes = "".join(f", l_{lf.name}_MODE: tl.constexpr" for lf in plan.leaves)
    return sig, modes


def _load_tile(plan: CnPlan) -> tuple[list[str], dict[str, str]]:
    """Statements loading a (pixel x channel) tile of the conv output (`pp`, `cc`, `m`, `cm`, `n`
    given) with its bias, the chains' operands, and the ops before the norm: (lines, env)."""
    L = [
        "offs = n * t_sn + pp[:, None] * t_sp + cc[None, :] * t_sc",
        "v = tl.load(t_ptr + offs, mask=m, other=0.0).to(tl.float32)",
        "if HAS_CB:",
        "    v = v + tl.load(cb_ptr + cc, mask=cm, other=0.0).to(tl.float32)[None, :]",
    ]
    env = {plan.conv_node: "v", **{lf.name: f"l_{lf.name}_val" for lf in plan.scalars}}
    L += tile_leaf_loads(plan.leaves, env)
    body, last = plan.pre.body(env, var_prefix="a_")
    L += [*body, f"x = {last or 'v'}"]
    return L, env


def _kernels(plan: CnPlan) -> str:
    lsig, modes = _leaf_sig(plan)
    consts = ", BP: tl.constexpr, BC: tl.constexpr, HAS_CB: tl.constexpr" + modes
    load, _ = _load_tile(plan)
    stats = [
        "s = tl.program_id(0)",
        "cc = tl.program_id(1) * BC + tl.arange(0, BC)",
        "n = tl.program_id(2).to(tl.int64)",
        "cm = cc < C",
        "lo = s * chunk",
        "hi = tl.minimum(P, lo + chunk)",
        # Welford per tile lane (count, mean, squared deviations), merged across the lanes once
        # at the end: no reduction across threads inside the loop, whichever axis is contiguous
        "cnt = tl.zeros([BP, BC], dtype=tl.float32)",
        "w_mean = tl.zeros([BP, BC], dtype=tl.float32)",
        "w_m2 = tl.zeros([BP, BC], dtype=tl.float32)",
        "for p0 in range(lo, hi, BP):",
        *[
            "    " + x
            for x in [
                "pp = p0 + tl.arange(0, BP)",
                "m = (pp < hi)[:, None] & cm[None, :]",
                *load,
                "cnt = cnt + m.to(tl.float32)",
                "d = tl.where(m, x - w_mean, 0.0)",
                "w_mean = w_mean + d / tl.maximum(cnt, 1.0)",
                "w_m2 = w_m2 + d * tl.where(m, x - w_mean, 0.0)",
            ]
        ],
        # Chan's merge of the lanes: the chunk's mean per channel and squared deviations around it
        "tot = tl.maximum(tl.sum(cnt, 0), 1.0)",
        "mean = tl.sum(cnt * w_mean, 0) / tot",
        "dm = tl.where(cnt > 0, w_mean - mean[None, :], 0.0)",
        "m2 = tl.sum(w_m2 + cnt * dm * dm, 0)",
        "po = (n * SPLIT + s) * C + cc",
        "tl.store(part_ptr + po, mean, mask=cm)",
        "tl.store(part_ptr + NSC + po, m2, mask=cm)",
    ]
    ssig = "t_ptr, cb_ptr, part_ptr, C, P, t_sn, t_sc, t_sp, chunk, SPLIT, NSC" + lsig + consts
    out = jit_source("cn_stats_kernel", ssig, stats)
    out += FINALIZE
    _, env = _load_tile(plan)
    post, last = plan.post.body({**env, plan.norm_node: "y"}, var_prefix="e_")
    apply = [
        "pp = tl.program_id(0) * BP + tl.arange(0, BP)",
        "cc = tl.program_id(1) * BC + tl.arange(0, BC)",
        "n = tl.program_id(2).to(tl.int64)",
        "cm = cc < C",
        "m = (pp < P)[:, None] & cm[None, :]",
        *load,
        "gi = n * G + cc // CPG",
        "mu = tl.load(stat_ptr + gi, mask=cm, other=0.0)",
        "rs = tl.load(stat_ptr + NG + gi, mask=cm, other=0.0)",
        "y = (x - mu[None, :]) * rs[None, :]",
        "if HAS_W:",
        "    y = y * tl.load(w_ptr + cc, mask=cm, other=1.0).to(tl.float32)[None, :] + tl.load(",
        "        b_ptr + cc, mask=cm, other=0.0",
        "    ).to(tl.float32)[None, :]",
        *post,
        # the output is contiguous: a channels-last tile is stored along its pixels
        "o = n * o_sn + pp[:, None] * o_sp + cc[None, :] * o_sc",
        f"tl.store(out_ptr + o, {last or 'y'}.to(out_ptr.dtype.element_ty), mask=m)",
    ]
    asig = (
        "t_ptr, cb_ptr, stat_ptr, w_ptr, b_ptr, out_ptr, C, P, G, CPG, NG, t_sn, t_sc, t_sp, o_sn, o_sc, o_sp"
        + lsig
        + consts
        + ", HAS_W: tl.constexpr"
    )
    out += "\n\n" + jit_source("cn_apply_kernel", asig, apply)
    return out


FINALIZE = '''

@triton.jit
def cn_merge_kernel(part_ptr, stat_ptr, C, G, CPG, P, chunk, SPLIT, NSC, NG, eps, BS: tl.constexpr,
                    BG: tl.constexpr):
    """Mean and 1/sqrt(var + eps) of one (sample, group) row from its channels' chunk partials
    (per chunk and channel: mean and squared deviations around it, over the chunk's pixels)."""
    row = tl.program_id(0)
    n = (row // G).to(tl.int64)
    g = row % G
    ss = tl.arange(0, BS)
    cg = tl.arange(0, BG)
    sm = ss < SPLIT
    cnt = tl.maximum(tl.minimum(P, (ss + 1) * chunk) - ss * chunk, 0).to(tl.float32)
    total = (CPG * P).to(tl.float32)
    acc = tl.zeros([BS, BG], dtype=tl.float32)
    for c0 in range(0, CPG, BG):
        m = sm[:, None] & (c0 + cg < CPG)[None, :]
        po = (n * SPLIT + ss[:, None]) * C + (g * CPG + c0 + cg)[None, :]
        acc += tl.load(part_ptr + po, mask=m, other=0.0) * cnt[:, None]
    mean = tl.sum(tl.sum(acc, 1), 0) / total
    acc = tl.zeros([BS, BG], dtype=tl.float32)
    for c0 in range(0, CPG, BG):
        m = sm[:, None] & (c0 + cg < CPG)[None, :]
        po = (n * SPLIT + ss[:, None]) * C + (g * CPG + c0 + cg)[None, :]
        d = tl.load(part_ptr + po, mask=m, other=0.0) - mean
        acc += tl.where(m, tl.load(part_ptr + NSC + po, mask=m, other=0.0) + cnt[:, None] * d * d, 0.0)
    var = tl.sum(tl.sum(acc, 1), 0) / total
    tl.store(stat_ptr + row, mean)
    tl.store(stat_ptr + NG + row, 1.0 / tl.sqrt(var + eps))
'''


def _launcher(plan: CnPlan, params: dict[str, Any]) -> str:
    leaves = [f"l_{lf.name}" for lf in plan.leaves]
    scal = [f"l_{lf.name}" for lf in plan.scalars]
    block, warps, per_sm = int(params["BLOCK"]), int(params["num_warps"]), int(params["PROGS_PER_SM"])
    L = [
        f"def launch_conv_norm({', '.join(['t', 'cb', 'groups', 'eps', 'w', 'b', *leaves, *scal])}):",
        '    """Norm over (sample, channel group) of the conv output `t` (any layout whose pixels',
        '    collapse to one stride) plus `cb` per channel, with the ops around it; contiguous out."""',
        "    if _ncp(t) is None:",
        "        t = t.contiguous()",
        "    t_sn, t_sc, t_sp = _ncp(t)",
        "    N, C = t.shape[0], t.shape[1]",
        "    G = C if groups is None else int(groups)",
        "    if G <= 0 or C % G:",
        "        raise ValueError(f'{C} channels do not split into {G} groups')",
        "    P = t[0, 0].numel() if N * C else 0",
        "    out = torch.empty(t.shape, device=t.device, dtype=t.dtype)",
        "    if out.numel() == 0:",
        "        return out",
    ]
    lines, leaf_args, leaf_modes = tail_leaf_launch(leaves, scal)
    L += lines
    L += [
        "    cl = t_sc == 1 and C > 1",
        # statistics tiles: coalesced along whichever stride is 1
        "    if cl:",
        "        bc = min(64, triton.next_power_of_2(C))",
        f"        bp = max(1, {block} // bc)",
        "    else:",
        f"        bp = min({block}, triton.next_power_of_2(P))",
        f"        bc = max(1, min({block} // bp, triton.next_power_of_2(C)))",
        "    ncb = triton.cdiv(C, bc)",
        "    sms = torch.cuda.get_device_properties(t.device).multi_processor_count if t.is_cuda else 4",
        # a (sample, group) row is long and rows may be few: chunks of pixels fill the SMs
        f"    split = max(1, min(triton.cdiv(P, bp), triton.cdiv(sms * {per_sm}, N * ncb), {MAX_SPLIT}))",
        "    chunk = triton.cdiv(triton.cdiv(P, split), bp) * bp",
        "    split = triton.cdiv(P, chunk)",
        "    part = torch.empty((2, N, split, C), device=t.device, dtype=torch.float32)",
        "    cb_arg = t if cb is None else cb",
        "    cn_stats_kernel[(split, ncb, N)](t, cb_arg, part, C, P, t_sn, t_sc, t_sp, chunk, split, N * split * C"
        + leaf_args
        + ", BP=bp, BC=bc, HAS_CB=cb is not None"
        + leaf_modes
        + f", num_warps={warps})",
        "    stat = torch.empty((2, N * G), device=t.device, dtype=torch.float32)",
        "    bs = triton.next_power_of_2(split)",
        "    bg = max(1, min(triton.next_power_of_2(C // G), 2048 // bs))",
        "    cn_merge_kernel[(N * G,)](part, stat, C, G, C // G, P, chunk, split, N * split * C, N * G, "
        "float(eps), BS=bs, BG=bg, num_warps=4)",
        # the normalize pass: a channels-last tile is read along channels and stored along pixels
        "    if cl:",
        "        bc = min(64, triton.next_power_of_2(C))",
        f"        bp = max(32, {block} // bc)",
        "    has_w = w is not None",
        "    cn_apply_kernel[(triton.cdiv(P, bp), triton.cdiv(C, bc), N)](t, cb_arg, stat, w if has_w else t, "
        "b if has_w else t, out, C, P, G, C // G, N * G, t_sn, t_sc, t_sp, out.stride(0), out.stride(1), 1"
        + leaf_args
        + ", BP=bp, BC=bc, HAS_CB=cb is not None"
        + leaf_modes
        + f", HAS_W=has_w, num_warps={warps})",
        "    return out",
    ]
    return "\n".join(L) + "\n"


def generate(desc: TaskDescription, view: GraphView, plan: CnPlan, params: dict[str, Any]) -> str:
    cl = params["algorithm"] == CL_ALGORITHM
    if cl and plan.split_cl is None:
        raise Unsupported("a 1-d convolution has no channels-last layout")
    call, cbias = plan.split_cl if cl and plan.split_cl is not None else plan.split
    fwd_args = [f"t_{plan.conv_node}", cbias or "None", plan.groups, plan.eps, plan.weight or "None"]
    fwd_args += [plan.bias or "None", *(lf.expr for lf in plan.leaves), *(lf.expr for lf in plan.scalars)]
    fwd = f"t_{plan.conv_node} = {call}\nreturn launch_conv_norm({', '.join(fwd_args)})"
    kernels = ewops.HELPERS + "\n\n" + _kernels(plan)
    launchers = TAIL_HELPERS + "\n\n" + _launcher(plan, params)
    if cl:
        kernels += "\n\n" + kernel_source("layout.py", "nchw_to_nhwc_kernel")
        launchers += "\n\n" + kernel_source("layout.py", *CL_HELPERS)
    before = ", ".join(n.op for n in plan.pre.nodes) or "nothing"
    after = ", ".join(n.op for n in plan.post.nodes) or "nothing"
    doc = (
        f"EGG expert: convnorm family, algorithm {params['algorithm']} ({plan.op} by the library"
        + (" on a channels-last input" if cl else "")
        + (", its bias added by Triton" if cbias else "")
        + f"; {plan.norm_op} with {before} before and {after} after it in a statistics pass and one "
        "normalize pass over the conv output, written contiguous; mixed policy)."
    )
    return assemble(desc, kernels, launchers, fwd, doc)
