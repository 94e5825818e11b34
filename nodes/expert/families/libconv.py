"""Convolution (1d/2d/3d, transposed) + an elementwise epilogue.

Algorithms (the seeds):
  library-conv+tile-epilogue  (first) the library conv on a channels-last input (cuDNN then runs
                 channels-last TF32 and returns channels-last output, torch.compile's layout
                 choice; CHANNELS_LAST is a tunable), then the whole tail in one Triton pass of
                 (pixel x channel) tiles read and written in the output's own layout: coalesced
                 along whichever stride is 1, per-channel operands loaded once per tile column, no
                 per-element index arithmetic
  library-conv+fused-epilogue  the conv stays a library call (mixed policy only: the algorithm
                 name says so) and the whole epilogue is one Triton kernel: the conv output is
                 written once by the library and read once by the epilogue kernel, instead of once
                 per epilogue op in eager mode. Per-channel operands (bias/scale of shape (C, 1, 1))
                 are read in place through the elementwise family's broadcast modes.
  the conv family's algorithms (implicit-gemm, implicit-gemm-flatk, direct) with the epilogue
                 fused into the conv kernel's store: no library call, the output written once
                 (also what the strict policy keeps).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from graph.records import TaskDescription

from .. import ewops
from ..chain import Chain, collect_chain
from ..graphview import GraphView, Leaf, Unsupported, arg_value, assemble, is_node
from ..kernelfiles import jit_source, kernel_source
from . import conv as convfam
from . import elementwise as ew

LIB_OPS = {"conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d", "conv_transpose3d"}


@dataclass
class ConvPlan:
    call: str  # Python expression (forward scope) computing the conv output
    conv_node: str
    op: str
    epilogue: Chain
    # The same conv + epilogue as a Triton conv-family plan (None where that family cannot do it).
    triton_plan: convfam.ConvPlan | None = None
    # The call with a channels-last input (2-d / 3-d convolutions only).
    call_cl: str | None = None
    # The call without its bias, on a channels-last input, and the bias (added by the tail
    # instead: cuDNN adds a bias in a pass of its own over the output), where the call splits.
    split_cl: tuple[str, str | None] | None = None
    # The same on the input as it is (NCHW): the tail adds the bias there too.
    split: tuple[str, str | None] | None = None
    # A softmax over channels inside the tail (the epilogue chain's nodes before it are named in
    # before_softmax, the rest come after it); only the tile-pass algorithms hold every channel.
    softmax: Any = None
    before_softmax: list[str] = field(default_factory=list)


def library_call(view: GraphView, c: Any, memory_format: str | None = None) -> str:
    """The PyTorch call that computes library op node `c` (a conv module or torch.* function);
    with `memory_format` (e.g. "channels_last") its input is first laid out so, which makes
    cuDNN run the convolution in that layout (and return its output in it)."""
    fmt = f".contiguous(memory_format=torch.{memory_format})" if memory_format else ""
    if c.kind == "call_module":
        src = c.args[0] if c.args else None
        if not is_node(src):
            raise Unsupported(f"{c.op} input")
        return f"self.{c.target}({convfam.operand_expr(view, src, as_list=True)}{fmt})"
    if c.kind == "call_function" and str(c.target).startswith("torch."):
        args = [convfam.operand_expr(view, a, as_list=True) for a in c.args]
        if args and fmt:
            args[0] += fmt
        args += [f"{k}={convfam.operand_expr(view, v, as_list=True)}" for k, v in c.kwargs.items()]
        return f"{c.target}({', '.join(args)})"
    raise Unsupported(f"{c.op} called as {c.target}")


# cuDNN's channels-last fp32 kernels load 16-byte vectors of channels: an input with fewer
# channels than this that is not a multiple of 4 (an RGB image) gets its unaligned fallback. On the
# H200 (eighth sitting, docs/results) that fallback ran AlexNet's first conv (3 channels, 11x11,
# stride 4) in 4.7 ms of the network's 13.0, at 0.3 TFLOP/s, in eager, torch.compile and ours.
PAD_CHANNELS_BELOW = 16


def _aligned_channels(c: Any) -> int | None:
    """The input channel count a module conv's channels-last call pads to, or None: only a plain
    (groups 1, not transposed) conv with a few input channels not a multiple of 4. Zero channels
    and zero weights add exact zeros to every product."""
    cin, groups = c.module_attrs.get("in_channels"), c.module_attrs.get("groups", 1)
    if c.op.startswith("conv_transpose") or groups != 1 or not isinstance(cin, int):
        return None
    return -(-cin // 4) * 4 if cin % 4 and cin < PAD_CHANNELS_BELOW else None


# The host helpers of layout.py that a channels-last split call (split_call with to_channels_last)
# needs in the candidate: one list for every family that pastes them.
CL_HELPERS = ("_layout_tiles", "to_channels_last", "cl_conv_weight")


def split_call(view: GraphView, c: Any, to_cl: str) -> tuple[str, str | None] | None:
    """(the conv call without its bias on the input `to_cl(x)`, the bias expression or None),
    or None where the call does not split (padding modes other than zeros, extra call args)."""
    nd = int(c.op[-2])
    transposed = c.op.startswith("conv_transpose")
    fn = f"torch.nn.functional.{c.op}"

    def source(a: Any) -> str:
        x = convfam.operand_expr(view, a)
        return f"{to_cl}({x})" if to_cl else x

    if c.kind == "call_module":
        if len(c.args) != 1 or c.kwargs or not is_node(c.args[0]):
            return None
        if c.module_attrs.get("padding_mode", "zeros") != "zeros":
            return None
        m = f"self.{c.target}"
        x, w = convfam.operand_expr(view, c.args[0]), f"{m}.weight"
        if to_cl:
            # the weight laid out like the input once, not copied by PyTorch on every call; input
            # channels padded to cuDNN's 16-byte alignment where they are few (an RGB image)
            cp = _aligned_channels(c)
            pad = f", {cp}" if cp else ""
            x, w = f"{to_cl}({x}{pad})", f"cl_conv_weight({w}{pad})"
        rest = (
            f"{m}.stride, {m}.padding, {m}.output_padding, {m}.groups, {m}.dilation"
            if transposed
            else f"{m}.stride, {m}.padding, {m}.dilation, {m}.groups"
        )
        bias = f"{m}.bias" if c.module_attrs.get("bias") else None
        return f"{fn}({x}, {w}, None, {rest})", bias
    if c.kind != "call_function" or not str(c.target).startswith("torch.") or nd < 1:
        return None
    args, kwargs = list(c.args), dict(c.kwargs)
    if len(args) < 2 or not is_node(args[0]):
        return None
    if len(args) > 2:
        b = args[2]
        args[2] = None
    else:
        b = kwargs.pop("bias", None)
    if b is not None and not is_node(b):
        return None
    parts = [source(args[0])]
    parts += [convfam.operand_expr(view, a, as_list=True) for a in args[1:]]
    if len(parts) == 2:
        parts.append("None")
    parts += [f"{k}={convfam.operand_expr(view, v, as_list=True)}" for k, v in kwargs.items()]
    return f"{fn}({', '.join(parts)})", (convfam.operand_expr(view, b) if b is not None else None)


# Channels a tile of the channel-softmax tail holds at once (every channel of a pixel).
MAX_SOFTMAX_CHANNELS = 2048


def _channel_softmax(view: GraphView, c: Any, epi: list[Any]) -> Any:
    """The one softmax over the channel dim in the tail (None without one): the tail kernel holds
    every channel of its pixels, so it normalises across them between two elementwise runs."""
    sms = [n for n in epi if n.op == "softmax"]
    if not sms:
        return None
    if len(sms) > 1:
        raise Unsupported("more than one softmax after the conv")
    sm = sms[0]
    rank = len(sm.shape or [])
    dim = arg_value(sm, 1, "dim", None)
    if not isinstance(dim, int) or rank < 3 or dim % rank != 1:
        raise Unsupported("softmax after the conv is not over channels")
    if arg_value(sm, 2, "dtype", None) is not None:
        raise Unsupported("softmax with a dtype after the conv")
    if (c.shape or [0, 0])[1] > MAX_SOFTMAX_CHANNELS:
        raise Unsupported(f"softmax over more than {MAX_SOFTMAX_CHANNELS} channels in one tile")
    src = sm.args[0] if sm.args else sm.kwargs.get("input")
    if not is_node(src):
        raise Unsupported("softmax of a constant")
    return sm


def match(view: GraphView) -> ConvPlan | None:
    nodes = view.compute_nodes()
    convs = [n for n in nodes if n.op in LIB_OPS]
    if len(convs) != 1 or nodes[0].name != convs[0].name:
        return None
    c = convs[0]
    epi = nodes[1:]
    if not epi:
        raise Unsupported(f"a lone {c.op} is the library call itself: nothing to write in Triton")
    sm = _channel_softmax(view, c, epi)
    epilogue = collect_chain(
        view, [n for n in epi if n is not sm], internal={c.name} | ({sm.name} if sm else set())
    )
    call = library_call(view, c)
    try:
        triton_plan = convfam.plan_conv(view, c, epi) if sm is None else None
    except Unsupported:
        triton_plan = None
    nd = int(c.op[-2])
    call_cl = library_call(view, c, "channels_last" if nd == 2 else "channels_last_3d") if nd > 1 else None
    return ConvPlan(
        call=call,
        conv_node=c.name,
        op=c.op,
        epilogue=epilogue,
        softmax=sm,
        before_softmax=[n.name for n in epi[: epi.index(sm)]] if sm else [],
        triton_plan=triton_plan,
        call_cl=call_cl,
        split_cl=split_call(view, c, "to_channels_last") if nd > 1 else None,
        split=split_call(view, c, ""),
    )


LIBRARY = "library-conv+fused-epilogue"
TILED = "library-conv+tile-epilogue"
_LIBRARY_ALGOS = (LIBRARY, TILED)


def algorithms(plan: ConvPlan) -> list[str]:
    if plan.softmax is not None:
        return [TILED, LIBRARY] if plan.split is not None else [TILED]
    extra = convfam.algorithms(plan.triton_plan) if plan.triton_plan is not None else []
    return [TILED, LIBRARY, *extra]


def defaults(plan: ConvPlan, algorithm: str) -> dict[str, Any]:
    if algorithm not in _LIBRARY_ALGOS and plan.triton_plan is not None:
        return convfam.defaults(plan.triton_plan, algorithm)
    if algorithm == TILED:
        # cuDNN's channels-last TF32 convolution, then the whole tail in one pass over its output
        # in that layout (what torch.compile does); 4096-element tiles at 8 warps.
        return {
            "BLOCK": 4096,
            "num_warps": 8,
            "CHANNELS_LAST": plan.call_cl is not None,
            "PRECISION": LIBRARY_PRECISION,
        }
    return {"BLOCK": 2048, "num_warps": 8, "EVICT": "", "PERSISTENT": False, "PRECISION": LIBRARY_PRECISION}


# What the library convolution computes in (a note for reports; not a tunable): PyTorch's default,
# TF32 for fp32 cuDNN convolutions (torch.backends.cudnn.allow_tf32).
LIBRARY_PRECISION = "cudnn-default"
# The same call with cuDNN's TF32 off: the fix for a mismatch. On the H200 the channels-last TF32
# conv of KernelBench level2/71 missed the checker's bar (max error 2.5e-4 against 1e-4 allowed)
# where the NCHW one passed; the fix used to give up the layout instead of the TF32. Scoped by
# torch.backends.cudnn.flags: assigning the flag (and try/finally to restore it) is what the
# static rules reject as patching torch, and they did, on the H200 (2026-12-05).
LIBRARY_FP32 = "cudnn-fp32"

CUDNN_FP32 = '''
def _cudnn_fp32(conv):
    """`conv()` with cuDNN's TF32 off (full fp32 products): PyTorch's own scoped setting, every
    other cuDNN flag kept as it is, all restored on exit."""
    c = torch.backends.cudnn
    with c.flags(enabled=c.enabled, benchmark=c.benchmark, benchmark_limit=c.benchmark_limit,
                 deterministic=c.deterministic, allow_tf32=False):
        return conv()
'''


def _precise(call: str, params: dict[str, Any]) -> tuple[str, str]:
    """The library call as the candidate's PRECISION asks (cuDNN's default, or fp32), and the
    launcher text that call needs ("" or the _cudnn_fp32 helper): decided here only."""
    if params.get("PRECISION") == LIBRARY_FP32:
        return f"_cudnn_fp32(lambda: {call})", CUDNN_FP32
    return call, ""


def valid(plan: ConvPlan, params: dict[str, Any]) -> str | None:
    if params["algorithm"] not in _LIBRARY_ALGOS and plan.triton_plan is not None:
        return convfam.valid(plan.triton_plan, params)
    if params["algorithm"] == TILED and params.get("CHANNELS_LAST") and plan.call_cl is None:
        return "a 1-d convolution has no channels-last layout"
    return None


def space(plan: ConvPlan, params: dict[str, Any], stage: str, sp: dict[str, list]) -> dict[str, list]:
    from ..spaces import SPACES

    if params["algorithm"] not in _LIBRARY_ALGOS and plan.triton_plan is not None:
        return convfam.space(plan.triton_plan, params, stage, sp)
    if params["algorithm"] == TILED:
        return {
            "mapping": {"CHANNELS_LAST": [not params.get("CHANNELS_LAST", True)]},
            "tiling": {"BLOCK": [2048, 8192, 1024]},
            "memory": {"num_warps": [4, 16]},
        }.get(stage, {})
    return SPACES["elementwise"].get(stage, {})


def refinements(plan: ConvPlan, params: dict[str, Any]) -> list[tuple[str, dict[str, Any], str]]:
    if params["algorithm"] not in _LIBRARY_ALGOS and plan.triton_plan is not None:
        return convfam.refinements(plan.triton_plan, params)
    return []


def safer(plan: ConvPlan, params: dict[str, Any], rule: str) -> list[tuple[str, dict[str, Any], str]]:
    if params["algorithm"] not in _LIBRARY_ALGOS and plan.triton_plan is not None:
        return convfam.safer(plan.triton_plan, params, rule)
    if "mismatch" in rule and params.get("PRECISION", LIBRARY_PRECISION) == LIBRARY_PRECISION:
        return [
            (
                "fix:mismatch:cudnn-fp32",
                dict(params, PRECISION=LIBRARY_FP32),
                "the library conv with cuDNN's TF32 off, same layout and tail, in case TF32 "
                "rounding exceeds the tolerance",
            )
        ]
    return []


def generate(desc: TaskDescription, view: GraphView, plan: ConvPlan, params: dict[str, Any]) -> str:
    if params["algorithm"] == TILED:
        return _generate_tiled(desc, plan, params)
    if params["algorithm"] == LIBRARY and plan.split is not None:
        # the library conv on the input as it is, without its bias (cuDNN adds a bias in a pass of
        # its own over the output); bias and tail in one tile pass in that layout
        return _generate_tiled(desc, plan, {"BLOCK": 4096, "num_warps": 8, **params, "CHANNELS_LAST": False})
    if params["algorithm"] != LIBRARY:
        if plan.triton_plan is None:
            raise Unsupported(f"{plan.op}: no Triton conv kernel for this call")
        return convfam.generate(desc, view, plan.triton_plan, params)
    gleaf = Leaf(plan.conv_node, f"t_{plan.conv_node}", None)
    chain = Chain(
        nodes=plan.epilogue.nodes,
        tensor_leaves=[gleaf, *plan.epilogue.tensor_leaves],
        scalar_leaves=list(plan.epilogue.scalar_leaves),
    )
    kernels = [ewops.HELPERS, ew._kernel("epilogue_kernel", chain, params)]
    launchers = [ew.BCAST_HELPER, ew._launcher("epilogue_kernel", chain, params)]
    conv, helper = _precise(plan.call, params)
    launchers += [helper] if helper else []
    args = [lf.expr for lf in chain.tensor_leaves + chain.scalar_leaves]
    fwd = f"t_{plan.conv_node} = {conv}\nreturn launch_epilogue_kernel({', '.join(args)})"
    ops = ", ".join(n.op for n in plan.epilogue.nodes)
    doc = f"EGG expert: libconv family, algorithm library-{plan.op}+fused-epilogue ({ops}; mixed policy)."
    return assemble(desc, "\n\n".join(kernels), "\n\n".join(launchers), fwd, doc)


# -- library conv + the tail as one pass of (pixel x channel) tiles in the output's own layout --

TAIL_HELPERS = '''
def _ncp(t):
    """(stride_n, stride_c, stride_pixel) of a (N, C, *spatial) tensor whose spatial dims collapse
    to one pixel stride (NCHW: 1, channels-last: C), or None."""
    st, sh = t.stride(), t.shape
    sp = st[-1] if t.dim() > 2 else 1
    for i in range(2, t.dim() - 1):
        if sh[i + 1] > 1 and st[i] != st[i + 1] * sh[i + 1]:
            return None
    return st[0], st[1], sp


def _tail_leaf(l, shape):
    """(tensor, mode, sn, sc, sp): 0 = read through broadcast strides, 1 = one value per channel
    (a (C, 1, ..., 1) operand), 2 = one element."""
    if l.numel() == 1:
        return l.reshape(1), 2, 0, 0, 0
    dims = [1] * (len(shape) - l.dim()) + list(l.shape)
    if len(dims) == len(shape) and dims[1] == shape[1] and all(d == 1 for i, d in enumerate(dims) if i != 1):
        return l.reshape(-1).contiguous(), 1, 0, 0, 0
    e = l.expand(shape)
    s = _ncp(e)
    if s is None:
        e = e.contiguous()
        s = _ncp(e)
    return (e, 0) + tuple(s)
'''


def tile_leaf_loads(leaves: list[Leaf], env: dict[str, str]) -> list[str]:
    """Kernel lines loading each tensor leaf of a tail for a (pixel x channel) tile, by its mode
    (0: a full tensor at its own strides, 1: one value per channel, 2: one scalar); each leaf's
    tile variable is added to `env`."""
    L: list[str] = []
    for lf in leaves:
        P = f"l_{lf.name}"
        L += [
            f"if {P}_MODE == 0:",
            f"    x_{lf.name} = tl.load({P}_ptr + n * {P}_sn + pp[:, None] * {P}_sp + cc[None, :] * {P}_sc, "
            "mask=m, other=0.0).to(tl.float32)",
            f"elif {P}_MODE == 1:",
            f"    x_{lf.name} = tl.load({P}_ptr + cc, mask=cm, other=0.0).to(tl.float32)[None, :]",
            "else:",
            f"    x_{lf.name} = tl.load({P}_ptr).to(tl.float32)",
        ]
        env[lf.name] = f"x_{lf.name}"
    return L


def _tail_kernel(plan: ConvPlan) -> str:
    leaves = plan.epilogue.tensor_leaves
    sig = "t_ptr, cb_ptr, out_ptr, C, P, t_sn, t_sc, t_sp, o_sn, o_sc, o_sp"
    for lf in leaves:
        P = f"l_{lf.name}"
        sig += f", {P}_ptr, {P}_sn, {P}_sc, {P}_sp"
    sig += "".join(f", l_{lf.name}_val" for lf in plan.epilogue.scalar_leaves)
    sig += ", BP: tl.constexpr, BC: tl.constexpr, HAS_CB: tl.constexpr" + "".join(
        f", l_{lf.name}_MODE: tl.constexpr" for lf in leaves
    )
    L = [
        "pp = tl.program_id(0) * BP + tl.arange(0, BP)",
        "cc = tl.program_id(1) * BC + tl.arange(0, BC)",
        "n = tl.program_id(2).to(tl.int64)",
        "cm = cc < C",
        "m = (pp < P)[:, None] & cm[None, :]",
        # one layout-agnostic tile: coalesced along channels (channels-last) or pixels (NCHW),
        # whichever stride is 1 (Triton specialises it)
        "offs = n * t_sn + pp[:, None] * t_sp + cc[None, :] * t_sc",
        "v = tl.load(t_ptr + offs, mask=m, other=0.0).to(tl.float32)",
        # the conv's own bias, left out of the library call (one pass fewer over the output)
        "if HAS_CB:",
        "    v = v + tl.load(cb_ptr + cc, mask=cm, other=0.0).to(tl.float32)[None, :]",
    ]
    env = {plan.conv_node: "v", **{lf.name: f"l_{lf.name}_val" for lf in plan.epilogue.scalar_leaves}}
    L += tile_leaf_loads(leaves, env)
    if plan.softmax is None:
        body, last = plan.epilogue.body(env)
    else:
        pre = [n for n in plan.epilogue.nodes if n.name in plan.before_softmax]
        post = [n for n in plan.epilogue.nodes if n.name not in plan.before_softmax]
        body, last = Chain(nodes=pre).body(env)
        src = plan.softmax.args[0] if plan.softmax.args else plan.softmax.kwargs["input"]
        body += [
            # the tile holds every channel of its pixels (BC >= C): softmax across the tile's rows
            f"s_in = tl.where(m, {env[src['node']]}, -float('inf'))",
            "s_max = tl.where(pp < P, tl.max(s_in, 1), 0.0)",
            "s_e = tl.where(m, tl.exp(s_in - s_max[:, None]), 0.0)",
            "s_y = s_e / tl.where(pp < P, tl.sum(s_e, 1), 1.0)[:, None]",
        ]
        env[plan.softmax.name] = "s_y"
        more, last = Chain(nodes=post).body(env)
        body += more
        last = last or "s_y"
    # out has t's strides, or is a slice of a larger tensor (a channel range of a concatenation)
    L += [
        *body,
        "o_offs = n * o_sn + pp[:, None] * o_sp + cc[None, :] * o_sc",
        f"tl.store(out_ptr + o_offs, {last}.to(out_ptr.dtype.element_ty), mask=m)",
    ]
    return jit_source("conv_tail_kernel", sig, L)


def tail_leaf_launch(leaves: list[str], scal: list[str]) -> tuple[list[str], str, str]:
    """Launcher lines reading each tail leaf's broadcast mode and strides (`_tail_leaf`), and the
    kernel call's extra arguments: (lines, ", <positional args>", ", <MODE keywords>")."""
    L, args = [], []
    for t in leaves:
        L.append(f"    {t}_e, {t}_m, {t}_sn, {t}_sc, {t}_sp = _tail_leaf({t}, t.shape)")
        args += [f"{t}_e", f"{t}_sn", f"{t}_sc", f"{t}_sp"]
    args += [f"float({x})" for x in scal]
    return L, "".join(f", {a}" for a in args), "".join(f", l_{t[2:]}_MODE={t}_m" for t in leaves)


