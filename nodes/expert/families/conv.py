"""Convolution (1d/2d/3d, transposed, grouped, depthwise) as Triton kernels, plus an optional fused
elementwise epilogue (the libconv family reuses this generator for conv + elementwise tails).

Algorithms (the seeds):
  implicit-gemm        tap-major implicit GEMM: rows = output pixels (batch folded in), columns =
                       output channels of one group, K walked as (kernel tap, channel block); the
                       input tile of one tap is gathered straight from NCHW/NCDHW memory (zero
                       padding = masked loads). A 1x1 / stride-1 / unpadded conv takes a plain-GEMM
                       path (no spatial index math). fp32 uses TF32, 3xTF32 or ieee tl.dot.
  implicit-gemm-flatk  the same GEMM with K = (tap, channel) flattened into one index: no wasted
                       K lanes when channels per group are few (first layers, small groups)
  direct               one output pixel per lane, fp32 FMA over taps and the group's channels:
                       depthwise / tiny groups, where a GEMM tile would be mostly padding

Transposed convolutions are computed as a gather (each output pixel sums the input pixels whose
scatter lands on it). Outputs are split into stride phases (o = ph + s*j per dim): inside a phase
the valid kernel taps are a fixed arithmetic progression, so no masked-out tap ever reaches the
tensor cores, and the input index is a plain affine function of j. All phases share one launch
(PHASED: each program derives its phase from grid axis 1); a geometry with phases that have no
output rows launches once per phase.

All geometry (sizes, stride, padding, dilation, groups, output padding) is read at run time from
the module / call arguments; only the rank, the transposedness and the algorithm are baked in.
Weights are re-laid out per call (a copy of a few hundred KB, no arithmetic) as (groups, taps,
C_out/g, C_in/g): K-major B tiles, which tf32/3xTF32 tensor-core MMAs need (with the PyTorch layout
the kernel ran about 2x slower on an H200). The input is gathered from NCHW directly, or from a
channels-last copy (CHANNELS_LAST, which also writes the output channels-last): channel runs are
contiguous, so shared memory fills with 16-byte async copies (4-byte ones from NCHW, seen in the
sm_90 PTX) and the output tile is stored in 16-byte vectors. With one group, channels that are
not a multiple of 16 (47) are padded with zeros in that copy and in the weights where that adds
at most a quarter: only a pixel stride divisible by 16 lets Triton prove 16-byte runs.

Precision (PRECISION, shown in the candidate's params): the first GEMM seed is TF32 with
channels-last operands, as PyTorch's own fp32 convolutions are TF32 (cuDNN,
torch.backends.cudnn.allow_tf32 is True by default), so the checker's bar (4x the reference's own
error) is TF32-sized on a GPU; the other seeds are 3xTF32, and a mismatch steps tf32 ->
tf32x3-bsplit -> ieee. The 3xTF32 seeds split the weights once per call ("tf32x3-bsplit", as the
gemm family's split-k does: a Triton kernel writes the TF32 high part and the fp32 remainder in
the kernel's weight layout) and only the gathered input tile in registers: Triton's own tf32x3
splits both tiles every K step and sends B's halves back through shared memory. "tf32x3" stays
a choice. TF32 operands are rounded to nearest first, as cuDNN's are (A in the kernel, the
weights in the launcher): fed fp32, the tensor cores truncate, a bias towards zero that put the first seed
outside the bar on positive inputs. (The CPU interpreter computes every tl.dot in fp32: precision
is judged on the GPU, and the rounding is done there only.)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from graph.records import OpNode, TaskDescription

from .. import ewops
from ..chain import Chain, collect_chain, leaf_launch_args
from ..graphview import GraphView, Unsupported, assemble, is_node
from ..kernelfiles import kernel_source
from .gemm import BSPLIT_PRECISION, bsplit_dots, dot_tile_problem, grouped_tiles

CONV_OPS = {"conv1d", "conv2d", "conv3d"}
CONVT_OPS = {"conv_transpose1d", "conv_transpose2d", "conv_transpose3d"}

# Functional signatures (positional order) of torch.nn.functional / torch convs.
_FWD_ARGS = ["input", "weight", "bias", "stride", "padding", "dilation", "groups"]
_TRANSPOSED_ARGS = ["input", "weight", "bias", "stride", "padding", "output_padding", "groups", "dilation"]
_DEFAULT_ARG = {
    "bias": "None",
    "stride": "1",
    "padding": "0",
    "dilation": "1",
    "groups": "1",
    "output_padding": "0",
}

_DIMS = ("d", "h", "w")


@dataclass
class ConvPlan:
    op: str
    nd: int
    transposed: bool
    conv_node: str
    x_expr: str
    w_expr: str
    b_expr: str
    stride: str
    padding: str
    dilation: str
    groups: str
    output_padding: str
    epilogue: Chain
    out_dtype: str
    # For choosing algorithms only (the generated code reads the real values at run time).
    cpg: int
    cpo: int
    taps: int
    dtype: str


def operand_expr(view: GraphView, a: Any, *, as_list: bool = False) -> str:
    """Python source for a conv argument: a forward argument / parameter, or a literal (lists as
    tuples, or as lists with `as_list`)."""
    if is_node(a):
        lf = view.leaves.get(view.resolve(a["node"]))
        if lf is None:
            raise Unsupported("conv operand is computed, not an argument or parameter")
        return lf.expr
    if isinstance(a, list):
        inner = ", ".join(operand_expr(view, x, as_list=as_list) for x in a)
        return f"[{inner}]" if as_list else "(" + inner + ("," if len(a) == 1 else "") + ")"
    if isinstance(a, dict):
        raise Unsupported(f"conv argument {a!r}")
    return repr(a)


def _ints(v: Any, nd: int) -> list[int]:
    if isinstance(v, (list, tuple)):
        vals = [int(x) for x in v]
        return vals if len(vals) == nd else vals[:1] * nd
    if isinstance(v, int):
        return [v] * nd
    return [1] * nd


def plan_conv(view: GraphView, c: OpNode, epi_nodes: list[OpNode]) -> ConvPlan:
    """A ConvPlan for conv node `c` followed by the elementwise `epi_nodes` (may be empty)."""
    transposed = c.op in CONVT_OPS
    nd = int(c.op[-2])
    shape = c.shape or []
    if len(shape) not in (nd + 1, nd + 2):
        raise Unsupported(f"{c.op} output of rank {len(shape)}")
    for n in epi_nodes:
        if n.shape != c.shape:
            raise Unsupported(f"{c.op} epilogue {n.op} changes the shape")
    epilogue = collect_chain(view, epi_nodes, internal={c.name})
    if c.kind == "call_module":
        if len(c.args) != 1 or c.kwargs or not is_node(c.args[0]):
            raise Unsupported(f"{c.op} module called with extra arguments (output_size)")
        mode = c.module_attrs.get("padding_mode", "zeros")
        if mode != "zeros":
            raise Unsupported(f"{c.op} with padding_mode={mode!r} is not covered by the conv family")
        m = f"self.{c.target}"
        x = operand_expr(view, c.args[0])
        w, b = f"{m}.weight", f"{m}.bias"
        hyper = {k: f"{m}.{k}" for k in ("stride", "padding", "dilation", "groups", "output_padding")}
        a = c.module_attrs
        groups = int(a.get("groups", 1) or 1)
        cin, cout = int(a.get("in_channels", 0) or 0), int(a.get("out_channels", 0) or 0)
        ks = _ints(a.get("kernel_size", 1), nd)
        dtype = c.dtype or "float32"
    elif c.kind == "call_function" and c.target.startswith("torch."):
        names = _TRANSPOSED_ARGS if transposed else _FWD_ARGS
        if len(c.args) > len(names) or set(c.kwargs) - set(names):
            raise Unsupported(f"{c.op} call arguments")
        vals = dict(zip(names, c.args, strict=False)) | dict(c.kwargs)
        if "input" not in vals or "weight" not in vals:
            raise Unsupported(f"{c.op} without input/weight")
        if not is_node(vals["input"]) or not is_node(vals["weight"]):
            raise Unsupported(f"{c.op} with a constant input or weight")
        x, w = operand_expr(view, vals["input"]), operand_expr(view, vals["weight"])
        b = operand_expr(view, vals["bias"]) if vals.get("bias") is not None else "None"
        hyper = {
            k: (operand_expr(view, vals[k]) if k in vals else _DEFAULT_ARG[k])
            for k in _DEFAULT_ARG
            if k != "bias"
        }
        wnode = view.nodes.get(view.resolve(vals["weight"]["node"]))
        wshape = (wnode.shape if wnode else None) or [0, 0, *([1] * nd)]
        groups = vals.get("groups", 1)
        groups = groups if isinstance(groups, int) and groups > 0 else 1
        if transposed:
            cin, cout = int(wshape[0]), int(wshape[1]) * groups
        else:
            cin, cout = int(wshape[1]) * groups, int(wshape[0])
        ks = [int(k) for k in wshape[2:]] or [1] * nd
        dtype = c.dtype or "float32"
    else:
        raise Unsupported(f"{c.op} called as {c.target}")
    out_node = epi_nodes[-1] if epi_nodes else c
    taps = 1
    for k in ks:
        taps *= k
    return ConvPlan(
        op=c.op,
        nd=nd,
        transposed=transposed,
        conv_node=c.name,
        x_expr=x,
        w_expr=w,
        b_expr=b,
        stride=hyper["stride"],
        padding=hyper["padding"],
        dilation=hyper["dilation"],
        groups=hyper["groups"],
        output_padding=hyper["output_padding"],
        epilogue=epilogue,
        out_dtype=out_node.dtype or dtype,
        cpg=max(cin // max(groups, 1), 1),
        cpo=max(cout // max(groups, 1), 1),
        taps=taps,
        dtype=dtype,
    )


def match(view: GraphView) -> ConvPlan | None:
    """A lone convolution (conv + elementwise tails are the libconv family's, which reuses
    plan_conv/generate for its implicit-GEMM seeds)."""
    nodes = view.compute_nodes()
    if len(nodes) != 1 or nodes[0].op not in CONV_OPS | CONVT_OPS:
        return None
    return plan_conv(view, nodes[0], [])


def algorithms(plan: ConvPlan) -> list[str]:
    if plan.cpo < 8 or (plan.cpg == 1 and plan.cpo < 16):
        # Depthwise / tiny groups: a GEMM tile would be mostly padding columns.
        return ["direct", "implicit-gemm-flatk"]
    if plan.cpg < 16:
        return ["implicit-gemm-flatk", "implicit-gemm"]
    if plan.taps == 1:
        return ["implicit-gemm"]  # pointwise: both variants are the same plain GEMM
    return ["implicit-gemm", "implicit-gemm-flatk"]


def defaults(plan: ConvPlan, algorithm: str) -> dict[str, Any]:
    if algorithm == "direct":
        return {"BLOCK": 1024, "num_warps": 4}
    # The first GEMM seed runs TF32, like PyTorch's own fp32 convolutions (cuDNN with
    # torch.backends.cudnn.allow_tf32, True by default): the checker's bar, 4x the reference's own
    # error, is then TF32-sized. The other seeds keep 3xTF32 (fp32-level accuracy), so a reference
    # that did not use TF32 still has a passing seed; a mismatch steps tf32 -> tf32x3-bsplit -> ieee.
    tf32 = plan.dtype == "float32" and algorithm == algorithms(plan)[0]
    prec = ("tf32" if tf32 else BSPLIT_PRECISION) if plan.dtype == "float32" else "default"
    # 128x64x32 tiles, 3 stages, 4 warps, NCHW input: the best all-round point of an H200 sweep
    # over the suite's convs (3x3, 3x3x3, transposed 2d/3d, 1x1) at fp32 / 3xTF32; BLOCK_N and
    # BLOCK_K are capped to the channels per group at launch. With TF32 the operand loads weigh
    # more: channels-last input (16-byte async copies of channel runs into the K-major layout
    # the TF32 MMA reads) where the channels per group allow, and 128-wide channel tiles (8 warps)
    # for wide outputs.
    wide = plan.cpo >= 128
    out: dict[str, Any] = {
        "BLOCK_M": 128,
        "BLOCK_N": 128 if wide and tf32 else 64,
        "BLOCK_K": 32,
        "GROUP_M": 8,
        "num_stages": 3,
        "num_warps": 8 if wide and tf32 else 4,
        "PRECISION": prec,
        # (a one-group input is padded with zero channels where _PAD_CHANNELS says so)
        "CHANNELS_LAST": tf32 and plan.cpg >= 16 and (plan.cpg % 4 == 0 or _pad_channels(plan.cpg)),
    }
    if algorithm == "implicit-gemm-flatk" and plan.cpg * plan.taps <= 16:
        out["BLOCK_K"] = 16
    return out


def valid(plan: ConvPlan, params: dict[str, Any]) -> str | None:
    if params["algorithm"] == "direct":
        return None if params.get("BLOCK", 512) >= 32 else "BLOCK below one warp"
    return dot_tile_problem(params)


def space(plan: ConvPlan, params: dict[str, Any], stage: str, sp: dict[str, list]) -> dict[str, list]:
    from ..spaces import SPACES

    if params["algorithm"] == "direct":
        return SPACES["conv-direct"].get(stage, {})
    return SPACES["conv"].get(stage, {})


def refinements(plan: ConvPlan, params: dict[str, Any]) -> list[tuple[str, dict[str, Any], str]]:
    if params["algorithm"] == "direct" or plan.dtype != "float32":
        return []
    if params.get("PRECISION") == "ieee":
        return [
            (
                "refine:3xtf32",
                dict(params, PRECISION="tf32x3"),
                "3xTF32 tensor-core dot keeps fp32 accuracy at several times the fp32 FMA rate",
            )
        ]
    if params.get("PRECISION") in ("tf32x3", BSPLIT_PRECISION):
        # Measured on the H200 (2026-12-01): the 3xTF32 kernels ran at 0.54x (3x3) and 0.78x
        # (1x1) of eager, whose cuDNN convolutions are TF32 (PyTorch's default for convolutions,
        # unlike matmuls). The checker's bar is 4x the reference's own error, so it decides.
        return [
            (
                "refine:tf32-like-the-reference",
                dict(params, PRECISION="tf32"),
                "one TF32 MMA instead of three: PyTorch runs fp32 convolutions in TF32 by default "
                "(torch.backends.cudnn.allow_tf32), so the reference's own error may admit it",
            )
        ]
    return []


def safer(plan: ConvPlan, params: dict[str, Any], rule: str) -> list[tuple[str, dict[str, Any], str]]:
    if params["algorithm"] != "direct" and params.get("PRECISION") == "tf32" and "mismatch" in rule:
        return [
            (
                "fix:mismatch:tf32x3",
                dict(params, PRECISION=BSPLIT_PRECISION),
                "3xTF32 dot products: this reference was not computed in TF32, or not closely enough",
            )
        ]
    if (
        params["algorithm"] != "direct"
        and params.get("PRECISION") in ("tf32x3", BSPLIT_PRECISION)
        and "mismatch" in rule
    ):
        return [
            (
                "fix:mismatch:ieee",
                dict(params, PRECISION="ieee"),
                "exact fp32 dot products in case 3xTF32 rounding exceeds the tolerance",
            )
        ]
    return []


# ---------------------------------------------------------------------------------------------
# code generation
# ---------------------------------------------------------------------------------------------


def _ind(lines: list[str], n: int = 1) -> list[str]:
    return ["    " * n + ln if ln else ln for ln in lines]


def _epi_sig(plan: ConvPlan) -> list[str]:
    out = []
    for lf in plan.epilogue.tensor_leaves:
        p = f"l_{lf.name}"
        out += [f"{p}_ptr", f"{p}_sn", f"{p}_sc", f"{p}_sp"]
    out += [f"l_{lf.name}_val" for lf in plan.epilogue.scalar_leaves]
    return out


def _epilogue(plan: ConvPlan, acc: str, row: str, col: str, mask: str) -> tuple[list[str], str]:
    """Epilogue statements; `row(stride_n, stride_p)` / `col(stride_c)` give the offset parts."""
    env = {plan.conv_node: acc}
    lines: list[str] = []
    for lf in plan.epilogue.tensor_leaves:
        p = f"l_{lf.name}"
        off = row.format(sn=f"{p}_sn", sp=f"{p}_sp") + " + " + col.format(sc=f"{p}_sc")
        lines.append(f"x_{lf.name} = tl.load({p}_ptr + {off}, mask={mask}, other=0.0).to(tl.float32)")
        env[lf.name] = f"x_{lf.name}"
    for lf in plan.epilogue.scalar_leaves:
        env[lf.name] = f"l_{lf.name}_val"
    body, last = plan.epilogue.body(env)
    return lines + body, last or acc


# Channels per group worth padding with zeros to a multiple of 16 for a channels-last input
# (the launcher's condition, in its variable `cpg`): not one already, at most a quarter more.
_PAD_CHANNELS = "cpg % 16 and cpg + (-cpg) % 16 <= cpg + cpg // 4"


def _cl_copy(plan: ConvPlan, params: dict[str, Any]) -> bool:
    """Whether an implicit-GEMM candidate's launcher copies its 2-D/3-D input channels-last with
    to_channels_last (and may pad its channels): the launcher and the helpers it ships agree."""
    return params["algorithm"] != "direct" and bool(params.get("CHANNELS_LAST")) and plan.nd > 1


def _pad_channels(cpg: int) -> bool:
    """_PAD_CHANNELS for the defaults (tests/expert/test_expert_conv.py holds the two equal)."""
    return cpg % 16 != 0 and cpg + (-cpg) % 16 <= cpg + cpg // 4


_PER_DIM = ("IN", "OUT", "J", "PH", "OS", "IS", "KN", "KF", "KSTEP", "KFULL", "OFF0", "OFFSTEP", "PAD", "DIL")
# Arguments that change from one stride-phase launch to the next: not specialized, so the phases
# of a transposed conv share one compiled kernel.
_PHASE_ARGS = ("J", "PH", "KN", "KF", "OFF0")


def _input_index(U: Any, ok: str, row: str, col: str) -> tuple[list[str], str, str]:
    """Lines computing the input coordinate i_x of every spatial dim X in U for one tap (the
    output-pixel base `ib_x` indexed with `row`, the tap offset with `col`), the in-bounds mask
    (zero padding) added to `ok`, and the flattened spatial offset."""
    lines = []
    for X in U:
        x = X.lower()
        lines.append(f"i_{x} = ib_{x}{row} + (OFF0_{X} + t_{x} * OFFSTEP_{X}){col}")
        ok += f" & (i_{x} >= 0) & (i_{x} < IN_{X})"
    sp = f"i_{U[0].lower()}"
    for X in U[1:]:
        sp = f"({sp} * IN_{X} + i_{X.lower()})"
    return lines, ok, sp


def _igemm_kernel(plan: ConvPlan, flatk: bool, precision: str | None) -> tuple[str, list[str]]:
    U = [d.upper() for d in _DIMS[3 - plan.nd :]]
    dims = [f"{a}_{X}" for X in U for a in _PER_DIM]
    nospec = ["M"] + [f"{a}_{X}" for X in U for a in _PHASE_ARGS]
    bsplit = precision == BSPLIT_PRECISION
    prec = f', input_precision="{precision}"' if precision and not bsplit else ""
    # the group's weights: offset of group g in the (groups, taps, C_out/g, C_in/g) layout
    w_group = "g * (CPG * CPO) * " + " * ".join(f"KFULL_{X}" for X in U)
    # TF32 as the reference's cuDNN does it, rounded to nearest, both tiles here (RNA: on a GPU).
    # Fed unrounded, the tensor cores truncate. Not in the launcher: torch bit ops there are
    # elementwise PyTorch compute, which policy `mixed` rejects.
    rna = ["if RNA:", "    a = tf32_round(a)", "    b = tf32_round(b)"] if precision == "tf32" else []
    sig = (
        [
            "x_ptr",
            "w_ptr",
            *(["wl_ptr"] if bsplit else []),
            "out_ptr",
            "bias_ptr",
            "NB",
            "NGROUPS",
            "M",
            "P_OUT",
            "CPG",
            "CPO",
            "x_sn",
            "x_sc",
            "x_sp",
            "o_sn",
            "o_sc",
            "o_sx",
        ]
        + dims
        + _epi_sig(plan)
    )
    consts = [
        "HAS_BIAS",
        "POINTWISE",
        "FOLD_N",
        "EVEN_C",
        "CL",
        "RNA",
        "BLOCK_M",
        "BLOCK_N",
        "BLOCK_K",
        "GROUP_M",
        "PHASED",
    ]
    # PHASED: every stride phase of a transposed conv in one launch (grid axis 1 = phase x group).
    # Each program derives its phase's J, PH, KN, KF and OFF0 from the phase index as
    # _conv_geometry does (the first tap k < min(KSTEP, KFULL) whose input offset the stride
    # divides); M is the largest phase's rows (the tile order), a smaller phase's extra row tiles
    # are masked off, and a phase that reads no tap writes bias and epilogue only.
    phase = [
        "    g = tl.program_id(1) % NGROUPS",
        "    q = tl.program_id(1) // NGROUPS",
    ]
    for X in reversed(U):
        x = X.lower()
        phase += [
            f"    PH_{X} = q % OS_{X}",
            f"    q = q // OS_{X}",
            f"    J_{X} = (OUT_{X} - PH_{X} + OS_{X} - 1) // OS_{X}",
            f"    kf_{x} = PH_{X} * 0 - 1",
            f"    for k_{x} in range(0, tl.minimum(KSTEP_{X}, KFULL_{X})):",
            f"        kf_{x} = tl.where((kf_{x} < 0) & ((PH_{X} + PAD_{X} - k_{x} * DIL_{X}) % OS_{X} == 0), k_{x}, kf_{x})",
            f"    KN_{X} = tl.where(kf_{x} >= 0, (KFULL_{X} - kf_{x} + KSTEP_{X} - 1) // KSTEP_{X}, 0)",
            f"    KF_{X} = tl.maximum(kf_{x}, 0)",
            f"    OFF0_{X} = tl.where(kf_{x} >= 0, (PH_{X} + PAD_{X} - KF_{X} * DIL_{X}) // OS_{X}, 0)",
        ]
    phase.append("    M_PH = NB * " + " * ".join(f"J_{X}" for X in U))
    L = [
        "pid = tl.program_id(0)",
        "if PHASED:",
        *phase,
        "else:",
        "    g = tl.program_id(1)",
        "    M_PH = M",
        *grouped_tiles("CPO"),  # the weights of the group are the B operand
        "m_ok = rm < M_PH",
        "n_ok = rn < CPO",
        f"w_base = w_ptr + {w_group}",
        *([f"wl_base = wl_ptr + {w_group}"] if bsplit else []),
        "acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)",
    ]

    def b_load(ptrs: str, mask: str) -> list[str]:
        """The B tile's load; under tf32x3-bsplit its fp32 remainder (same layout) beside it."""
        out = [f"b = tl.load({ptrs}, mask={mask}, other=0.0)"]
        if bsplit:
            out.append(f"bl = tl.load(wl_base + b_off, mask={mask}, other=0.0)")
        return out

    # one K step: a TF32/IEEE dot, or gemm's three TF32 products with A split in registers
    k_step = (
        [d.strip() for d in bsplit_dots(fresh=True)] if bsplit else [*rna, f"acc = tl.dot(a, b, acc{prec})"]
    )
    # --- pointwise: input pixel == output pixel, K = channels only ---
    pw = [
        "if FOLD_N:",
        "    o_sp = rm % P_OUT",
        "    nn = rm // P_OUT",
        "else:",
        "    o_sp = rm",
        "    nn = tl.program_id(2)",
        "if CL:",
        "    x_row = x_ptr + nn.to(tl.int64) * x_sn + g * CPG + o_sp * x_sp",
        "else:",
        "    x_row = x_ptr + nn.to(tl.int64) * x_sn + (g * CPG) * x_sc + o_sp",
        "for c0 in range(0, CPG, BLOCK_K):",
        "    ci = c0 + rk",
        "    if CL:",
        "        a_ptrs = x_row[:, None] + ci[None, :]",
        "    else:",
        "        a_ptrs = x_row[:, None] + ci[None, :] * x_sc",
        "    b_off = rn[None, :] * CPG + ci[:, None]",
        "    b_ptrs = w_base + b_off",
        "    if EVEN_C:",
        "        a = tl.load(a_ptrs, mask=m_ok[:, None], other=0.0)",
        *_ind(b_load("b_ptrs", "n_ok[None, :]"), 2),
        "    else:",
        "        c_ok = ci < CPG",
        "        a = tl.load(a_ptrs, mask=m_ok[:, None] & c_ok[None, :], other=0.0)",
        *_ind(b_load("b_ptrs", "c_ok[:, None] & n_ok[None, :]"), 2),
        *_ind(k_step),
    ]
    # --- general: rows decompose into (n, j_d, j_h, j_w) of this stride phase ---
    gen = ["rmc = tl.where(m_ok, rm, 0)", "t = rmc"]
    for X in reversed(U):
        x = X.lower()
        gen += [f"j_{x} = t % J_{X}", f"t = t // J_{X}", f"ib_{x} = j_{x} * IS_{X}"]
    gen.append("nn = t + tl.program_id(2)")
    osp = f"(PH_{U[0]} + OS_{U[0]} * j_{U[0].lower()})"
    for X in U[1:]:
        osp = f"({osp} * OUT_{X} + PH_{X} + OS_{X} * j_{X.lower()})"
    gen.append(f"o_sp = {osp}")
    gen.append("x_row = x_ptr + nn.to(tl.int64) * x_sn + (g * CPG) * x_sc")
    ntap = " * ".join(f"KN_{X}" for X in U)

    def tap_walk(tap: str, suffix: str) -> list[str]:
        out = []
        rest = tap
        for i, X in enumerate(reversed(U)):
            x = X.lower()
            if i == len(U) - 1:
                out.append(f"t_{x}{suffix} = {rest}")
            else:
                out.append(f"t_{x}{suffix} = {rest} % KN_{X}")
                out.append(f"r_{x}{suffix} = {rest} // KN_{X}")
                rest = f"r_{x}{suffix}"
        wt = f"(KF_{U[0]} + t_{U[0].lower()}{suffix} * KSTEP_{U[0]})"
        for X in U[1:]:
            wt = f"({wt} * KFULL_{X} + KF_{X} + t_{X.lower()}{suffix} * KSTEP_{X})"
        out.append(f"wtap{suffix} = {wt}")
        return out

    if not flatk:
        gen += ["NCB = tl.cdiv(CPG, BLOCK_K)", f"for it in range(0, {ntap} * NCB):"]
        body = ["tap = it // NCB", "ci = (it - tap * NCB) * BLOCK_K + rk", *tap_walk("tap", "")]
        lines, ok, sp = _input_index(U, "m_ok", "", "")
        body += lines
        body += [
            f"ok = {ok}",
            f"sp = {sp}",
            "if CL:",
            "    a_ptrs = x_row[:, None] + (sp[:, None] * x_sp + ci[None, :])",
            "else:",
            "    a_ptrs = x_row[:, None] + (sp[:, None] + ci[None, :] * x_sc)",
            "b_off = (wtap * CPO + rn[None, :]) * CPG + ci[:, None]",
            "b_ptrs = w_base + b_off",
            "if EVEN_C:",
            "    a = tl.load(a_ptrs, mask=ok[:, None], other=0.0)",
            *_ind(b_load("b_ptrs", "n_ok[None, :]")),
            "else:",
            "    c_ok = ci < CPG",
            "    a = tl.load(a_ptrs, mask=ok[:, None] & c_ok[None, :], other=0.0)",
            *_ind(b_load("b_ptrs", "c_ok[:, None] & n_ok[None, :]")),
            *k_step,
        ]
        gen += _ind(body)
    else:
        gen += [f"KTOT = {ntap} * CPG", "for k0 in range(0, KTOT, BLOCK_K):"]
        body = [
            "kk = k0 + rk",
            "k_ok = kk < KTOT",
            "tap = kk // CPG",
            "ci = kk - tap * CPG",
            *tap_walk("tap", ""),
        ]
        lines, ok, sp = _input_index(U, "m_ok[:, None] & k_ok[None, :]", "[:, None]", "[None, :]")
        body += lines
        body += [
            f"sp = {sp}",
            "if CL:",
            "    a_ptrs = x_row[:, None] + (sp * x_sp + ci[None, :])",
            "else:",
            "    a_ptrs = x_row[:, None] + (sp + ci[None, :] * x_sc)",
            f"a = tl.load(a_ptrs, mask={ok}, other=0.0)",
            "b_off = (wtap[:, None] * CPO + rn[None, :]) * CPG + ci[:, None]",
            *b_load("w_base + b_off", "k_ok[:, None] & n_ok[None, :]"),
            *k_step,
        ]
        gen += _ind(body)
    L += ["if POINTWISE:", *_ind(pw), "else:", *_ind(gen)]
    epi, last = _epilogue(
        plan,
        "acc",
        "(nn.to(tl.int64) * {sn} + o_sp * {sp})[:, None]",
        "(co * {sc})[None, :]",
        "cmask",
    )
    L += [
        "co = g * CPO + rn",
        "cmask = m_ok[:, None] & n_ok[None, :]",
        "if HAS_BIAS:",
        "    acc = acc + tl.load(bias_ptr + co, mask=n_ok, other=0.0).to(tl.float32)[None, :]",
        *epi,
        # o_sx: the output's pixel stride (1 for NCHW, the channel count for channels-last)
        "o_ptrs = (out_ptr + nn.to(tl.int64) * o_sn + o_sp * o_sx)[:, None] + (co * o_sc)[None, :]",
        f"tl.store(o_ptrs, {last}.to(out_ptr.dtype.element_ty), mask=cmask)",
    ]
    head = f"@triton.jit(do_not_specialize={nospec!r})\n"
    params = sig + [f"{c}: tl.constexpr" for c in consts]
    src = head + "def conv_igemm_kernel(\n" + "".join(f"    {p},\n" for p in params) + "):\n"
    return src + "\n".join(_ind(L)) + "\n", sig


