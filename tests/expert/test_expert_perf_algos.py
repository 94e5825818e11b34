"""The algorithms a kernel engineer picks for the shapes where one program per row / tile loses
(issue 13): each is verified through the real sandbox (Toolbox.describe -> the expert's seed for
that algorithm -> Toolbox.compile for sm_90 -> Toolbox.check: random trials, the x3 scaled trial
and a second shape) at small, odd CPU sizes, and is the first seed at the GPU shapes it is for."""

from __future__ import annotations

import dataclasses
import json
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from childproc import script_json
from expert_helpers import ROOT, stage

from graph.records import TaskSpec
from nodes.expert import ExpertCode
from nodes.expert.code import plan_for
from nodes.models import CodeReply, CodeRequest

toolbox = pytest.importorskip("tools.toolbox")

SUITE = ROOT / "evals" / "suites" / "egg"

# case -> (suite task, CPU sizes: odd and non-power-of-two, family, algorithm under test)
ALGO_CASES: dict[str, tuple[str, dict[str, int], str, str]] = {
    # 5 chunks per row, the last one ragged; values far from zero (shifted sums must not cancel)
    "ln_long_split": (
        "nm10_layernorm_long_rows.py",
        {"B": 3, "C": 5, "H": 61, "W": 67},
        "rownorm",
        "split-row",
    ),
    # the ordered one-launch variant: 80 chunks of 256 a row (the last ragged), tickets, the
    # output programs waiting for the row's partial count
    "ln_long_ordered": (
        "nm10_layernorm_long_rows.py",
        {"B": 3, "C": 5, "H": 61, "W": 67},
        "rownorm",
        "split-row",
    ),
    # two passes before the output (a maximum of deviations from the mean): two counted passes
    "rows_two_pass_ordered": ("ROW_DEV_MAX", {}, "rownorm", "split-row"),
    # the ordered online softmax: 40 chunks of 512 a row (the last ragged, rows not 16-aligned),
    # a scale, a mask aux and a masked run of whole chunks before it, a scale and a shift after
    "sm_long_ordered": ("SM_LONG_MASKED", {}, "softmax", "online"),
    # log-softmax, ORDER_CH rounded up to whole tiles (1000 -> 1024): 20 chunks a row; its output
    # programs one row behind their partials (ORDER_LAG 1: the first and last ticket blocks half
    # empty)
    "logsm_long_ordered": ("sm02_log_softmax.py", {"ROWS": 3, "COLS": 20011}, "softmax", "online"),
    # the register-resident softmax (the first seed of long rows): 79 chunks of 256 a row (the
    # last ragged), the mask aux and prologue / epilogue ops; on the CPU its two-launch form
    # (partials, then the write)
    "sm_long_resident": ("SM_LONG_MASKED", {}, "softmax", "resident"),
    # N == 1, a ragged K (odd: no 16-byte row alignment) split over several programs
    "gemv_long_k": ("mm09_matvec_long_k.py", {"M": 37, "K": 20011}, "gemm", "gemv-splitk"),
    # M == 1 (one-token linear): the weight is the matrix, bias + SiLU in the reduce kernel
    "gemv_linear_rows": (
        "ge05_linear_gemv_silu.py",
        {"IN_F": 1000, "OUT_F": 333},
        "gemm",
        "gemv-splitk",
    ),
    # batched, the matrix transposed (its lines are the contiguous dim), broadcast residual
    "gemv_bmm_transposed": ("GEMV_T", {}, "gemm", "gemv-splitk"),
    # ragged M, N, K; K-major zero-padded operand copies (what the GPU shape gets by default)
    "mm_ragged_kmajor": ("mm10_matmul_ragged.py", {"M": 67, "K": 45, "N": 71}, "gemm", "tiled"),
    # A stored transposed: the K-major copy transposes it
    "mm_ta_kmajor": ("mm04_transposed_a.py", {"M": 40, "K": 37, "N": 29}, "gemm", "tiled"),
    # persistent grid over the tiles of every batch, ragged N
    "bmm_persistent": (
        "mm11_bmm_ragged.py",
        {"BATCH": 3, "M": 37, "K": 53, "N": 41},
        "gemm",
        "tiled-persistent",
    ),
    # fp32 operands split once into TF32 high / fp32 low K-major buffers, three TF32 dots per
    # K step (ragged M, N, K: the split pads K); the tiled seed with the presplit parameters,
    # which the expert offers only at GPU shapes (large M and N)
    "mm_presplit": ("mm10_matmul_ragged.py", {"M": 67, "K": 45, "N": 71}, "gemm", "tiled"),
    # the same over a batch of ragged GEMMs
    "bmm_presplit": ("mm11_bmm_ragged.py", {"BATCH": 3, "M": 37, "K": 53, "N": 41}, "gemm", "tiled"),
    # K split at launch into chunks (the last one ragged), partials reduced in a second kernel
    "large_k_splitk": ("mm12_large_k_ragged.py", {"M": 20, "K": 3001, "N": 33}, "gemm", "split-k"),
    # the same with B split once before the GEMM (TF32 high / fp32 low, K-major, padded) and A
    # split in registers every K step ("tf32x3-bsplit", split-k's default from 128 rows of A)
    "large_k_bsplit": ("mm12_large_k_ragged.py", {"M": 20, "K": 3001, "N": 33}, "gemm", "split-k"),
    # B split once for the tiled kernel, ragged M, N, K (EVEN_K false: masked A and B loads)
    "mm_bsplit": ("mm10_matmul_ragged.py", {"M": 67, "K": 45, "N": 71}, "gemm", "tiled"),
    # 4x4 windows, stride 1, padding 1: 8 output rows per tile share 11 input rows
    "maxpool_rows": (
        "pl06_maxpool2d_overlap.py",
        {"B": 2, "C": 3, "H": 37, "W": 45},
        "pooling",
        "row-tiles",
    ),
    # 3-d average without the padding in the count: separable valid counts, a plane loop
    "avgpool3d_rows": ("AVGPOOL3D", {}, "pooling", "row-tiles"),
    # ragged planes (9 x 11): several channels per statistics tile, masked pixel tails
    "bn_tiles_ragged": (
        "nm11_batchnorm2d_ragged.py",
        {"B": 3, "C": 5, "H": 9, "W": 11},
        "batchnorm",
        "channel-tiles",
    ),
    # a library 1x1 conv, then BN statistics and the normalise + ReLU tile pass (mixed policy)
    "conv_bn_tiles": (
        "cv06_pointwise_conv_bn_relu.py",
        {"B": 2, "C_IN": 5, "C_OUT": 6, "H": 7, "W": 9},
        "batchnorm",
        "library-conv+channel-tiles",
    ),
    # the same on a channels-last input: statistics coalesced along the channels, the flat
    # normalise pass over the channels-last output, which it keeps
    "conv_bn_cl": (
        "cv06_pointwise_conv_bn_relu.py",
        {"B": 2, "C_IN": 5, "C_OUT": 6, "H": 7, "W": 9},
        "batchnorm",
        "library-conv+cl-channel-tiles",
    ),
    # a 3-d conv with its bias (added to the running mean's side instead), 3 input channels
    # (padded to 4 for cuDNN), and a residual of the output's shape read in NCHW
    "conv3d_bn_res_cl": ("CONV3D_BN_RES", {}, "batchnorm", "library-conv+cl-channel-tiles"),
    # cuDNN in channels-last (TF32 by PyTorch's default), ReLU + per-channel bias in one tile pass
    "conv_tail_cl": (
        "cv07_conv2d_relu_bias_ragged.py",
        {"B": 2, "C_IN": 3, "C_OUT": 5, "H": 9, "W": 11},
        "libconv",
        "library-conv+tile-epilogue",
    ),
    # the same tail pass over a transposed conv's NCHW output (the layout is a tunable)
    "convt_tail_nchw": (
        "cv08_conv_transpose2d_mish_tail.py",
        {"B": 2, "C_IN": 3, "C_OUT": 5, "H": 9, "W": 8},
        "libconv",
        "library-conv+tile-epilogue",
    ),
    # columns split along the reduced dim too (4 runs of 512 rows, the last ragged), then combined
    "colmean_split": ("rd08_mean_dim0_tall.py", {"ROWS": 2000, "COLS": 45}, "reduction", "split-columns"),
    # many short rows, a tile of whole rows per program: a ragged last tile, rows of 45 (masked
    # to 64), the product, the first index of the maximum, and min's values
    "rows_prod": ("rd07_prod_dim1.py", {"ROWS": 300, "COLS": 45}, "reduction", "multi-row"),
    "rows_argmax": ("rd03_argmax_lastdim.py", {"ROWS": 300, "COLS": 45}, "reduction", "multi-row"),
    "rows_min": ("rd06_min_dim2.py", {"B": 3, "M": 7, "N": 45}, "reduction", "multi-row"),
    # conv, BatchNorm, ReLU and a padded 3x3 / stride-2 max pool (a ResNet stem) as one group:
    # the normalise pass writes the pooled output only; ragged planes (odd output sizes)
    "conv_bn_pool_stem": ("BN_POOL_STEM", {}, "batchnorm", "library-conv+channel-tiles+max-pool"),
    # functional pool over a residual add of the input's shape, dilated 2x2 window, stride 1
    "conv_bn_pool_res": ("BN_POOL_RES", {}, "batchnorm", "library-conv+channel-tiles+max-pool"),
    # Triton implicit-GEMM conv3d, first seed: TF32, channels-last input and output
    "conv3d_tf32_cl": (
        "cv04_conv3d.py",
        {"B": 2, "C_IN": 16, "C_OUT": 9, "D": 5, "H": 6, "W": 8},
        "conv",
        "implicit-gemm",
    ),
}

