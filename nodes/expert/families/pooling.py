"""Max / average pooling, 1D/2D/3D (kernel, stride, padding, dilation for max; count_include_pad
for avg), with a scalar elementwise prologue/epilogue fused in. The pooled input may be a library conv (mixed
policy; the strict policy drops "library" algorithms); the epilogue may read per-channel tensors
(a (C, 1, ..., 1) bias) or tensors of the output's shape. One program computes BLOCK output
elements; the window is unrolled at compile time (window sizes are module constants, not shapes).
ceil_mode, return_indices and divisor_override are refused.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from graph.records import TaskDescription

from .. import ewops
from ..chain import Chain, collect_chain
from ..graphview import GraphView, Leaf, Unsupported, arg_value, assemble, is_node
from .libconv import LIB_OPS, library_call

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


def _tup(v: Any, nd: int, name: str) -> list[int]:
    if is_node(v):
        raise Unsupported(f"pooling {name} is a tensor")
    vals = v if isinstance(v, list) else [v] * nd
    if len(vals) != nd:
        raise Unsupported(f"pooling {name}={v!r}")
    return [int(x) for x in vals]


def match(view: GraphView) -> PoolPlan | None:
    nodes = view.compute_nodes()
    pools = [n for n in nodes if n.op in POOL_OPS]
    if len(pools) != 1:
        return None
    p = pools[0]
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
    i = [n.name for n in nodes].index(p.name)
    pro, epi = nodes[:i], nodes[i + 1 :]
    conv_call = None
    if pro and pro[0].op in LIB_OPS:
        c = pro[0]
        conv_call = library_call(view, c)
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
    geometry = None
    if p.kind == "call_module":
        m = f"self.{p.target}"
        geometry = f"({m}.kernel_size, {m}.stride, {m}.padding, {m + '.dilation' if kind == 'max' else '1'})"
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
    )


def algorithms(plan: PoolPlan) -> list[str]:
    return ["library-conv+direct-window"] if plan.conv_call else ["direct-window"]


def defaults(plan: PoolPlan, algorithm: str) -> dict[str, Any]:
    return {"BLOCK": 512, "num_warps": 4}


def space(plan: PoolPlan, params: dict[str, Any], stage: str, sp: dict[str, list]) -> dict[str, list]:
    return {"tiling": {"BLOCK": [1024, 256, 2048]}, "memory": {"num_warps": [8, 2]}}.get(stage, {})


def _pad3(v: list[int], fill: int) -> list[int]:
    return [fill] * (3 - len(v)) + v


def generate(desc: TaskDescription, view: GraphView, plan: PoolPlan, params: dict[str, Any]) -> str:
    KD, KH, KW = _pad3(plan.kernel, 1)
    SD, SH, SW = _pad3(plan.stride, 1)
    PD, PH, PW = _pad3(plan.padding, 0)
    DD, DH, DW = _pad3(plan.dilation, 1)
    is_max = plan.op == "max"
    fill = "-float('inf')" if is_max else "0.0"
    env = {plan.x.name: "v", **{lf.name: f"l_{lf.name}_val" for lf in plan.scalars}}
    pro, plast = plan.prologue.body(env, var_prefix="p_")
    eenv = {plan.pool_node: "res", **{lf.name: f"l_{lf.name}_val" for lf in plan.scalars}}
    eloads = []
    for lf in plan.epilogue.tensor_leaves:
        P = f"t_{lf.name}"
        eloads += [
            f"if {P}_MODE == 0:",
            f"    {P} = tl.load({P}_ptr + offs, mask=mask, other=0.0).to(tl.float32)",
            f"elif {P}_MODE == 1:",
            f"    {P} = tl.load({P}_ptr + nc % C, mask=mask, other=0.0).to(tl.float32)",
            "else:",
            f"    {P} = tl.load({P}_ptr).to(tl.float32)",
        ]
        eenv[lf.name] = P
    epi, elast = plan.epilogue.body(eenv, var_prefix="e_")
    inner = [
        "idd = od * SD - PD + kd * DD",
        "ih = oh * SH - PH + kh * DH",
        "iw = ow * SW - PW + kw * DW",
        "ok = mask & (idd >= 0) & (idd < D) & (ih >= 0) & (ih < H) & (iw >= 0) & (iw < W)",
        "v = tl.load(x_ptr + ((nc * D + idd) * H + ih) * W + iw, mask=ok, other=0.0).to(tl.float32)",
        *pro,
        f"v = tl.where(ok, {plast or 'v'}, {fill})",
    ]
    if is_max:
        inner.append("acc = tl.maximum(acc, v)")
    else:
        inner += ["acc += v"]
        if not plan.count_include_pad:
            inner.append("cnt += tl.where(ok, 1.0, 0.0)")
    if is_max:
        final = "res = acc"
    elif plan.count_include_pad:
        final = "res = acc / (KD * KH * KW)"
    else:
        final = "res = acc / cnt"
    scal = "".join(f", l_{lf.name}_val" for lf in plan.scalars)
    body = [
        "pid = tl.program_id(0)",
        "offs = pid.to(tl.int64) * BLOCK + tl.arange(0, BLOCK)",
        "mask = offs < total",
        "ow = offs % OW",
        "t = offs // OW",
        "oh = t % OH",
        "t = t // OH",
        "od = t % OD",
        "nc = t // OD",
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
    consts = ", ".join(
        f"{n}: tl.constexpr"
        for n in ("KD", "KH", "KW", "SD", "SH", "SW", "PD", "PH", "PW", "DD", "DH", "DW", "BLOCK")
    )
    tens = "".join(f", t_{lf.name}_ptr" for lf in plan.epilogue.tensor_leaves)
    modes = "".join(f", t_{lf.name}_MODE: tl.constexpr" for lf in plan.epilogue.tensor_leaves)
    kernel = (
        f"@triton.jit\ndef pool_kernel(x_ptr, out_ptr, total, C, D, H, W, OD, OH, OW{tens}{scal}, {consts}"
        f"{modes}):\n" + "\n".join("    " + x for x in body) + "\n"
    )
    nd = plan.nd
    scall = "".join(f", float(l_{lf.name})" for lf in plan.scalars)
    sargs = "".join(f", l_{lf.name}" for lf in plan.scalars)
    targs = "".join(f", t_{lf.name}" for lf in plan.epilogue.tensor_leaves)
    tcall = "".join(f", t_{lf.name}_c" for lf in plan.epilogue.tensor_leaves)
    tmodes = "".join(f", t_{lf.name}_MODE=t_{lf.name}_m" for lf in plan.epilogue.tensor_leaves)
    tprep = "".join(
        f"\n    t_{lf.name}_c, t_{lf.name}_m = _epi_mode(t_{lf.name}, out.shape)"
        for lf in plan.epilogue.tensor_leaves
    )
    block = int(params["BLOCK"])
    launcher = (
        _EPI_MODE
        + f"""