def _direct_kernel(plan: ConvPlan) -> tuple[str, list[str]]:
    U = [d.upper() for d in _DIMS[3 - plan.nd :]]
    dims = [f"{a}_{X}" for X in U for a in ("IN", "OUT", "S", "PAD", "DIL")]
    sig = [
        "x_ptr",
        "w_ptr",
        "out_ptr",
        "bias_ptr",
        "P_OUT",
        "NPB",
        "CPG",
        "CPO",
        "COUT",
        "x_sn",
        "x_sc",
        "o_sn",
        "o_sc",
        *dims,
        *_epi_sig(plan),
    ]
    consts = [f"K_{X}" for X in U] + ["HAS_BIAS", "TRANSPOSED", "BLOCK"]
    L = [
        "pid = tl.program_id(0)",
        "pid_p = pid % NPB",
        "pid_nc = pid // NPB",
        "nn = (pid_nc // COUT).to(tl.int64)",
        "co = pid_nc % COUT",
        "g = co // CPO",
        "p = pid_p * BLOCK + tl.arange(0, BLOCK)",
        "p_ok = p < P_OUT",
        "t = p",
    ]
    for X in reversed(U):
        x = X.lower()
        L += [f"o_{x} = t % OUT_{X}", f"t = t // OUT_{X}"]
    L += [
        "x_base = x_ptr + nn * x_sn + (g * CPG) * x_sc",
        "KS = " + " * ".join(f"K_{X}" for X in U),
        "acc = tl.zeros((BLOCK,), dtype=tl.float32)",
        "for ci in range(0, CPG):",
    ]
    body = [
        "if TRANSPOSED:",
        "    w_row = w_ptr + ((g * CPG + ci) * CPO + (co - g * CPO)) * KS",
        "else:",
        "    w_row = w_ptr + (co * CPG + ci) * KS",
        "x_c = x_base + ci * x_sc",
    ]
    # Nested static loops over the kernel taps; per dim the coordinate and validity are computed
    # at the loop level that owns them.
    inner: list[str] = []
    depth = 0
    tap = "0"
    sp = ""
    okv = "p_ok"
    for X in U:
        x = X.lower()
        blk = [
            f"for k_{x} in tl.static_range(K_{X}):",
            "    if TRANSPOSED:",
            f"        q_{x} = o_{x} + PAD_{X} - k_{x} * DIL_{X}",
            f"        qc_{x} = tl.where(q_{x} >= 0, q_{x}, 0)",
            f"        i_{x} = qc_{x} // S_{X}",
            f"        ok_{x} = {okv} & (q_{x} >= 0) & (qc_{x} % S_{X} == 0) & (i_{x} < IN_{X})",
            "    else:",
            f"        i_{x} = o_{x} * S_{X} - PAD_{X} + k_{x} * DIL_{X}",
            f"        ok_{x} = {okv} & (i_{x} >= 0) & (i_{x} < IN_{X})",
        ]
        inner += _ind(blk, depth)
        tap = f"({tap}) * K_{X} + k_{x}" if tap != "0" else f"k_{x}"
        sp = f"({sp}) * IN_{X} + i_{x}" if sp else f"i_{x}"
        okv = f"ok_{x}"
        depth += 1
    inner += _ind(
        [
            f"wv = tl.load(w_row + ({tap})).to(tl.float32)",
            f"xv = tl.load(x_c + ({sp}), mask={okv}, other=0.0).to(tl.float32)",
            "acc += xv * wv",
        ],
        depth,
    )
    L += _ind(body + inner)
    epi, last = _epilogue(plan, "acc", "nn * {sn} + p * {sp}", "co * {sc}", "p_ok")
    L += [
        "if HAS_BIAS:",
        "    acc = acc + tl.load(bias_ptr + co).to(tl.float32)",
        *epi,
        f"tl.store(out_ptr + nn * o_sn + co * o_sc + p, {last}.to(out_ptr.dtype.element_ty), mask=p_ok)",
    ]
    params = sig + [f"{c}: tl.constexpr" for c in consts]
    src = "@triton.jit\ndef conv_direct_kernel(\n" + "".join(f"    {p},\n" for p in params) + "):\n"
    return src + "\n".join(_ind(L)) + "\n", sig