# Parameters set over the seed's defaults (what the tuning stages may choose at GPU shapes).
OVERRIDES: dict[str, dict[str, Any]] = {
    "mm_ragged_kmajor": {"KMAJOR": True},
    # small tiles keep the interpreter quick (the tuning space's smallest is 64: 2 stages here)
    "mm_ta_kmajor": {"KMAJOR": True, "BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 16, "num_stages": 2},
    "bmm_persistent": {"KMAJOR": True, "BLOCK_M": 32, "BLOCK_N": 32, "num_stages": 2},
    "avgpool3d_rows": {"ROWS_OUT": 3, "BLOCK_W": 32},
    "rows_prod": {"ROW_TILE": 512},  # 8 rows of 64 per tile: 38 programs, the last ragged
    **{
        case: {
            "algorithm": "tiled-presplit",
            "PRECISION": "tf32x3-presplit",
            "KMAJOR": False,
            "BLOCK_M": 64,
            "BLOCK_N": 64,
            "BLOCK_K": 32,
            "num_warps": 4,
            "num_stages": 3,
        }
        for case in ("mm_presplit", "bmm_presplit")
    },
    "convt_tail_nchw": {"CHANNELS_LAST": False},
    "ln_long_ordered": {"ORDER_CH": 256, "BLOCK_N": 256},
    "rows_two_pass_ordered": {"ORDER_CH": 512, "BLOCK_N": 128},
    "sm_long_ordered": {"ORDER_CH": 512, "BLOCK_N": 256},
    "logsm_long_ordered": {"ORDER_CH": 1000, "BLOCK_N": 128, "ORDER_LAG": 1},
    "sm_long_resident": {"RESIDENT": 256},
    "large_k_bsplit": {"PRECISION": "tf32x3-bsplit"},
    "mm_bsplit": {
        "PRECISION": "tf32x3-bsplit",
        "KMAJOR": False,
        "BLOCK_M": 64,
        "BLOCK_N": 64,
        "BLOCK_K": 32,
        "num_warps": 4,
    },
}

# Tasks not in the suite, as sources.
INLINE = {
    "CONV3D_BN_RES": """
import torch
import torch.nn as nn

B = 2
C_IN = 3
C_OUT = 6
D = 3
H = 5
W = 9


class Model(nn.Module):
    def __init__(self, c_in, c_out):
        super().__init__()
        self.conv = nn.Conv3d(c_in, c_out, 3, padding=1)
        self.bn = nn.BatchNorm3d(c_out)

    def forward(self, x, r):
        return torch.relu(self.bn(self.conv(x)) + r)


def get_inputs():
    return [torch.randn(B, C_IN, D, H, W), torch.randn(B, C_OUT, D, H, W)]


def get_init_inputs():
    return [C_IN, C_OUT]
""",
    "BN_POOL_STEM": """
import torch
import torch.nn as nn

B = 2
C_OUT = 6
H = 23
W = 19


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, C_OUT, 7, stride=2, padding=3, bias=False)
        self.bn = nn.BatchNorm2d(C_OUT)
        self.relu = nn.ReLU(inplace=True)
        self.pool = nn.MaxPool2d(3, stride=2, padding=1)

    def forward(self, x):
        return self.pool(self.relu(self.bn(self.conv(x))))


def get_inputs():
    return [torch.randn(B, 3, H, W)]


def get_init_inputs():
    return []
""",
    "BN_POOL_RES": """
import torch
import torch.nn as nn
import torch.nn.functional as F

B = 2
C = 5
H = 9
W = 11


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(4, C, 3, padding=1)
        self.bn = nn.BatchNorm2d(C)

    def forward(self, x, r):
        return F.max_pool2d(torch.tanh(self.bn(self.conv(x))) + r, 2, stride=1, dilation=2)


def get_inputs():
    return [torch.randn(B, 4, H, W), torch.randn(B, C, H, W)]


def get_init_inputs():
    return []
""",
    "GEMV_T": """
import torch
import torch.nn as nn

B = 3
M = 45
K = 1003


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a, v, w):
        return torch.tanh(torch.bmm(a.transpose(1, 2), v)) + w


def get_inputs():
    return [torch.randn(B, K, M), torch.randn(B, K, 1), torch.randn(B, M, 1)]


def get_init_inputs():
    return []
""",
    "SM_LONG_MASKED": """
import torch
import torch.nn as nn

B = 3
R = 20011


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x, mask):
        y = torch.softmax((x * 0.5 + 1.0).masked_fill(mask, float("-inf")), dim=-1)
        return y * 3.0 - 0.25


def get_inputs():
    mask = torch.rand(B, R) < 0.3
    # whole chunks masked, and chunks whose first tiles are all -inf before finite ones
    mask[:, 700:3000] = True
    mask[:, 0] = False
    return [torch.randn(B, R) * 4.0, mask]


def get_init_inputs():
    return []
""",
    "ROW_DEV_MAX": """
import torch
import torch.nn as nn

B = 3
R = 20011


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        d = x - x.mean(dim=-1, keepdim=True)
        return d / (d.abs().amax(dim=-1, keepdim=True) + 1e-3)


def get_inputs():
    return [torch.randn(B, R) + 3.0]


def get_init_inputs():
    return []
""",
    "AVGPOOL3D": """
import torch
import torch.nn as nn
import torch.nn.functional as F

N = 1
C = 2
D = 4
H = 7
W = 70


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return F.avg_pool3d(x, (2, 3, 3), stride=(1, 1, 2), padding=(1, 1, 1), count_include_pad=False) * 2.0


def get_inputs():
    return [torch.randn(N, C, D, H, W)]


def get_init_inputs():
    return []
""",
}


def _task(case: str) -> TaskSpec:
    fname, sizes, _, _ = ALGO_CASES[case]
    if fname in INLINE:
        return TaskSpec(path=f"{case}.py", name=case, source=INLINE[fname], size_overrides=sizes)
    p = SUITE / fname
    return TaskSpec(path=str(p), name=fname[:-3], source=p.read_text(), size_overrides=sizes)


def _seed_for(task: TaskSpec, desc: Any, algorithm: str) -> CodeReply:
    code = ExpertCode()
    seen = []
    for i in range(12):
        r = code.write(
            CodeRequest(mode="seed", stage=stage(), task=task, desc=desc, seed_index=i, n_seeds=12)
        )
        if r.source is None:
            break
        if r.algorithm == algorithm:
            return r
        seen.append(r.algorithm)
    raise AssertionError(f"no {algorithm} seed among {seen}")


def _selected(request) -> list[str]:
    """The cases the selected tests of this module use (all of them unless -k narrows it)."""
    wanted = set()
    for item in request.session.items:
        params = getattr(getattr(item, "callspec", None), "params", {})
        if item.module is request.module and "case" in params:
            wanted.add(params["case"])
    return [c for c in ALGO_CASES if c in wanted]


class _Descriptions(dict):
    """case -> TaskDescription, described (one sandbox run) the first time a test asks."""

    def __init__(self) -> None:
        super().__init__()
        self.tb = toolbox.Toolbox()

    def __missing__(self, case: str) -> Any:
        self[case] = self.tb.describe(_task(case), shrink=False)
        return self[case]


@pytest.fixture(scope="module")
def descs() -> dict[str, Any]:
    return _Descriptions()


@pytest.fixture(scope="module")
def results(request, descs) -> dict[str, dict[str, Any]]:
    tb = toolbox.Toolbox()
    out: dict[str, dict[str, Any]] = {}
    for case in _selected(request):
        task = _task(case)
        desc = descs[case]
        reply = _seed_for(task, desc, ALGO_CASES[case][3])
        if case in OVERRIDES:
            unit = plan_for(desc).units[0]
            fam, view, plan = unit.fam, unit.view, unit.plan
            params = dict(reply.params, **OVERRIDES[case])
            assert not hasattr(fam, "valid") or fam.valid(plan, params) is None, fam.valid(plan, params)
            reply = reply.model_copy(
                update={"source": fam.generate(desc, view, plan, params), "params": params}
            )
        out[case] = {"task": task, "desc": desc, "reply": reply}

    def one(case: str):
        r = out[case]
        policy = "mixed" if r["reply"].algorithm.startswith("library") else "strict"
        return (
            case,
            tb.compile(r["task"], r["reply"].source),
            tb.check(r["task"], r["reply"].source, policy=policy),
        )

    with ThreadPoolExecutor(max_workers=2) as ex:
        for case, comp, chk in ex.map(one, list(out)):
            out[case]["compiled"], out[case]["checked"] = comp, chk
    return out


@pytest.mark.parametrize("case", list(ALGO_CASES))
def test_algorithm_accepted_by_checker(case, results):
    r = results[case]
    assert r["reply"].family == ALGO_CASES[case][2]
    chk = r["checked"]
    assert chk.accepted, f"{case}: {chk.reasons}"
    assert chk.trials >= 5  # 3 random, the x3 scaled trial and a second shape


@pytest.mark.parametrize("case", list(ALGO_CASES))
def test_algorithm_compiles_for_sm90(case, results):
    comp = results[case]["compiled"]
    assert comp.ok, f"{case}: {comp.error}"
    assert comp.kernels and all(k.spills in (0, None) for k in comp.kernels), comp.kernels


def _plan(descs, case: str):
    unit = plan_for(descs[case]).units[0]
    return unit.fam, unit.plan


def _reply(descs, case: str) -> CodeReply:
    return _seed_for(_task(case), descs[case], ALGO_CASES[case][3])


def test_rownorm_split_row_first_for_few_long_rows(descs):
    fam, plan = _plan(descs, "ln_long_split")
    leaf = plan.x_leaf
    few_long = dataclasses.replace(plan, x_leaf=dataclasses.replace(leaf, shape=[16, 64, 256, 256]))
    many_short = dataclasses.replace(plan, x_leaf=dataclasses.replace(leaf, shape=[16384, 4, 32, 32]))
    assert fam.algorithms(few_long)[0] == "split-row"
    assert fam.algorithms(many_short)[0] == "whole-row"
    assert "split-row" in fam.algorithms(many_short)
    src = _reply(descs, "ln_long_split").source
    # LayerNorm: the variance comes out of the mean's pass (two kernels, not three)
    assert "def rn_split_pass1_kernel(" in src and "rn_split_pass2_kernel" not in src


@pytest.mark.parametrize("case, passes", [("ln_long_ordered", 1), ("rows_two_pass_ordered", 2)])
def test_rownorm_ordered_split_is_one_launch_counting_each_pass(case, passes, results, descs):
    src = results[case]["reply"].source
    assert f"rn_split_ordered_kernel[(rows * {passes + 1} * split,)]" in src
    assert "rn_split_pass1_kernel" not in src and "rn_split_out_kernel" not in src
    # each pass counted once (release), each later pass and the output wait on the one before
    assert src.count("sem='release')") == passes and src.count("while done < NSPLIT:") == passes
    # partials of the same launch are read past L1
    assert src.count("cache_modifier='.cg'") == src.count("tl.load(ws_ptr") > 0
    fam, plan = _plan(descs, case)
    # verified when set, not offered by the tuning stages (it lost on the GPU: rownorm.space)
    assert "ORDER_CH" not in fam.space(plan, dict(results[case]["reply"].params, ORDER_CH=0), "memory", {})


@pytest.mark.parametrize("case", ["sm_long_ordered", "logsm_long_ordered"])
def test_softmax_ordered_is_one_launch_of_counted_chunks(case, results, descs):
    src = results[case]["reply"].source
    lag = results[case]["reply"].params.get("ORDER_LAG", 0)
    assert f"sm_ordered_kernel[((outer + {lag}) * 2 * split,)]" in src and f"LAG={lag}," in src
    kern = src[src.index("def sm_ordered_kernel(") :]
    kern = kern[: kern.index("\n\n\n")]
    # partials counted once (release), the output programs wait on the count (acquire)
    assert kern.count("sem='release')") == 1 and kern.count("while done < NSPLIT:") == 1
    assert kern.count("sem='acquire')") == 2
    # the partials of the same launch are read past L1
    assert kern.count("cache_modifier='.cg'") == kern.count("tl.load(ws_ptr") == 2
    row = src[src.index("def sm_row_kernel(") :]
    row = row[: row.index("\n\n\n")]
    # the prologue's loads (both passes), the epilogue and the stores as the row kernel has them
    lines = [ln.strip() for ln in row.splitlines()]
    fused = [ln for ln in lines if ln.startswith(("e_", "tl.store(out_ptr")) or "tl.load(a_" in ln]
    assert len(fused) >= (10 if case == "sm_long_ordered" else 2), fused
    assert set(fused) <= {ln.strip() for ln in kern.splitlines()}, fused
    fam, plan = _plan(descs, case)
    params = results[case]["reply"].params
    assert fam.space(plan, params, "memory", {})["ORDER_CH"] == [16384, 8192]
    off = dict(params, ORDER_CH=0)
    assert "sm_ordered_kernel" not in fam.generate(
        descs[case], plan_for(descs[case]).units[0].view, plan, off
    )
    # not for short rows, nor a middle dim, nor another algorithm
    assert "ORDER_CH" not in fam.space(dataclasses.replace(plan, row_len=4096), off, "memory", {})
    assert "ORDER_CH" not in fam.space(dataclasses.replace(plan, inner=7), off, "memory", {})
    assert fam.valid(plan, dict(params, algorithm="three-pass")) is not None


_COMPILE_RESIDENT = r"""
import json, sys, tempfile
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from tools.worker.compile_job import ptxas_info
sys.path.insert(0, "tests/expert")
from expert_runner import load_candidate
job = json.loads(sys.stdin.read())
fn = load_candidate(job["source"], tempfile.mkdtemp(), 0).sm_resident_kernel
cexpr = {"SPLIT_BLOCK": 64, "BLOCK_N": job["block"], "PHASE": 2}
sig = {}
for name in fn.arg_names:
    if name in cexpr:
        sig[name] = "constexpr"
    elif name == "cnt_ptr":
        sig[name] = "*i32"
    elif name.endswith("_ptr"):
        sig[name] = "*i1" if name.startswith("a_") else "*fp32"
    else:
        sig[name] = "fp32" if name.startswith("l_") else "i32"
k = triton.compile(ASTSource(fn=fn, signature=sig, constexprs=cexpr), target=GPUTarget("cuda", 90, 32),
                   options={"num_warps": 8})
ptx = k.asm["ptx"]
print(json.dumps({"spills": ptxas_info(ptx)[1], "acquire": ptx.count("ld.global.gpu.acquire"),
                  "release": ptx.count("atom.global.gpu.release")}))
"""


@pytest.mark.parametrize("case", ["sm_long_resident"])
def test_softmax_resident_one_launch_where_a_rows_chunks_fit_and_compiles(case, results, descs):
    src = results[case]["reply"].source
    # one launch (PHASE 2) only where a row has at most one chunk per SM; two on the CPU
    assert "for ph in (2,) if split <= sms else (0, 1):" in src
    assert "sms = torch.cuda.get_device_properties(x.device).multi_processor_count if x.is_cuda else 0" in src
    kern = src[src.index("def sm_resident_kernel(") :]
    kern = kern[: kern.index("\n\n\n")] if "\n\n\n" in kern else kern
    assert kern.count("sem='release')") == 1 and kern.count("while done < NSPLIT:") == 1
    assert kern.count("tl.load(x_ptr") == 1  # read once: the write uses the registers
    fam, plan = _plan(descs, case)
    params = results[case]["reply"].params
    # the first seed of long rows, chunk sizes tuned as its tile, warps in the memory stage
    assert fam.algorithms(plan) == ["resident", "online", "three-pass"]
    assert fam.defaults(plan, "resident") == {"ROWS": 1, "BLOCK_N": 4096, "num_warps": 0, "RESIDENT": 16384}
    assert fam.space(plan, params, "tiling", {"BLOCK_N": [2048]}) == {"RESIDENT": [4096, 8192, 16384]}
    assert fam.space(plan, dict(params, num_warps=16), "memory", {})["num_warps"] == [8, 4]
    # the online kernel is never resident; the resident one always is, in whole powers of two
    assert fam.valid(plan, dict(params, RESIDENT=100)) is not None
    assert fam.valid(plan, dict(params, RESIDENT=0)) is not None
    assert fam.valid(plan, dict(params, algorithm="online", num_warps=8)) is not None
    assert "RESIDENT" not in fam.space(plan, dict(params, algorithm="online", RESIDENT=0), "memory", {})
    # warps from the chunk (about 32 elements a thread) where none are set
    assert "num_warps=max(4, min(16, rb // 1024))" in src
    # the GPU's single launch (PHASE 2: the chunk live across the wait), compiled for sm_90
    for block in (8192, 4096):
        out = script_json(_COMPILE_RESIDENT, stdin=json.dumps({"source": src, "block": block}))
        assert out == {"spills": 0, "acquire": 2, "release": 1}, (block, out)


def test_presplit_offered_where_the_split_is_cheap_next_to_the_gemm(descs, results):
    fam, plan = _plan(descs, "mm_presplit")
    big = fam.algorithms(dataclasses.replace(plan, m=4096, n=4096, k=4096))
    bmm = fam.algorithms(dataclasses.replace(plan, batch=128, m=512, n=2048, k=1024))
    # among the first three seeds (a batch puts the persistent grid second)
    assert big[:2] == ["tiled", "tiled-presplit"] and bmm[:3] == [
        "tiled",
        "tiled-persistent",
        "tiled-presplit",
    ]
    # few output columns (long-K 256 x 256) or a short K: the split's traffic would dominate
    assert "tiled-presplit" not in fam.algorithms(dataclasses.replace(plan, m=256, n=256, k=524288))
    assert "tiled-presplit" not in fam.algorithms(dataclasses.replace(plan, m=4096, n=4096, k=64))
    d = fam.defaults(plan, "tiled-presplit")
    assert d["PRECISION"] == "tf32x3-presplit" and d["KMAJOR"] is False
    # four fp32 operand tiles a stage: 4 stages of 128 x 64 would not fit shared memory
    assert fam.valid(
        plan, dict(d, algorithm="tiled-presplit", BLOCK_M=128, BLOCK_N=128, BLOCK_K=64, num_stages=4)
    )
    for case in ("mm_presplit", "bmm_presplit"):
        r = results[case]
        assert "def tf32_split_kernel(" in r["reply"].source and 'input_precision="tf32"' in r["reply"].source
        gemm = next(k for k in r["compiled"].kernels if k.name == "gemm_kernel")
        assert gemm.mma == "wgmma", r["compiled"].kernels


def test_gemv_first_for_a_vector_operand(descs):
    fam, plan = _plan(descs, "gemv_long_k")
    assert fam.algorithms(dataclasses.replace(plan, m=2048, n=1, k=1048576))[0] == "gemv-splitk"
    assert fam.algorithms(dataclasses.replace(plan, m=1, n=11008, k=4096))[0] == "gemv-splitk"
    assert "gemv-splitk" not in fam.algorithms(dataclasses.replace(plan, m=4096, n=4096, k=4096))
    r = _reply(descs, "gemv_long_k")
    assert r.params["PRECISION"] == "ieee" and "tl.dot" not in r.source


def test_gemm_shape_driven_choices(descs):
    fam, plan = _plan(descs, "large_k_splitk")
    large_k = dataclasses.replace(plan, m=256, n=256, k=524288)
    assert fam.algorithms(large_k)[0] == "split-k"
    big_batch = dataclasses.replace(plan, m=512, n=2048, k=1024, batch=128)
    assert fam.algorithms(big_batch)[:2] == ["tiled", "tiled-persistent"]
    # a 1000 x 1000 output: 64x128 tiles (128 of them) rather than 64 tiles of 128x128
    small = fam.defaults(dataclasses.replace(plan, m=1000, n=1000, k=1000), "tiled")
    assert (small["BLOCK_M"], small["BLOCK_N"]) == (64, 128)
    # K-major copies by default only where they are cheap next to the GEMM
    assert fam.defaults(dataclasses.replace(plan, m=8205, n=5921, k=2949), "tiled")["KMAJOR"] is True
    assert fam.defaults(large_k, "split-k")["KMAJOR"] is False
    for case in ("mm_ragged_kmajor", "bmm_persistent", "large_k_splitk"):
        r = _reply(descs, case)
        assert r.params["PRECISION"] == "tf32x3"
        assert 'input_precision="tf32x3"' in r.source
    # split-k splits B once (tf32x3-bsplit) where enough rows of A meet each B element, and
    # keeps Triton's tf32x3 for a few rows (a classifier's batch), whose traffic is A + B
    assert fam.defaults(large_k, "split-k")["PRECISION"] == "tf32x3-bsplit"
    few_rows = dataclasses.replace(large_k, m=10, n=4096, k=25088)
    assert fam.defaults(few_rows, "split-k")["PRECISION"] == "tf32x3"
    assert fam.defaults(large_k, "tiled")["PRECISION"] == "tf32x3"


def test_gemm_refinements_offer_tf32_last(descs):
    fam, plan = _plan(descs, "mm_ragged_kmajor")
    params = _reply(descs, "mm_ragged_kmajor").params
    refs = fam.refinements(plan, params)
    assert refs and refs[-1][0] == "refine:tf32" and refs[-1][1]["PRECISION"] == "tf32"
    # B split once is a default of split-k (gemm._bsplit_pays), never a refinement; its TF32
    # refinement is offered like tf32x3's, and a mismatch falls back to Triton's tf32x3
    split = _reply(descs, "large_k_splitk").params
    assert all(r[1]["PRECISION"] != "tf32x3-bsplit" for r in [*refs, *fam.refinements(plan, split)])
    bsplit = dict(split, PRECISION="tf32x3-bsplit")
    assert fam.refinements(plan, bsplit)[-1][1]["PRECISION"] == "tf32"
    assert fam.valid(plan, dict(params, algorithm="tiled-persistent", PRECISION="tf32x3-bsplit"))
    assert fam.safer(plan, bsplit, "mismatch")[0][1]["PRECISION"] == "tf32x3"
    assert fam.safer(plan, dict(params, PRECISION="tf32x3"), "mismatch")[0][1]["PRECISION"] == "ieee"
    fixes = fam.safer(plan, dict(params, PRECISION="tf32"), "mismatch")
    assert fixes[0][1]["PRECISION"] == "tf32x3"


def test_pool_row_tiles_first_and_share_input_rows(descs):
    fam, plan = _plan(descs, "maxpool_rows")
    assert fam.algorithms(plan)[0] == "row-tiles"
    d = fam.defaults(plan, "row-tiles")
    assert d["ROWS_OUT"] == 16 and d["num_warps"] == 8
    src = _reply(descs, "maxpool_rows").source
    # 16 output rows of a 4-row window read 19 input rows, each loaded once per window column
    assert src.count("tl.load(row + iw") == 19 * 4
    # rows narrower than a warp leave most of a row tile's lanes idle: the generic kernel runs
    assert "and OW >= 32:" in src and "def pool_kernel(" in src
    assert "//" not in src.split("def pool_rows_kernel")[1].split("tl.store")[0].replace(
        "pid // n_tiles", ""
    ).replace("t // n_w", "").replace("z // OD", "")


def test_batchnorm_tiles_first_flat_normalise(descs):
    """The normalise pass is flat by default (measured at the roof on the H200), one channel
    decode per element; the 2-D channel tiles (one modulo per row, no division) stay in the
    mapping stage's space."""
    fam, plan = _plan(descs, "bn_tiles_ragged")
    assert fam.algorithms(plan)[0] == "channel-tiles"
    d = fam.defaults(plan, "channel-tiles")
    assert d["FLAT_APPLY"] is True and d["APPLY_BLOCK"] == 1024
    assert fam.space(plan, dict(d, algorithm="channel-tiles"), "mapping", {})["FLAT_APPLY"] == [False]
    src = _reply(descs, "bn_tiles_ragged").source
    apply = src.split("def bn_tile_apply_kernel(")[1].split("\ndef ")[0]
    assert "c = (offs // HW) % C" in apply and "BLOCK=1024" in src
    unit = plan_for(descs["bn_tiles_ragged"]).units[0]
    tiles = fam.generate(
        descs["bn_tiles_ragged"], unit.view, plan, dict(d, algorithm="channel-tiles", FLAT_APPLY=False)
    )
    apply = tiles.split("def bn_tile_apply_kernel(")[1].split("\ndef ")[0]
    assert "//" not in apply.split("):", 1)[1]  # channel of a row: one modulo per row, no division


def test_conv_first_seeds_follow_cudnn(descs):
    """The library tail runs cuDNN channels-last; the Triton conv's first seed is TF32 (PyTorch's
    fp32 convolutions are) with channels-last operands, the second keeps 3xTF32."""
    fam, plan = _plan(descs, "conv_tail_cl")
    assert fam.algorithms(plan)[0] == "library-conv+tile-epilogue"
    src = _reply(descs, "conv_tail_cl").source
    assert "def conv_tail_kernel(" in src
    # the input turned channels-last by Triton, the conv called without its bias (cuDNN would add
    # it in a pass of its own), the bias added in the tail pass
    # (3 input channels: input and weight padded to 4 for cuDNN's 16-byte channels-last loads)
    assert "conv2d(to_channels_last(x, 4), cl_conv_weight(self.conv.weight, 4), None," in src
    assert "def nchw_to_nhwc_kernel(" in src and "def cl_conv_weight(" in src
    assert "launch_conv_tail(t_conv, self.conv.bias," in src and "HAS_CB" in src
    fam, plan = _plan(descs, "conv3d_tf32_cl")
    first, second = (fam.defaults(plan, a) for a in fam.algorithms(plan)[:2])
    assert (first["PRECISION"], first["CHANNELS_LAST"]) == ("tf32", True)
    assert second["PRECISION"] == "tf32x3-bsplit"
    r = _reply(descs, "conv3d_tf32_cl")
    assert 'input_precision="tf32"' in r.source and r.params["PRECISION"] == "tf32"


def _advice(desc, reply: CodeReply, fraction: float | None, bottleneck: str, kernels=()):
    from graph.records import Attempt, CompileReport, KernelCompileInfo, ProfileReport
    from nodes.expert import ExpertProfiler
    from nodes.models import ProfilerRequest

    cand = reply.candidate("c", "tiling")
    comp = CompileReport(ok=True, kernels=[KernelCompileInfo(**k) for k in kernels])
    prof = ProfileReport(roofline_fraction=fraction, bottleneck=bottleneck)
    req = ProfilerRequest(
        stage=stage("tiling"), desc=desc, attempt=Attempt(candidate=cand, compile=comp), profile=prof
    )
    return ExpertProfiler().advise(req)[0]


def test_profiler_names_the_algorithms_reasons(descs):
    # split-K GEMM: the tile count / K split and (fp32, B not copied K-major) the operand layout
    r = _reply(descs, "large_k_splitk")
    # K = 3001: rows not 16-byte aligned, so the seed copies the operands K-major already
    assert r.params["KMAJOR"] is True
    adv = _advice(descs["large_k_splitk"], r, 0.3, "compute")
    reasons = [e for e in adv.evidence if e.startswith("reason:")]
    assert any("SPLIT_K" in e for e in reasons) and not any("KMAJOR" in e for e in reasons), reasons
    uncopied = r.model_copy(update={"params": dict(r.params, KMAJOR=False)})
    reasons = [
        e
        for e in _advice(descs["large_k_splitk"], uncopied, 0.3, "compute").evidence
        if e.startswith("reason:")
    ]
    assert any("KMAJOR" in e for e in reasons), reasons
    assert "SPLIT_K" in adv.plan
    # near the roofline: nothing algorithm-specific to add
    assert not [
        e for e in _advice(descs["large_k_splitk"], r, 0.9, "compute").evidence if e.startswith("reason:")
    ]
    # one program per row over a few long rows: the split-row algorithm is the reason to give
    fam, plan = _plan(descs, "ln_long_split")
    whole = _reply(descs, "ln_long_split").model_copy(
        update={
            "algorithm": "whole-row",
            "params": {**fam.defaults(plan, "whole-row"), "algorithm": "whole-row"},
        }
    )
    adv = _advice(descs["ln_long_split"], whole, 0.2, "memory")
    assert any("algorithm=split-row" in e for e in adv.evidence), adv.evidence
    # registers that leave few warps resident on a memory-bound kernel
    adv = _advice(
        descs["maxpool_rows"],
        _reply(descs, "maxpool_rows"),
        0.4,
        "memory",
        kernels=[{"name": "pool_rows_kernel", "registers": 200, "num_warps": 8, "spills": 0}],
    )
    assert any("warps resident" in e for e in adv.evidence), adv.evidence


def test_reduction_splits_few_long_columns(descs):
    fam, plan = _plan(descs, "colmean_split")
    tall = dataclasses.replace(plan, outer=1, rlen=262147, inner=1000)
    wide = dataclasses.replace(plan, outer=64, rlen=2048, inner=8192)
    assert fam.algorithms(tall)[0] == "split-columns"
    assert fam.algorithms(wide)[0] == "columns"
    assert "red_col_final_kernel[" in _reply(descs, "colmean_split").source


def test_reduction_tiles_many_short_rows(descs):
    fam, plan = _plan(descs, "rows_prod")
    short = dataclasses.replace(plan, outer=65536, rlen=64, inner=1)
    long = dataclasses.replace(plan, outer=65536, rlen=4096, inner=1)
    assert fam.algorithms(short) == ["multi-row", "one-pass"]
    assert "multi-row" not in fam.algorithms(long)
    assert "multi-row" not in fam.algorithms(dataclasses.replace(short, op="logsumexp"))
    src = _reply(descs, "rows_prod").source
    # rows longer than a tile holds (another shape of the same module) take the one-pass kernel
    assert "red_rows_kernel[" in src and "red_row_kernel[" in src
    assert "ROW_TILE" in fam.space(
        short, fam.defaults(short, "multi-row") | {"algorithm": "multi-row"}, "mapping", {}
    )


# A task and a candidate (JSON on stdin) in training mode, in a child process with Triton's
# interpreter: the batch-statistics path, which the checker (eval mode) never takes.
TRAIN_RUN = """
import json, sys, types
import torch
src = json.load(sys.stdin)
def load(name, text):
    m = types.ModuleType(name)
    exec(compile(text, name + ".py", "exec"), m.__dict__)
    return m
task, cand = load("task", src["task"]), load("cand", src["cand"])
for k, v in src["sizes"].items():
    setattr(task, k, v)
torch.manual_seed(0)
ref = task.Model(*task.get_init_inputs())
new = cand.ModelNew(*task.get_init_inputs())
new.load_state_dict(ref.state_dict())
xs = [x * 3 + 1 for x in task.get_inputs()]
with torch.no_grad():
    got = new.train()(*xs)
    want = ref.double().train()(*[x.double() for x in xs])
fmt = torch.channels_last if got.dim() == 4 else torch.channels_last_3d
print(json.dumps({"err": float((got.double() - want).abs().max()), "scale": float(want.abs().max()),
                  "cl": got.is_contiguous(memory_format=fmt), "nchw": got.is_contiguous()}))
"""


@pytest.mark.parametrize(
    "case", ["conv_bn_cl", "conv3d_bn_res_cl", "conv_bn_tiles", "conv_bn_pool_stem", "conv_bn_pool_res"]
)
def test_conv_bn_batch_statistics_in_training_mode(case, descs):
    """The conv + BatchNorm seeds normalise by the batch's statistics in training mode (inputs
    shifted off zero: the shifted sums must not cancel); the channels-last seed keeps its output
    channels-last, the NCHW one contiguous."""
    task = _task(case)
    reply = _reply(descs, case)
    r = script_json(
        TRAIN_RUN,
        stdin=json.dumps({"task": task.source, "cand": reply.source, "sizes": task.size_overrides}),
        env={"TRITON_INTERPRET": "1"},
    )
    assert r["err"] <= 1e-4 * max(1.0, r["scale"]), r
    assert r["cl"] if "+cl-" in reply.algorithm else r["nchw"], r


def test_conv_bn_relu_max_pool_is_one_group_writing_the_pooled_output(descs):
    """A max pool after conv + BatchNorm (+ its elementwise epilogue) joins the norm's group:
    the only algorithm is the pooled pass, which reads the module's window at run time, and no
    full-size normalised tensor is written (one apply launch, into the pooled shape)."""
    fam, plan = _plan(descs, "conv_bn_pool_stem")
    assert plan.pool is not None and plan.pool.window == ([3, 3], [2, 2], [1, 1], [1, 1])
    assert fam.algorithms(plan) == ["library-conv+channel-tiles+max-pool"]
    src = _reply(descs, "conv_bn_pool_stem").source
    assert "window=(self.pool.kernel_size, self.pool.stride, self.pool.padding, self.pool.dilation)" in src
    assert "launch_bn_pool_apply(" in src and "launch_bn_tile_apply(" not in src
    _, plan = _plan(descs, "conv_bn_pool_res")
    assert plan.pool.geometry is None and plan.pool.window == ([2, 2], [1, 1], [0, 0], [2, 2])


def test_conv_bn_channels_last_offered_after_the_nchw_seeds(descs):
    """The channels-last conv + BN seed is offered after the NCHW ones (it lost to them through
    the agent on an H100), at any output size and kernel size; its forward turns the input
    channels-last, calls the conv without its bias, and its normalise pass decodes the channel
    as i % C (HW = 1)."""
    fam, plan = _plan(descs, "conv3d_bn_res_cl")
    order = [
        "library-conv+channel-tiles",
        "library-conv+bn-stats+fused-epilogue",
        "library-conv+cl-channel-tiles",
    ]
    assert fam.algorithms(plan) == order
    fam1, plan1 = _plan(descs, "conv_bn_cl")
    assert fam1.algorithms(plan1) == order
    assert "FLAT_APPLY" not in fam.space(plan, {"algorithm": "library-conv+cl-channel-tiles"}, "mapping", {})
    src = _reply(descs, "conv3d_bn_res_cl").source
    assert "conv3d(to_channels_last(x, 4), cl_conv_weight(self.conv.weight, 4), None," in src
    assert "launch_bn_cl_stats(x_bn," in src and "self.conv.bias)" in src  # the bias on the running side
    assert "    HW = 1\n" in src and "_epi_mode_cl(" in src


def test_batchnorm_tuning_leaves_out_statistics_parameters_the_timed_forward_never_runs(descs):
    """The toolbox checks and times models in eval mode: a BatchNorm module with running
    statistics then never launches the statistics kernels, so their tile (BLOCK) and split
    (PROGS_PER_SM) are not tuned; with batch statistics (functional, training=True) they are."""
    fam, plan = _plan(descs, "conv_bn_tiles")
    params = {"algorithm": "library-conv+channel-tiles"}
    assert fam.space(plan, params, "tiling", {}) == {"APPLY_BLOCK": [2048, 4096]}
    assert fam.space(plan, params, "mapping", {}) == {"FLAT_APPLY": [False]}
    assert fam.space(plan, params, "memory", {}) == {"num_warps": [4, 16]}
    batch = dataclasses.replace(
        plan, bn=plan.bn.model_copy(update={"kind": "call_function"}), use_batch="True"
    )
    assert "BLOCK" in fam.space(batch, params, "tiling", {})
    assert "PROGS_PER_SM" in fam.space(batch, params, "mapping", {})
