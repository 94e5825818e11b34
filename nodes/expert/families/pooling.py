"""Max / average pooling, 1D/2D/3D (kernel, stride, padding, dilation for max; count_include_pad
for avg), with a scalar elementwise prologue/epilogue fused in. The pooled input may be a library conv (mixed
policy; the strict policy drops "library" algorithms); the epilogue may read per-channel tensors
(a (C, 1, ..., 1) bias) or tensors of the output's shape. The window is unrolled at compile time
(window sizes are module constants, not shapes). ceil_mode, return_indices and divisor_override
are refused.

Algorithms (the seeds):
  row-tiles      one program per tile of ROWS_OUT output rows x BLOCK_W output columns of one
                 plane (consecutive programs walk a plane, so rows shared by two tiles stay in L2):
                 each input row the tile needs is loaded once per window column (coalesced along
                 W, 16-byte vectors where the shift keeps alignment), reduced across the window's
                 width, and the output rows combine those row results (separable max / sum); no
                 per-element index division.
  direct-window  one program per BLOCK flat output elements, every window element loaded per
                 output (the fallback).
  library-conv+channels-last
                 (first, with a 2-d/3-d library conv) the conv's input turned channels-last, so
                 cuDNN computes and answers in its native layout (an NCHW input costs a layout
                 change inside the library on each side), and pool_cl_kernel pools that output.
A library conv's bias is left out of its call and added to each element as it is loaded (PyTorch
adds it in a pass of its own over the conv's output). The generic kernel's index arithmetic is
32-bit unless the tensors need 64 bits.
Both read a channels-last input (a library conv's output in a channels-last network) with
pool_cl_kernel instead, decided at run time: tiles of output pixels x channels, each window element
one load of contiguous channels, and a channels-last output, so the layout survives the pool with
no copy before it (the NCHW kernels' `contiguous()`) or after it (the next conv's layout change).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from graph.records import OpNode, TaskDescription

from .. import ewops
from ..chain import Chain, collect_chain
from ..graphview import GraphView, Leaf, Unsupported, arg_value, assemble, is_node
from ..kernelfiles import jit_source, kernel_source
from ..spaces import distinct_launches, next_pow2
from .libconv import CL_HELPERS, LIB_OPS, library_call, split_call

POOL_OPS = {f"{k}_pool{d}d" for k in ("max", "avg") for d in (1, 2, 3)}


@dataclass
class PoolPlan:
    op: str
    nd: int
    kernel: list[int]
    stride: list[int]
    padding: list[int]
    dilation: list[int]
    count_include_pad: bool
    x: Leaf
    prologue: Chain
    epilogue: Chain
    pool_node: str
    scalars: list[Leaf]
    conv_call: str | None = None
    # A pooling module's (kernel, stride, padding, dilation) read at run time (module scalars
    # may differ from the captured ones, e.g. at the checker's second shape).
    geometry: str | None = None
    # The library conv's bias, left out of conv_call and added to each loaded element before the
    # prologue (None: no bias, or kept in the call). PyTorch adds a conv's bias in a pass of its
    # own over the whole output; here it costs a load per channel.
    conv_bias: str | None = None
    # The conv on its input turned channels-last (cuDNN's native layout on Hopper: no layout
    # change inside the library on either side), bias as in conv_call; None where the call does
    # not split or the conv is 1-d.
    conv_call_cl: str | None = None
    # The output row's width as captured (the task's own sizes): which row-tile widths differ.
    out_w: int | None = None


def _tup(v: Any, nd: int, name: str) -> list[int]:
    if is_node(v):
        raise Unsupported(f"pooling {name} is a tensor")
    vals = v if isinstance(v, list) else [v] * nd
    if len(vals) != nd:
        raise Unsupported(f"pooling {name}={v!r}")
    return [int(x) for x in vals]


def window_args(p: OpNode) -> tuple[str, int, list[int], list[int], list[int], list[int], bool]:
    """A pooling node's (kind, nd, kernel, stride, padding, dilation, count_include_pad) as
    captured, from its module's attributes or the call's arguments; ceil_mode, return_indices
    and divisor_override are refused (Unsupported)."""
    nd = int(p.op[-2])
    kind = p.op.split("_")[0]
    if p.kind == "call_module":
        a = p.module_attrs
        get = lambda k, d: a.get(k, d)  # noqa: E731
    else:
        pos = {
            "kernel_size": 1,
            "stride": 2,
            "padding": 3,
            "dilation": 4,
            "ceil_mode": 5 if kind == "max" else 4,
            "return_indices": 6,
            "count_include_pad": 5,
            "divisor_override": 6,
        }

        def get(k: str, d: Any) -> Any:
            if kind == "avg" and k == "dilation":
                return d
            return arg_value(p, pos[k], k, d)

    ks = _tup(get("kernel_size", None), nd, "kernel_size")
    stride_v = get("stride", None)
    stride = ks if stride_v in (None, []) else _tup(stride_v, nd, "stride")
    padding = _tup(get("padding", 0), nd, "padding")
    dilation = _tup(get("dilation", 1), nd, "dilation") if kind == "max" else [1] * nd
    if get("ceil_mode", False):
        raise Unsupported("pooling with ceil_mode=True")
    if kind == "max" and get("return_indices", False):
        raise Unsupported("max pooling with return_indices")
    if kind == "avg" and get("divisor_override", None) is not None:
        raise Unsupported("avg pooling with divisor_override")
    cip = bool(get("count_include_pad", True)) if kind == "avg" else True
    return kind, nd, ks, stride, padding, dilation, cip


def geometry_expr(p: OpNode) -> str | None:
    """forward's expression of a pooling module's (kernel, stride, padding, dilation), read at
    run time (module scalars may differ from the captured ones); None for a functional call."""
    if p.kind != "call_module":
        return None
    m = f"self.{p.target}"
    return f"({m}.kernel_size, {m}.stride, {m}.padding, {m + '.dilation' if p.op.startswith('max') else '1'})"


def match(view: GraphView) -> PoolPlan | None:
    nodes = view.compute_nodes()
    pools = [n for n in nodes if n.op in POOL_OPS]
    if len(pools) != 1:
        return None
    p = pools[0]
    kind, nd, ks, stride, padding, dilation, cip = window_args(p)
    i = [n.name for n in nodes].index(p.name)
    pro, epi = nodes[:i], nodes[i + 1 :]
    conv_call = conv_bias = conv_call_cl = None
    if pro and pro[0].op in LIB_OPS:
        c = pro[0]
        conv_call = library_call(view, c)
        split = split_call(view, c, "")
        if split is not None and split[1] is not None and not any(c.name in view.refs(n) for n in epi):
            conv_call, conv_bias = split
        split_cl = split_call(view, c, "to_channels_last") if int(c.op[-2]) > 1 else None
        if split_cl is not None and split_cl[1] == conv_bias:
            conv_call_cl = split_cl[0]
        # The conv output becomes the pooled tensor leaf (computed by the library call).
        view = dataclasses.replace(view, leaves={**view.leaves, c.name: Leaf(c.name, "t_conv", c.shape)})
        pro = pro[1:]
    prologue = collect_chain(view, pro, internal=set())
    src = view.refs(p)[0]
    if pro:
        if len(prologue.tensor_leaves) != 1:
            raise Unsupported("pooling prologue reads more than one tensor")
        x = prologue.tensor_leaves[0]
    else:
        x = view.leaves.get(src)
        if x is None or x.is_scalar:
            raise Unsupported("pooling input is not a tensor argument")
    if x.shape is None or len(x.shape) != nd + 2:
        raise Unsupported(f"{p.op} over a {len(x.shape or [])}-d input (batched inputs only)")
    epilogue = collect_chain(view, epi, internal={p.name})
    scalars: list[Leaf] = []
    for lf in prologue.scalar_leaves + epilogue.scalar_leaves:
        if lf.name not in [s.name for s in scalars]:
            scalars.append(lf)
    geometry = geometry_expr(p)
    return PoolPlan(
        kind,
        nd,
        ks,
        stride,
        padding,
        dilation,
        cip,
        x,
        prologue,
        epilogue,
        p.name,
        scalars,
        conv_call,
        geometry,
        conv_bias,
        conv_call_cl,
        p.shape[-1] if p.shape else None,
    )


ROWS = "row-tiles"
CL = "library-conv+channels-last"
# Narrowest output row (elements) that row tiles take; narrower rows go to the generic kernel.
ROW_TILE_MIN_W = 32


def algorithms(plan: PoolPlan) -> list[str]:
    if plan.conv_call:
        # channels-last first: a partition's first seed keeps a network's convs in that layout
        cl = [CL] if plan.conv_call_cl else []
        return [*cl, "library-conv+row-tiles", "library-conv+direct-window"]
    return [ROWS, "direct-window"]


def _overlap(plan: PoolPlan) -> bool:
    """Windows overlap along H (stride below the dilated window): output rows share input rows."""
    return plan.stride[-2] < plan.kernel[-2] * plan.dilation[-2] if plan.nd >= 2 else False


def defaults(plan: PoolPlan, algorithm: str) -> dict[str, Any]:
    if algorithm.endswith(ROWS):
        # Overlapping windows (stride below the window) share input rows between the output rows
        # of a tile: 16 rows of a 4x4 / stride-1 pool read 19 input rows, not 64. On the H200
        # (evals/h200/membw_probe.py, (32, 64, 512, 512)) 16 rows x 512 columns at 8 warps ran
        # at 1.43 ms, 8 rows at 4 warps at 1.56 ms, torch.compile at 4.28 ms.
        overlap = _overlap(plan)
        # 512 columns: one 16-byte vector per thread and row at 4 warps, where a row load is aligned.
        return {"BLOCK_W": 512, "ROWS_OUT": 16 if overlap else 2, "num_warps": 8 if overlap else 4}
    if algorithm == CL:
        # pool_cl_kernel's tile: CL_BC channels x CL_TILE // CL_BC output pixels
        return {"BLOCK": 512, "CL_BC": 64, "CL_TILE": 2048, "num_warps": 4}
    return {"BLOCK": 512, "num_warps": 4}


def valid(plan: PoolPlan, params: dict[str, Any]) -> str | None:
    if not params["algorithm"].endswith(ROWS):
        return None
    if params["BLOCK_W"] < 32 or params["ROWS_OUT"] < 1:
        return "row tiles need BLOCK_W >= 32 and ROWS_OUT >= 1"
    if plan.nd == 1 and params["ROWS_OUT"] != 1:
        return "a 1-d pool has one output row"
    rows = _input_rows(plan, params["ROWS_OUT"])
    kd = plan.kernel[0] if plan.nd == 3 else 1
    if len(rows) * kd * plan.kernel[-1] > 512:
        return "the unrolled window would exceed 512 loads per tile"
    return None


def _tile_widths(plan: PoolPlan, current: int) -> list[int]:
    """Row-tile widths to try: those the launcher does not cut to the same tile as `current`
    (it takes min(BLOCK_W, the row's power of two, at least 32)): on 64-wide output rows the
    widths 256, 1024 and 128 were all a 64-wide tile, three variants compiled and timed for one
    kernel (evals audit of 2026-12-07)."""
    widths = [256, 1024, 128, 64]
    if not plan.out_w:
        return widths
    row = max(32, next_pow2(plan.out_w))
    return distinct_launches(widths, int(current), lambda b: min(b, row))


def space(plan: PoolPlan, params: dict[str, Any], stage: str, sp: dict[str, list]) -> dict[str, list]:
    if params["algorithm"].endswith(ROWS):
        tiling: dict[str, list] = {"BLOCK_W": _tile_widths(plan, params["BLOCK_W"])}
        if plan.nd > 1:  # a 1-d pool's tile is one row whatever ROWS_OUT says
            tiling["ROWS_OUT"] = [8, 32, 4, 2] if _overlap(plan) else [4, 16, 1, 8]
        return {
            "tiling": tiling,
            "memory": {"num_warps": [4, 2] if _overlap(plan) else [8, 2, 1]},
        }.get(stage, {})
    if params["algorithm"] == CL:
        return {
            "tiling": {"CL_BC": [32, 128, 16], "CL_TILE": [1024, 4096]},
            "memory": {"num_warps": [8, 2]},
        }.get(stage, {})
    return {"tiling": {"BLOCK": [1024, 256, 2048]}, "memory": {"num_warps": [8, 2]}}.get(stage, {})


def _input_rows(plan: PoolPlan, rows_out: int) -> list[int]:
    """Offsets (from the tile's first output row times the stride, minus the padding) of the
    input rows a tile of `rows_out` output rows reads: each is loaded once per tile."""
    if plan.nd == 1:
        return [0]
    sh, kh, dh = plan.stride[-2], plan.kernel[-2], plan.dilation[-2]
    return sorted({r * sh + k * dh for r in range(rows_out) for k in range(kh)})


def _pad3(v: list[int], fill: int) -> list[int]:
    return [fill] * (3 - len(v)) + v


def generate(desc: TaskDescription, view: GraphView, plan: PoolPlan, params: dict[str, Any]) -> str:
    if not params["algorithm"].endswith(ROWS):
        kernel, launch = _generic(plan, params)
        return _assemble(desc, plan, params, kernel, _launcher(plan, launch, params))
    kernel, launch = _rows(plan, params)
    # Row tiles pay when an output row is at least a warp wide: narrower rows would leave most
    # lanes of every tile masked (and make many tiny programs), so the generic kernel, one
    # program per BLOCK output elements, runs instead. Row tiles also unroll the captured
    # window: a module's geometry is read at run time, and when it is not the captured one
    # (another configuration of the same module) the generic kernel, whose window is a
    # constexpr, runs too.
    generic, glaunch = _generic(plan, {"BLOCK": 256, "num_warps": params["num_warps"]})
    cond = f"OW >= {ROW_TILE_MIN_W}"
    if plan.geometry:
        baked = (
            _pad3(plan.kernel, 1),
            _pad3(plan.stride, 1),
            _pad3(plan.padding, 0),
            _pad3(plan.dilation, 1),
        )
        cond = f"(k, s, p, d) == {baked!r} and {cond}"
    kernel += "\n\n" + generic
    launch = [
        f"    if {cond}:",
        *("    " + ln for ln in launch),
        "    else:",
        *("    " + ln for ln in glaunch),
    ]
    return _assemble(desc, plan, params, kernel, _launcher(plan, launch, params))


def _window(plan: PoolPlan, ok: str, load: list[str], valid: str, cnt: str) -> tuple[list[str], str, str]:
    """The statements of one window element (indices, the validity line `ok`, the `load` lines
    ending in `v`, the prologue, the reduction masked by `valid`) and the final `res` line, for
    loops over kd, kh, kw; `cnt` is how the per-output count broadcasts. Also the reduction's
    fill value."""
    is_max = plan.op == "max"
    fill = "-float('inf')" if is_max else "0.0"
    env = {plan.x.name: "v", **{lf.name: f"l_{lf.name}_val" for lf in plan.scalars}}
    pro, plast = plan.prologue.body(env, var_prefix="p_")
    inner = [
        "idd = od * SD - PD + kd * DD",
        "ih = oh * SH - PH + kh * DH",
        "iw = ow * SW - PW + kw * DW",
        ok,
        *load,
        *pro,
        f"v = tl.where({valid}, {plast or 'v'}, {fill})",
        "acc = tl.maximum(acc, v)" if is_max else "acc += v",
    ]
    if not is_max and not plan.count_include_pad:
        inner.append("cnt += tl.where(ok, 1.0, 0.0)")
    if is_max:
        final = "res = acc"
    elif plan.count_include_pad:
        final = "res = acc / (KD * KH * KW)"
    else:
        final = f"res = acc / {cnt}"
    return inner, final, fill


def _epilogue(plan: PoolPlan, loads: dict[int, str]) -> tuple[list[str], list[str], str | None]:
    """Loads of the epilogue's tensors by their launch mode (`loads`: mode -> expression with
    {P} for the operand; one element otherwise), then the epilogue's statements on `res`."""
    env = {plan.pool_node: "res", **{lf.name: f"l_{lf.name}_val" for lf in plan.scalars}}
    eloads: list[str] = []
    for lf in plan.epilogue.tensor_leaves:
        P = f"t_{lf.name}"
        for i, (mode, expr) in enumerate(sorted(loads.items())):
            eloads += [f"{'if' if i == 0 else 'elif'} {P}_MODE == {mode}:", f"    {P} = {expr.format(P=P)}"]
        eloads += ["else:", f"    {P} = tl.load({P}_ptr).to(tl.float32)"]
        env[lf.name] = P
    epi, elast = plan.epilogue.body(env, var_prefix="e_")
    return eloads, epi, elast


def _window_kernel(plan: PoolPlan, name: str, head: str, blocks: tuple[str, ...], body: list[str]) -> str:
    """A @triton.jit kernel over a constexpr window: `head` arguments, the geometry, the epilogue's
    tensors and the scalars, the window and `blocks` as constexprs, then the epilogue's modes."""
    consts = ", ".join(
        f"{n}: tl.constexpr"
        for n in ("KD", "KH", "KW", "SD", "SH", "SW", "PD", "PH", "PW", "DD", "DH", "DW", *blocks)
    )
    tens = _tensor_params(plan)
    scal = "".join(f", l_{lf.name}_val" for lf in plan.scalars)
    modes = "".join(f", t_{lf.name}_MODE: tl.constexpr" for lf in plan.epilogue.tensor_leaves)
    return jit_source(name, f"{head}, D, H, W, OD, OH, OW{tens}{scal}, {consts}{modes}", body)


def _generic(plan: PoolPlan, params: dict[str, Any]) -> tuple[str, list[str]]:
    """One program per BLOCK output elements, the window (constexprs) unrolled in the kernel."""
    eloads, epi, elast = _epilogue(
        plan,
        {
            0: "tl.load({P}_ptr + offs, mask=mask, other=0.0).to(tl.float32)",
            1: "tl.load({P}_ptr + nc % C, mask=mask, other=0.0).to(tl.float32)",
        },
    )
    inner, final, fill = _window(
        plan,
        "ok = mask & (idd >= 0) & (idd < D) & (ih >= 0) & (ih < H) & (iw >= 0) & (iw < W)",
        [
            "v = tl.load(x_ptr + ((nc * D + idd) * H + ih) * W + iw, mask=ok, other=0.0).to(tl.float32)",
            *_bias_add(plan),
        ],
        "ok",
        "cnt",
    )
    body = [
        "pid = tl.program_id(0)",
        # 32-bit index arithmetic unless the tensors need 64 (a 64-bit division costs tens of
        # instructions, four of them per output element)
        "if WIDE:",
        "    offs = pid.to(tl.int64) * BLOCK + tl.arange(0, BLOCK)",
        "else:",
        "    offs = pid * BLOCK + tl.arange(0, BLOCK)",
        "mask = offs < total",
        "ow = offs % OW",
        "t = offs // OW",
        "oh = t % OH",
        "t = t // OH",
        "od = t % OD",
        "nc = t // OD",
        *(["cb = tl.load(cb_ptr + nc % C, mask=mask, other=0.0).to(tl.float32)"] if plan.conv_bias else []),
        f"acc = tl.full([BLOCK], {fill}, tl.float32)",
        "cnt = tl.zeros([BLOCK], dtype=tl.float32)",
        "for kd in tl.static_range(KD):",
        "    for kh in tl.static_range(KH):",
        "        for kw in tl.static_range(KW):",
        *["            " + x for x in inner],
        final,
        *eloads,
        *epi,
        f"tl.store(out_ptr + offs, {elast or 'res'}.to(out_ptr.dtype.element_ty), mask=mask)",
    ]
    kernel = _window_kernel(plan, "pool_kernel", "x_ptr, out_ptr, total, C", ("BLOCK", "WIDE"), body)
    block = int(params["BLOCK"])
    return kernel, [
        "    total = out.numel()",
        f"    pool_kernel[(triton.cdiv(total, {block}),)](x, out, total, x.shape[1], D, H, W, OD, OH, OW"
        "{tcall}{scall},",
        "        KD=k[0], KH=k[1], KW=k[2], SD=s[0], SH=s[1], SW=s[2], PD=p[0], PH=p[1], PW=p[2],",
        f"        DD=d[0], DH=d[1], DW=d[2], BLOCK={block}, WIDE=max(x.numel(), total) + {block} >= 2**31"
        f"{{tmodes}}, num_warps={int(params['num_warps'])})",
    ]


def _cl_kernel(plan: PoolPlan) -> str:
    """pool_cl_kernel: a channels-last input (N, D, H, W, C in memory) pooled into a
    channels-last output, one program per tile of BP output pixels x BC channels: every window
    element is one load of BC contiguous channels per pixel, so the layout a library conv gave
    (cuDNN's fast one) needs no copy before the pool nor after it. The window is constexpr, as in
    pool_kernel; epilogue tensors are per channel or one element (the launcher checks)."""
    inner, final, fill = _window(
        plan,
        "ok = pm & (idd >= 0) & (idd < D) & (ih >= 0) & (ih < H) & (iw >= 0) & (iw < W)",
        [
            "m = ok[:, None] & cm[None, :]",
            "pix = ((idd * H + ih) * W + iw).to(tl.int64)",
            "v = tl.load(x_n + pix[:, None] * C + cc[None, :], mask=m, other=0.0).to(tl.float32)",
            *_bias_add(plan),
        ],
        "m",
        "cnt[:, None]",
    )
    eloads, epi, elast = _epilogue(
        plan, {1: "tl.load({P}_ptr + cc, mask=cm, other=0.0).to(tl.float32)[None, :]"}
    )
    body = [
        "pp = tl.program_id(0) * BP + tl.arange(0, BP)",
        "cc = tl.program_id(1) * BC + tl.arange(0, BC)",
        "n = tl.program_id(2).to(tl.int64)",
        "pm = pp < OD * OH * OW",
        "cm = cc < C",
        *(
            ["cb = tl.load(cb_ptr + cc, mask=cm, other=0.0).to(tl.float32)[None, :]"]
            if plan.conv_bias
            else []
        ),
        "ow = pp % OW",
        "t = pp // OW",
        "oh = t % OH",
        "od = t // OH",
        "x_n = x_ptr + n * D * H * W * C",
        f"acc = tl.full([BP, BC], {fill}, tl.float32)",
        "cnt = tl.zeros([BP], dtype=tl.float32)",
        "for kd in tl.static_range(KD):",
        "    for kh in tl.static_range(KH):",
        "        for kw in tl.static_range(KW):",
        *["            " + x for x in inner],
        final,
        *eloads,
        *epi,
        "o = (n * OD * OH * OW + pp.to(tl.int64))[:, None] * C + cc[None, :]",
        f"tl.store(out_ptr + o, {elast or 'res'}.to(out_ptr.dtype.element_ty), mask=pm[:, None] & cm[None, :])",
    ]
    return _window_kernel(plan, "pool_cl_kernel", "x_ptr, out_ptr, C", ("BP", "BC"), body)


EPI_MODE = '''
def _epi_mode(t, shape):
    """0 = the output's shape, 1 = per channel (dim 1), 2 = one element."""
    if t.numel() == 1:
        return t.reshape(1), 2
    dims = [1] * (len(shape) - t.dim()) + list(t.shape)
    if dims == list(shape):
        return t.expand(shape).contiguous(), 0
    if len(dims) == len(shape) and dims[1] == shape[1] and all(d == 1 for i, d in enumerate(dims) if i != 1):
        return t.reshape(-1).contiguous(), 1
    raise ValueError(f"epilogue operand of shape {tuple(t.shape)} is neither full, per channel nor one element")
'''


def _rows(plan: PoolPlan, params: dict[str, Any]) -> tuple[str, list[str]]:
    """One program per tile of ROWS_OUT output rows x BLOCK_W output columns of one plane: each
    input row the tile needs is loaded once (KW shifted, coalesced loads along W, 16-byte vectors
    where the shift is a multiple of 4) and reduced across the window's width; the output rows
    then combine those row results. Tiles of a plane are consecutive programs, so the rows two
    tiles share are still in L2; no per-element index division."""
    KD, KH, KW = _pad3(plan.kernel, 1)
    SD, SH, SW = _pad3(plan.stride, 1)
    PD, PH, PW = _pad3(plan.padding, 0)
    DD, DH, DW = _pad3(plan.dilation, 1)
    R = int(params["ROWS_OUT"]) if plan.nd > 1 else 1
    is_max = plan.op == "max"
    fill = "-float('inf')" if is_max else "0.0"
    comb = "tl.maximum({a}, {b})" if is_max else "{a} + {b}"
    scal_env = {lf.name: f"l_{lf.name}_val" for lf in plan.scalars}
    pro, plast = plan.prologue.body({plan.x.name: "v", **scal_env}, var_prefix="p_")
    qs = _input_rows(plan, R)
    L = [
        "pid = tl.program_id(0)",
        "z = pid // n_tiles",  # plane: nc * OD + od
        "t = pid - z * n_tiles",
        "hb = t // n_w",
        "od = z % OD",
        "nc = z // OD",
        "ow = (t - hb * n_w) * BLOCK_W + tl.arange(0, BLOCK_W)",
        "wmask = ow < OW",
        "oh0 = hb * ROWS_OUT",
        "x_nc = x_ptr + nc.to(tl.int64) * D * H * W",
        f"ih0 = oh0 * {SH} - {PH}",
        f"id0 = od * {SD} - {PD}",
        *(["cb = tl.load(cb_ptr + nc % C).to(tl.float32)"] if plan.conv_bias else []),
    ]
    for kw in range(KW):
        off = kw * DW - PW
        # a non-negative shift needs no lower bound test (fewer ops, and an analysable mask)
        low = f" & (iw{kw} >= 0)" if off < 0 else ""
        L += [f"iw{kw} = ow * {SW} + {off}", f"wok{kw} = wmask{low} & (iw{kw} < W)"]
    for kd in range(KD):
        L += [f"idd{kd} = id0 + {kd * DD}", f"dok{kd} = (idd{kd} >= 0) & (idd{kd} < D)"]
        for q in qs:
            h = f"h{kd}_{q}"
            L += [
                f"ih = ih0 + {q}",
                f"ok = dok{kd} & (ih >= 0) & (ih < H)",
                f"row = x_nc + ((idd{kd} * H + ih) * W).to(tl.int64)",
                f"{h} = tl.full([BLOCK_W], {fill}, tl.float32)",
            ]
            for kw in range(KW):
                L += [
                    f"m = wok{kw} & ok",
                    f"v = tl.load(row + iw{kw}, mask=m, other=0.0).to(tl.float32)",
                    *_bias_add(plan),
                    *pro,
                    f"v = tl.where(m, {plast or 'v'}, {fill})",
                    f"{h} = {comb.format(a=h, b='v')}",
                ]
    if not is_max and not plan.count_include_pad:
        L.append("cnt_w = " + " + ".join(f"tl.where(wok{kw}, 1.0, 0.0)" for kw in range(KW)))
        L.append("cnt_d = " + " + ".join(f"tl.where(dok{kd}, 1.0, 0.0)" for kd in range(KD)))
    eloads_tmpl = []
    for lf in plan.epilogue.tensor_leaves:
        P = f"t_{lf.name}"
        eloads_tmpl += [
            f"if {P}_MODE == 0:",
            f"    {P}{{r}} = tl.load({P}_ptr + offs, mask=omask, other=0.0).to(tl.float32)",
            f"elif {P}_MODE == 1:",
            f"    {P}{{r}} = tl.load({P}_ptr + nc % C).to(tl.float32)",
            "else:",
            f"    {P}{{r}} = tl.load({P}_ptr).to(tl.float32)",
        ]
    for r in range(R):
        terms = [f"h{kd}_{r * SH + kh * DH}" for kd in range(KD) for kh in range(KH)]
        acc = terms[0]
        for t in terms[1:]:
            acc = comb.format(a=acc, b=t)
        L += [f"oh = oh0 + {r}", f"acc = {acc}"]
        if is_max:
            L.append(f"res{r} = acc")
        elif plan.count_include_pad:
            L.append(f"res{r} = acc / {float(KD * KH * KW)!r}")
        else:
            cnt_h = " + ".join(
                f"tl.where((ih0 + {r * SH + kh * DH} >= 0) & (ih0 + {r * SH + kh * DH} < H), 1.0, 0.0)"
                for kh in range(KH)
            )
            L.append(f"res{r} = acc / (cnt_w * cnt_d * ({cnt_h}))")
        L += [
            "offs = (z.to(tl.int64) * OH + oh) * OW + ow",
            "omask = wmask & (oh < OH)",
            *(ln.format(r=r) for ln in eloads_tmpl),
        ]
        eenv = {plan.pool_node: f"res{r}", **scal_env}
        for lf in plan.epilogue.tensor_leaves:
            eenv[lf.name] = f"t_{lf.name}{r}"
        epi, elast = plan.epilogue.body(eenv, var_prefix=f"e{r}_")
        L += [
            *epi,
            f"tl.store(out_ptr + offs, {elast or f'res{r}'}.to(out_ptr.dtype.element_ty), mask=omask)",
        ]
    tens = _tensor_params(plan)
    scal = "".join(f", l_{lf.name}_val" for lf in plan.scalars)
    modes = "".join(f", t_{lf.name}_MODE: tl.constexpr" for lf in plan.epilogue.tensor_leaves)
    sig = (
        f"x_ptr, out_ptr, C, D, H, W, OD, OH, OW, n_w, n_tiles{tens}{scal}, "
        f"ROWS_OUT: tl.constexpr, BLOCK_W: tl.constexpr{modes}"
    )
    kernel = jit_source("pool_rows_kernel", sig, L)
    bw = int(params["BLOCK_W"])
    return kernel, [
        f"    bw = min({bw}, max(32, triton.next_power_of_2(OW)))",
        "    n_w = triton.cdiv(OW, bw)",
        f"    n_tiles = n_w * triton.cdiv(OH, {R})",
        "    grid = (x.shape[0] * x.shape[1] * OD * n_tiles,)",
        "    pool_rows_kernel[grid](x, out, x.shape[1], D, H, W, OD, OH, OW, n_w, n_tiles{tcall}{scall},",
        f"        ROWS_OUT={R}, BLOCK_W=bw{{tmodes}}, num_warps={int(params['num_warps'])})",
    ]


def _tensor_params(plan: PoolPlan) -> str:
    """A kernel's tensor arguments after the geometry: the conv's bias, then the epilogue's."""
    bias = ", cb_ptr" if plan.conv_bias else ""
    return bias + "".join(f", t_{lf.name}_ptr" for lf in plan.epilogue.tensor_leaves)


def _bias_add(plan: PoolPlan) -> list[str]:
    """After a window element's load `v`: the conv's bias (`cb`, loaded once per program)."""
    return ["v = v + cb"] if plan.conv_bias else []


def _launcher(plan: PoolPlan, launch: list[str], params: dict[str, Any]) -> str:
    """launch_pool(): output geometry and epilogue operands, then the `launch` lines (which may
    use {tcall}, {scall} and {tmodes}: the epilogue tensors, scalars and their modes)."""
    KD, KH, KW = _pad3(plan.kernel, 1)
    SD, SH, SW = _pad3(plan.stride, 1)
    PD, PH, PW = _pad3(plan.padding, 0)
    DD, DH, DW = _pad3(plan.dilation, 1)
    nd = plan.nd
    leaves = plan.epilogue.tensor_leaves
    sargs = "".join(f", l_{lf.name}" for lf in plan.scalars)
    targs = (", cbias" if plan.conv_bias else "") + "".join(f", t_{lf.name}" for lf in leaves)
    fills = {
        "tcall": (", cbias" if plan.conv_bias else "") + "".join(f", t_{lf.name}_c" for lf in leaves),
        "scall": "".join(f", float(l_{lf.name})" for lf in plan.scalars),
        "tmodes": "".join(f", t_{lf.name}_MODE=t_{lf.name}_m" for lf in leaves),
    }
    tprep = "".join(f"\n    t_{lf.name}_c, t_{lf.name}_m = _epi_mode(t_{lf.name}, oshape)" for lf in leaves)
    # the channels-last kernel reads epilogue tensors per channel or as one element
    cl_ok = " and ".join(f"t_{lf.name}_m != 0" for lf in leaves) or "True"
    cl_warps = int(params["num_warps"]) if params["algorithm"] == CL else 4
    return (
        EPI_MODE
        + f"""
def launch_pool(x{targs}{sargs}, geometry=None):
    if x.dim() != {nd + 2}:
        raise ValueError(f"expected a {nd + 2}-d input, got {{tuple(x.shape)}}")
    spatial = [1] * {3 - nd} + list(x.shape[2:])
    D, H, W = spatial
    k, s, p, d = {[KD, KH, KW]!r}, {[SD, SH, SW]!r}, {[PD, PH, PW]!r}, {[DD, DH, DW]!r}
    if geometry is not None:
        def dims(v, fill):
            v = list(v) if isinstance(v, (list, tuple)) else [v] * {nd}
            return [fill] * {3 - nd} + [int(a) for a in v]
        k = dims(geometry[0], 1)
        s = k if geometry[1] is None or geometry[1] == [] else dims(geometry[1], 1)
        p, d = dims(geometry[2], 0), dims(geometry[3], 1)
    outs = [(L + 2 * p[i] - d[i] * (k[i] - 1) - 1) // s[i] + 1 for i, L in enumerate(spatial)]
    if min(outs) <= 0:
        raise ValueError("pooling window larger than the padded input")
    oshape = list(x.shape[:2]) + outs[{3 - nd}:]
    if 0 in oshape:
        return torch.empty(oshape, device=x.device, dtype=x.dtype)
    OD, OH, OW = outs{tprep}
    cl_fmt = {{4: torch.channels_last, 5: torch.channels_last_3d}}.get(x.dim())
    if (
        cl_fmt is not None
        and x.shape[1] > 1
        and not x.is_contiguous()
        and x.is_contiguous(memory_format=cl_fmt)
        and {cl_ok}
    ):
        # channels-last in (a library conv's output), channels-last out: no copy either side
        out = torch.empty(oshape, device=x.device, dtype=x.dtype, memory_format=cl_fmt)
        C = x.shape[1]
        bc = min({int(params.get("CL_BC", 64))}, triton.next_power_of_2(C))
        bp = max(16, {int(params.get("CL_TILE", 2048))} // bc)
        grid = (triton.cdiv(OD * OH * OW, bp), triton.cdiv(C, bc), x.shape[0])
        pool_cl_kernel[grid](x, out, C, D, H, W, OD, OH, OW{fills["tcall"]}{fills["scall"]},
            KD=k[0], KH=k[1], KW=k[2], SD=s[0], SH=s[1], SW=s[2], PD=p[0], PH=p[1], PW=p[2],
            DD=d[0], DH=d[1], DW=d[2], BP=bp, BC=bc{fills["tmodes"]}, num_warps={cl_warps})
        return out
    x = x.contiguous()
    out = torch.empty(oshape, device=x.device, dtype=x.dtype)
"""
        + "\n".join(ln.format(**fills) for ln in launch)
        + "\n    return out\n"
    )


def _assemble(
    desc: TaskDescription, plan: PoolPlan, params: dict[str, Any], kernel: str, launcher: str
) -> str:
    call = [plan.x.expr, *([plan.conv_bias] if plan.conv_bias else [])]
    call += [lf.expr for lf in plan.epilogue.tensor_leaves] + [lf.expr for lf in plan.scalars]
    if plan.geometry:
        call.append(f"geometry={plan.geometry}")
    doc = f"EGG expert: pooling family ({plan.op}_pool{plan.nd}d), algorithm {params['algorithm']}."
    fwd = f"return launch_pool({', '.join(call)})"
    cl = params["algorithm"] == CL
    if plan.conv_call:
        fwd = f"t_conv = {plan.conv_call_cl if cl else plan.conv_call}\n" + fwd
    kernels = ewops.HELPERS + "\n\n" + kernel + "\n\n" + _cl_kernel(plan)
    if cl:
        doc += " The conv's input is turned channels-last, so cuDNN works and answers in that layout."
        kernels += "\n\n" + kernel_source("layout.py", "nchw_to_nhwc_kernel")
        launcher += "\n\n" + kernel_source("layout.py", *CL_HELPERS)
    return assemble(desc, kernels, launcher, fwd, doc)