_GEOMETRY = '''
def _conv_tuple(v, nd):
    if isinstance(v, (list, tuple)):
        v = [int(a) for a in v]
        return tuple(v) if len(v) == nd else tuple(v[:1] * nd)
    return (int(v),) * nd


def _conv_geometry(xs, ks, stride, padding, dilation, output_padding, transposed):
    """Output sizes and the launches: one per stride phase, each a tuple over dims of
    (PH, J, OS, IS, KN, KF, KSTEP, OFF0, OFFSTEP): output o = PH + OS*j (j < J) reads input
    i = IS*j + OFF0 + t*OFFSTEP through kernel tap k = KF + t*KSTEP, t < KN."""
    import itertools
    import math

    nd = len(ks)
    s = _conv_tuple(stride, nd)
    d = _conv_tuple(dilation, nd)
    if isinstance(padding, str):
        if padding == "valid":
            pl, tot = (0,) * nd, (0,) * nd
        elif padding == "same":
            tot = tuple(d[i] * (ks[i] - 1) for i in range(nd))
            pl = tuple(t // 2 for t in tot)
        else:
            raise ValueError(f"padding {padding!r}")
    else:
        pl = _conv_tuple(padding, nd)
        tot = tuple(2 * p for p in pl)
    if transposed:
        op = _conv_tuple(output_padding, nd)
        outs = tuple((xs[i] - 1) * s[i] - tot[i] + d[i] * (ks[i] - 1) + op[i] + 1 for i in range(nd))
    else:
        outs = tuple((xs[i] + tot[i] - d[i] * (ks[i] - 1) - 1) // s[i] + 1 for i in range(nd))
    per_dim = []
    for i in range(nd):
        if not transposed:
            per_dim.append([(0, outs[i], 1, s[i], ks[i], 0, 1, -pl[i], d[i])])
            continue
        step = s[i] // math.gcd(d[i], s[i])
        opts = []
        for ph in range(s[i]):
            j = -(-(outs[i] - ph) // s[i])
            if j <= 0:
                continue
            kf = next((k for k in range(min(step, ks[i])) if (ph + pl[i] - k * d[i]) % s[i] == 0), None)
            if kf is None:
                opts.append((ph, j, s[i], 1, 0, 0, 1, 0, 0))
            else:
                kn = len(range(kf, ks[i], step))
                off0 = (ph + pl[i] - kf * d[i]) // s[i]
                opts.append((ph, j, s[i], 1, kn, kf, step, off0, -(step * d[i]) // s[i]))
        per_dim.append(opts)
    return s, pl, d, outs, list(itertools.product(*per_dim))


def _conv_leaf(t, out):
    """(tensor, stride_n, stride_c, stride_pixel) of an epilogue operand broadcast to the output;
    spatial dims must collapse to one pixel stride (else a contiguous copy is made)."""
    e = t.expand(out.shape)
    sp = [(st, n) for st, n in zip(e.stride()[2:], out.shape[2:]) if n > 1]
    if all(st == 0 for st, _ in sp):
        return e, e.stride(0), e.stride(1), 0
    want, ok = 1, True
    for st, n in reversed(sp):
        ok = ok and st == want
        want *= n
    if not ok:
        e = e.contiguous()
    return e, e.stride(0), e.stride(1), 1


def _phase_dims(xs, outs, ks, s, pl, dl):
    """The per-dim arguments of the one launch of all stride phases (PHASED): the kernel derives
    each phase's J, PH, KN, KF and OFF0 from its index (passed as 0 here), as _conv_geometry does."""
    import math

    dims = []
    for i in range(len(ks)):
        step = s[i] // math.gcd(dl[i], s[i])
        dims += [xs[i], outs[i], 0, 0, s[i], 1, 0, 0, step, ks[i], 0, -(step * dl[i]) // s[i], pl[i], dl[i]]
    return dims
'''