def _generate_tiled(desc: TaskDescription, plan: ConvPlan, params: dict[str, Any]) -> str:
    cl = bool(params.get("CHANNELS_LAST")) and plan.call_cl is not None
    split = plan.split_cl if cl else plan.split
    leaves = [f"l_{lf.name}" for lf in plan.epilogue.tensor_leaves]
    scal = [f"l_{lf.name}" for lf in plan.epilogue.scalar_leaves]
    block, warps = int(params["BLOCK"]), int(params["num_warps"])
    rank = int(plan.op[-2]) + 2
    L = [
        # out: where to write (t's shape; e.g. a channel range of a concatenation's output,
        # assemble.cat_in_place), else a new tensor laid out like t
        f"def launch_conv_tail({', '.join(['t', 'cb', *leaves, *scal])}, out=None):",
        f"    unbatched = t.dim() == {rank - 1}",
        "    if unbatched:",
        "        t = t.unsqueeze(0)",
        "        out = None if out is None else out.unsqueeze(0)",
        "    if _ncp(t) is None:",
        "        t = t.contiguous()",
        "    t_sn, t_sc, t_sp = _ncp(t)",
        "    N, C = t.shape[0], t.shape[1]",
        "    P = t[0, 0].numel() if N * C else 0",
        "    if out is None:",
        "        out = torch.empty_strided(t.shape, t.stride(), device=t.device, dtype=t.dtype)",
        "    elif out.shape != t.shape or out.dtype != t.dtype or _ncp(out) is None:",
        "        raise ValueError(f'conv tail into {tuple(out.shape)} {out.dtype} for {tuple(t.shape)} {t.dtype}')",
        "    o_sn, o_sc, o_sp = _ncp(out)",
        "    if out.numel() == 0:",
        "        return out.squeeze(0) if unbatched else out",
    ]
    lines, leaf_args, leaf_modes = tail_leaf_launch(leaves, scal)
    L += lines
    L += [
        *(
            [
                # a channel softmax: every channel of a pixel in one tile
                "    bc = triton.next_power_of_2(C)",
                f"    bp = max(1, {block} // bc)",
            ]
            if plan.softmax is not None
            else [
                # the contiguous dim runs along the tile's long side
                "    if t_sc == 1 and C > 1:",
                "        bc = min(128, triton.next_power_of_2(C))",
                f"        bp = max(1, {block} // bc)",
                "    else:",
                f"        bp = min({block}, triton.next_power_of_2(max(P, 1)))",
                f"        bc = max(1, min({block} // bp, triton.next_power_of_2(C)))",
            ]
        ),
        "    grid = (triton.cdiv(P, bp), triton.cdiv(C, bc), N)",
        "    conv_tail_kernel[grid](t, t if cb is None else cb, out, C, P, t_sn, t_sc, t_sp, o_sn, o_sc, o_sp"
        + leaf_args
        + ", BP=bp, BC=bc, HAS_CB=cb is not None"
        + leaf_modes
        + f", num_warps={warps})",
        "    return out.squeeze(0) if unbatched else out",
    ]
    call = plan.call_cl if cl else plan.call
    bias = "None"
    if split is not None:
        call, bias = split[0], split[1] or "None"
    fwd_args = [f"t_{plan.conv_node}", bias, *(lf.expr for lf in plan.epilogue.tensor_leaves)]
    fwd_args += [lf.expr for lf in plan.epilogue.scalar_leaves]
    conv, helper = _precise(call, params)
    fwd = f"t_{plan.conv_node} = {conv}\nreturn launch_conv_tail({', '.join(fwd_args)})"
    ops = ", ".join(n.op for n in plan.epilogue.nodes)
    if plan.softmax is not None:
        ops = f"softmax over channels with {ops or 'nothing'} around it"
    layout = "channels-last" if cl else "NCHW"
    doc = (
        f"EGG expert: libconv family, algorithm {params['algorithm']} ({plan.op} in {layout} layout by the library, "
        + (
            "precision: fp32, cuDNN's TF32 off"
            if params.get("PRECISION") == LIBRARY_FP32
            else "precision: PyTorch's default, TF32 for cuDNN convolutions"
        )
        + f"; tail {ops} in one Triton pass"
        + ("; the input turned channels-last" if split and cl else "")
        + ("; the conv bias added by Triton" if split else "")
        + "; mixed policy)."
    )
    kernels = ewops.HELPERS + "\n\n" + _tail_kernel(plan)
    launchers = TAIL_HELPERS + "\n\n" + "\n".join(L) + "\n" + helper
    if split is not None and cl:
        kernels += "\n\n" + kernel_source("layout.py", "nchw_to_nhwc_kernel")
        launchers += "\n\n" + kernel_source("layout.py", *CL_HELPERS)
    return assemble(desc, kernels, launchers, fwd, doc)