def launch_pool(x{targs}{sargs}, geometry=None):
    if x.dim() != {nd + 2}:
        raise ValueError(f"expected a {nd + 2}-d input, got {{tuple(x.shape)}}")
    x = x.contiguous()
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
    out = torch.empty(list(x.shape[:2]) + outs[{3 - nd}:], device=x.device, dtype=x.dtype)
    total = out.numel()
    if total == 0:
        return out
    OD, OH, OW = outs{tprep}
    pool_kernel[(triton.cdiv(total, {block}),)](x, out, total, x.shape[1], D, H, W, OD, OH, OW{tcall}{scall},
        KD=k[0], KH=k[1], KW=k[2], SD=s[0], SH=s[1], SW=s[2], PD=p[0], PH=p[1], PW=p[2],
        DD=d[0], DH=d[1], DW=d[2], BLOCK={block}{tmodes}, num_warps={int(params["num_warps"])})
    return out
"""
    )
    call = [plan.x.expr] + [lf.expr for lf in plan.epilogue.tensor_leaves] + [lf.expr for lf in plan.scalars]
    if plan.geometry:
        call.append(f"geometry={plan.geometry}")
    doc = f"EGG expert: pooling family ({plan.op}_pool{nd}d), algorithm {params['algorithm']}."
    fwd = f"return launch_pool({', '.join(call)})"
    if plan.conv_call:
        fwd = f"t_conv = {plan.conv_call}\n" + fwd
    return assemble(desc, ewops.HELPERS + "\n\n" + kernel, launcher, fwd, doc)


_EPI_MODE = '''
def _epi_mode(t, shape):
    """0 = the output's shape, 1 = per channel (dim 1), 2 = one element."""
    if t.numel() == 1:
        return t.reshape(1), 2
    dims = [1] * (len(shape) - t.dim()) + list(t.shape)
    if dims == list(shape):
        return t.expand(shape).contiguous(), 0
    if len(dims) == len(shape) and dims[1] == shape[1] and all(d == 1 for i, d in enumerate(dims) if i != 1):
        return t.reshape(-1).contiguous(), 1
    raise ValueError(f"pooling epilogue operand of shape {tuple(t.shape)} does not broadcast per channel")
'''