_TORCH_DTYPES = {"float32", "float16", "bfloat16", "float64"}


def _launcher(plan: ConvPlan, params: dict[str, Any], sig: list[str]) -> str:
    algo = params["algorithm"]
    U = [d.upper() for d in _DIMS[3 - plan.nd :]]
    tensors = [f"l_{lf.name}" for lf in plan.epilogue.tensor_leaves]
    scal = [f"l_{lf.name}" for lf in plan.epilogue.scalar_leaves]
    args = ["x", "w", "bias", "stride", "padding", "dilation", "groups", "output_padding", *tensors, *scal]
    out_dtype = f"torch.{plan.out_dtype}" if plan.out_dtype in _TORCH_DTYPES else "x.dtype"
    L = [
        f"def launch_conv({', '.join(args)}):",
        "    import math",
        f"    unbatched = x.dim() == {plan.nd + 1}",
        "    if unbatched:",
        "        x = x.unsqueeze(0)",
        "    x = x.contiguous()",
        "    w = w.contiguous()",
        "    nb, cin = x.shape[0], x.shape[1]",
        "    xs, ks = tuple(x.shape[2:]), tuple(w.shape[2:])",
        "    G = int(groups)",
        f"    s, pl, dl, outs, launches = _conv_geometry(xs, ks, stride, padding, dilation, output_padding, "
        f"{plan.transposed})",
    ]
    if plan.transposed:
        L += ["    cpg, cpo = cin // G, w.shape[1]"]
    else:
        L += ["    cpg, cpo = w.shape[1], w.shape[0] // G"]
    L += [
        "    cout = cpo * G",
        "    if cpg * G != cin:",
        "        raise ValueError(f'input has {cin} channels, the weight expects {cpg * G}')",
        (
            # channels-last in, channels-last out (as cuDNN and torch.compile do): channel runs of
            # the output tile are contiguous, and stores need no pixel-strided scatter
            f"    out = torch.empty((nb,) + tuple(outs) + (cout,), device=x.device, dtype={out_dtype})"
            f".permute(0, {plan.nd + 1}, {', '.join(str(i) for i in range(1, plan.nd + 1))})"
            if params.get("CHANNELS_LAST") and algo != "direct"
            else f"    out = torch.empty((nb, cout) + tuple(outs), device=x.device, dtype={out_dtype})"
        ),
        "    if out.numel() == 0:",
        "        return out.squeeze(0) if unbatched else out",
        "    if x[0].numel() >= 2**31 or out[0].numel() >= 2**31:",
        "        raise ValueError('one image exceeds 32-bit offsets')",
        "    p_out = out[0, 0].numel()",
        "    has_bias = bias is not None",
        "    b = bias.contiguous() if has_bias else w",
    ]
    leaf_lines, epi = leaf_launch_args(tensors, scal, "_conv_leaf({t}, out)", ("sn", "sc", "sp"))
    L += leaf_lines
    warps = int(params["num_warps"])
    if algo == "direct":
        block = int(params["BLOCK"])
        dim_args = ", ".join(f"xs[{i}], outs[{i}], s[{i}], pl[{i}], dl[{i}]" for i in range(plan.nd))
        kargs = ", ".join(f"K_{X}=ks[{i}]" for i, X in enumerate(U))
        L += [
            f"    npb = triton.cdiv(p_out, {block})",
            "    grid = (nb * cout * npb,)",
            "    conv_direct_kernel[grid](x, w, out, b, p_out, npb, cpg, cpo, cout, x.stride(0), x.stride(1), "
            f"out.stride(0), out.stride(1), {dim_args}{epi}, {kargs}, HAS_BIAS=has_bias, "
            f"TRANSPOSED={plan.transposed}, BLOCK={block}, num_warps={warps})",
        ]
    else:
        bm, bn, bk, gm = (int(params[k]) for k in ("BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M"))
        stages = int(params["num_stages"])
        flatk = algo == "implicit-gemm-flatk"
        perm = "(0, 3, 2, 1)" if plan.transposed else "(0, 3, 1, 2)"
        shape = "(G, cpg, cpo, -1)" if plan.transposed else "(G, cpo, cpg, -1)"
        cl = bool(params.get("CHANNELS_LAST", False))
        L += [
            # (groups, taps, C_out/g, C_in/g): K-major B tiles, what tf32 tensor-core MMAs read.
            f"    wp = w.reshape{shape}.permute{perm}.contiguous()",
        ]
        if _cl_copy(plan, params):
            # A channels-last input of one group gets zero channels up to a multiple of 16 where
            # that adds at most a quarter (47 -> 48): Triton proves 16-byte channel runs, and
            # loads them with 16-byte async copies, only for a pixel stride it knows divisible by
            # 16; otherwise they go 4 bytes at a time. The weights get the same zero channels.
            L += [
                f"    if G == 1 and {_PAD_CHANNELS}:",
                "        wz = wp.new_zeros(wp.shape[:-1] + (cpg + (-cpg) % 16,))",
                "        wz[..., :cpg] = wp",
                "        wp, cpg = wz, wz.shape[-1]",
            ]
        bsplit = _precision_of(plan, params) == BSPLIT_PRECISION
        if bsplit:
            # split once: TF32 high part and fp32 remainder, same layout (a Triton kernel)
            L += [
                "    wshape = wp.shape",
                "    wp, wl = _tf32_split(wp.reshape(1, -1, cpg), 2, cpg, cpg)",
                "    wp, wl = wp.reshape(wshape), wl.reshape(wshape)",
            ]
        # TF32 rounded to nearest on a GPU (the interpreter's dots are fp32 whatever is asked)
        L += ["    rna = x.is_cuda" if _precision_of(plan, params) == "tf32" else "    rna = False"]
        L += [
            "    pointwise = len(launches) == 1 and all(e[2] == 1 and e[3] == 1 and e[4] == 1 and e[7] == 0 "
            "for e in launches[0])",
            f"    bn = min({bn}, max(16, triton.next_power_of_2(cpo)))",
            f"    kdim = cpg * math.prod(ks) if {flatk} and not pointwise else cpg",
            f"    bk = min({bk}, max(16, triton.next_power_of_2(kdim)))",
            f"    fold = not pointwise or p_out < {2 * bm} or nb > 65535",
        ]
        if _cl_copy(plan, params):
            # Channels-last copy of the input in one Triton pass (with the zero channels above):
            # channel-contiguous A tiles. A tuning option: the copy is not free.
            L += [
                "    xk = to_channels_last(x, G * cpg)",
                "    xsn, xsc, xsp = xk.stride(0), 1, G * cpg",
            ]
        elif cl:
            L += [
                f"    xk = x.permute(0, {', '.join(str(i) for i in range(2, plan.nd + 2))}, 1).contiguous()",
                "    xsn, xsc, xsp = xk.stride(0), 1, cin",
            ]
        else:
            L += ["    xk, xsn, xsc, xsp = x, x.stride(0), x.stride(1), 1"]
        call = (
            f"conv_igemm_kernel[grid](xk, wp, {'wl, ' if bsplit else ''}out, b, nb, G, m, p_out, cpg, cpo, xsn, "
            f"xsc, xsp, out.stride(0), out.stride(1), out.stride(-1), *dims{epi}, HAS_BIAS=has_bias, "
            "POINTWISE=pointwise, FOLD_N=fold, "
            f"EVEN_C=(cpg % bk == 0), CL={cl}, RNA=rna, BLOCK_M={bm}, BLOCK_N=bn, BLOCK_K=bk, GROUP_M={gm}, "
            "PHASED=phased, "
            f"num_warps={warps}, num_stages={stages})"
        )
        L += [
            # the stride phases of a transposed conv in one launch, when every dim has all its
            # phases (outputs at least the stride) and the rows and the grid fit
            "    phased = fold and len(launches) > 1 and len(launches) == math.prod(s)",
            "    if phased:",
            "        m = nb * math.prod(-(-o // st) for o, st in zip(outs, s))",
            "        phased = m < 2**31 and G * len(launches) <= 65535",
            "    if phased:",
            "        dims = _phase_dims(xs, outs, ks, s, pl, dl)",
            f"        grid = (triton.cdiv(m, {bm}) * triton.cdiv(cpo, bn), G * len(launches), 1)",
            f"        {call}",
            "    for ph in () if phased else launches:",
            "        m = (nb if fold else 1) * math.prod(e[1] for e in ph)",
            "        dims = []",
            "        for i, e in enumerate(ph):",
            "            dims += [xs[i], outs[i], e[1], e[0], e[2], e[3], e[4], e[5], e[6], ks[i], e[7], e[8], pl[i], dl[i]]",
            f"        grid = (triton.cdiv(m, {bm}) * triton.cdiv(cpo, bn), G, 1 if fold else nb)",
            f"        {call}",
        ]
    L.append("    return out.squeeze(0) if unbatched else out")
    return "\n".join(L) + "\n"


def _precision_of(plan: ConvPlan, params: dict[str, Any]) -> str | None:
    """The tl.dot input precision of an implicit-GEMM candidate (None: the dtype's default)."""
    prec = params.get("PRECISION", "tf32x3")
    return prec if plan.dtype == "float32" and prec in ("tf32x3", "ieee", "tf32", BSPLIT_PRECISION) else None


def generate(desc: TaskDescription, view: GraphView, plan: ConvPlan, params: dict[str, Any]) -> str:
    algo = params["algorithm"]
    if algo == "direct":
        kernel, sig = _direct_kernel(plan)
        precision = None
    else:
        precision = _precision_of(plan, params)
        kernel, sig = _igemm_kernel(plan, algo == "implicit-gemm-flatk", precision)
    kernels = ([ewops.HELPERS] if plan.epilogue.nodes else []) + [kernel]
    if precision == "tf32":
        kernels.insert(0, kernel_source("tf32split.py", "tf32_round"))
    bsplit = precision == BSPLIT_PRECISION
    if bsplit:
        kernels.append(kernel_source("tf32split.py", "tf32_split_kernel"))
    cl_copy = _cl_copy(plan, params)
    if cl_copy:
        kernels.append(kernel_source("layout.py", "nchw_to_nhwc_kernel"))
    leaf_exprs = [lf.expr for lf in plan.epilogue.tensor_leaves + plan.epilogue.scalar_leaves]
    call = [
        plan.x_expr,
        plan.w_expr,
        plan.b_expr,
        plan.stride,
        plan.padding,
        plan.dilation,
        plan.groups,
        plan.output_padding,
        *leaf_exprs,
    ]
    ops = ", ".join(n.op for n in plan.epilogue.nodes)
    doc = f"EGG expert: conv family ({plan.op}{' + ' + ops if ops else ''}), algorithm {algo}" + (
        f", precision {precision}." if precision else "."
    )
    return assemble(
        desc,
        "\n\n".join(kernels),
        _GEOMETRY
        + "\n\n"
        + (kernel_source("tf32split.py", "_tf32_split") + "\n\n" if bsplit else "")
        + (kernel_source("layout.py", "_layout_tiles", "to_channels_last") + "\n\n" if cl_copy else "")
        + _launcher(plan, params, sig),
        f"return launch_conv({', '.join(call)})",
        doc,
    )
