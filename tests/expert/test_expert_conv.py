"""The conv family: lone convolutions (2d/3d, depthwise, transposed, pointwise) become Triton
implicit-GEMM / direct kernels that match PyTorch under TRITON_INTERPRET=1 at small, odd sizes,
compile for sm_90, and keep working when the checker changes the size constants; conv + tail tasks
keep their libconv / pooling / batchnorm plans."""

from __future__ import annotations

from pathlib import Path

import pytest
from expert_helpers import check_jobs, describe_many, request, run_jobs, stage

from graph.records import BestKernel, Candidate, CheckReport
from nodes.expert import ExpertCode
from nodes.models import AttemptSummary

SUITE = Path(__file__).resolve().parents[2] / "evals" / "suites" / "egg"


def _suite(name: str) -> str:
    return (SUITE / name).read_text()


# name -> (source, CPU size overrides: odd, non-power-of-two; channels large enough to reach the
# GEMM algorithms, small enough for the interpreter)
CONV_CASES: dict[str, tuple[str, dict[str, int]]] = {
    "cv01": (_suite("cv01_conv2d_3x3.py"), {"B": 2, "C_IN": 17, "C_OUT": 20, "H": 9, "W": 11}),
    "cv02": (_suite("cv02_depthwise_conv2d.py"), {"B": 2, "C": 5, "H": 9, "W": 11}),
    "cv03": (_suite("cv03_conv_transpose2d.py"), {"B": 2, "C_IN": 16, "C_OUT": 12, "H": 7, "W": 9}),
    "cv04": (_suite("cv04_conv3d.py"), {"B": 2, "C_IN": 16, "C_OUT": 9, "D": 5, "H": 6, "W": 7}),
    "cv05": (_suite("cv05_conv_transpose3d.py"), {"B": 2, "C_IN": 5, "C_OUT": 9, "D": 4, "H": 5, "W": 6}),
    # 17 x 16 pixels: the pointwise GEMM's batch-per-grid-axis path (>= 2 row tiles per image)
    "d02": (_suite("d02_pointwise_conv2d.py"), {"BATCH": 2, "C_IN": 18, "C_OUT": 20, "H": 17, "W": 16}),
}
TAIL_CASES: dict[str, tuple[str, dict[str, int], str]] = {
    "d10": (
        _suite("d10_conv_relu_pool_bias.py"),
        {"BATCH": 2, "C_IN": 3, "C_OUT": 5, "H": 10, "W": 12},
        "pooling",
    ),
    "cv06": (
        _suite("cv06_pointwise_conv_bn_relu.py"),
        {"B": 2, "C_IN": 5, "C_OUT": 6, "H": 7, "W": 9},
        "batchnorm",
    ),
}
# The same tasks at other sizes (what the checker's second shape does): a candidate generated from
# the first description must be correct here too, so nothing size-dependent may be baked in.
OTHER_SIZES = {
    "cv01": {"B": 3, "C_IN": 6, "C_OUT": 13, "H": 7, "W": 5},
    "cv03": {"B": 1, "C_IN": 7, "C_OUT": 5, "H": 5, "W": 3},
    "cv05": {"B": 1, "C_IN": 4, "C_OUT": 3, "D": 3, "H": 2, "W": 5},
    "d02": {"BATCH": 3, "C_IN": 5, "C_OUT": 7, "H": 3, "W": 5},
}

UNSUPPORTED_REFLECT = """
import torch
import torch.nn as nn

B, C, H, W = 2, 4, 8, 8


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(C, 6, 3, padding=1, padding_mode="reflect")

    def forward(self, x):
        return self.conv(x)


def get_inputs():
    return [torch.randn(B, C, H, W)]


def get_init_inputs():
    return []
"""

# Geometry the suite tasks do not reach: stride / dilation / groups / 'same' padding / output
# padding / functional calls / 1-D / unbatched input / transposed phases without taps.
GEOMETRY = """
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        {init}

    def forward(self, x):
        return {expr}


def get_inputs():
    return [torch.randn({xshape})]


def get_init_inputs():
    return []
"""
GEOMETRY_CASES = {
    "s2_dil2_groups2": (
        "self.c = nn.Conv2d(16, 18, 3, stride=2, padding=2, dilation=2, groups=2)",
        "self.c(x)",
        "2, 16, 9, 8",
    ),
    "same_k4": ("self.c = nn.Conv2d(16, 17, 4, padding='same', bias=False)", "self.c(x)", "2, 16, 7, 8"),
    "dw_mult2_s2": ("self.c = nn.Conv2d(6, 12, 5, stride=2, padding=2, groups=6)", "self.c(x)", "2, 6, 9, 7"),
    "conv1d_unbatched": ("self.c = nn.Conv1d(16, 18, 5, stride=2, padding=3)", "self.c(x)", "16, 23"),
    "t2_s3_dil2_op1": (
        "self.c = nn.ConvTranspose2d(16, 17, 4, stride=3, padding=2, dilation=2, output_padding=1)",
        "self.c(x)",
        "2, 16, 4, 5",
    ),
    "t2_s4_k2_groups": (
        "self.c = nn.ConvTranspose2d(16, 34, 2, stride=4, groups=2)",
        "self.c(x)",
        "2, 16, 4, 3",
    ),
    "t2_depthwise": (
        "self.c = nn.ConvTranspose2d(6, 6, 4, stride=2, padding=1, groups=6)",
        "self.c(x)",
        "2, 6, 4, 5",
    ),
    # stride (2, 1) with a (3, 1) kernel: one dim phased, the other a single phase with one tap
    "t2_s2x1_k3x1": (
        "self.c = nn.ConvTranspose2d(16, 18, (3, 1), stride=(2, 1), padding=(1, 0))",
        "self.c(x)",
        "2, 16, 5, 6",
    ),
    # 47 input channels, one group: the TF32 seed's channels-last copy is padded to 48
    "c47_padded": ("self.c = nn.Conv2d(47, 24, 3, padding=1)", "self.c(x)", "2, 47, 6, 7"),
    "t47_padded": ("self.c = nn.ConvTranspose2d(47, 20, 3)", "self.c(x)", "2, 47, 5, 6"),
    # an output row shorter than the stride: phases without rows, so one launch per phase
    "t2_rows_below_stride": (
        "self.c = nn.ConvTranspose2d(16, 18, 2, stride=4)",
        "self.c(x)",
        "2, 16, 1, 3",
    ),
    "f_conv2d": (
        "self.w = nn.Parameter(torch.randn(18, 8, 3, 3) * 0.1)\n        self.b = nn.Parameter(torch.randn(18))",
        "F.conv2d(x, self.w, self.b, 2, 1, 1, 2)",
        "2, 16, 9, 8",
    ),
    "f_conv_transpose2d": (
        "self.w = nn.Parameter(torch.randn(16, 17, 3, 3) * 0.1)",
        "F.conv_transpose2d(x, self.w, stride=2, padding=1, output_padding=1)",
        "2, 16, 4, 5",
    ),
}


def _geometry_source(init: str, expr: str, xshape: str) -> str:
    return GEOMETRY.replace("{init}", init).replace("{expr}", expr).replace("{xshape}", xshape)


ALL: dict[str, tuple[str, dict[str, int]]] = {
    **CONV_CASES,
    **{k: (s, o) for k, (s, o, _) in TAIL_CASES.items()},
    **{f"geo_{k}": (_geometry_source(*v), {}) for k, v in GEOMETRY_CASES.items()},
    "reflect": (UNSUPPORTED_REFLECT, {}),
}


@pytest.fixture(scope="module")
def cdescs():
    names = list(ALL)
    return dict(zip(names, describe_many([ALL[n] for n in names]), strict=True))


def _seeds(desc, policy: str = "mixed"):
    code = ExpertCode()
    out = []
    for i in range(6):
        r = code.write(request(desc, seed_index=i, n_seeds=6, policy=policy))
        if r.source is None:
            break
        out.append(r)
    return out


@pytest.fixture(scope="module")
def cseeds(cdescs):
    return {n: _seeds(d) for n, d in cdescs.items() if n != "reflect"}


@pytest.fixture(scope="module")
def cchecks(cseeds):
    jobs, keys = [], []
    for name, replies in cseeds.items():
        src, ov = ALL[name]
        for r in replies:
            jobs += check_jobs(src, ov, [r], trials=2)
            keys.append((name, r.origin))
        if name in OTHER_SIZES:
            for r in replies:
                jobs += check_jobs(src, OTHER_SIZES[name], [r])
                keys.append((name + "@other", r.origin))
    return dict(zip(keys, run_jobs(jobs, interpret=True), strict=True))


@pytest.mark.parametrize("case", list(CONV_CASES))
def test_lone_conv_is_a_triton_kernel(case, cseeds, cchecks):
    replies = cseeds[case]
    assert replies, f"{case}: no seed"
    assert {r.family for r in replies} == {"conv"}
    for r in replies:
        res = cchecks[(case, r.origin)]
        assert res.get("ok"), f"{case} {r.origin}: {res.get('error')}\n{res.get('traceback', '')}"
        src = r.source
        assert "@triton.jit" in src and "class ModelNew(nn.Module)" in src and "class Model(" not in src
        # no library convolution anywhere in the candidate
        for lib in ("F.conv", "functional.conv", "torch.conv", "self.conv(", "self.deconv("):
            assert lib not in src, (case, lib)
        assert r.params.get("algorithm") == r.algorithm


@pytest.mark.parametrize("case", list(OTHER_SIZES))
def test_same_candidate_at_other_sizes(case, cseeds, cchecks):
    for r in cseeds[case]:
        res = cchecks[(case + "@other", r.origin)]
        assert res.get("ok"), f"{case} {r.origin}: {res.get('error')}\n{res.get('traceback', '')}"


def test_algorithm_choice(cseeds):
    assert cseeds["cv02"][0].algorithm == "direct"  # depthwise: no GEMM tile of padding columns
    assert cseeds["cv01"][0].algorithm == "implicit-gemm"
    assert cseeds["cv05"][0].algorithm == "implicit-gemm-flatk"  # 5 channels: flattened K
    assert [r.algorithm for r in cseeds["d02"]] == ["implicit-gemm"]  # pointwise: one plain GEMM
    # The first GEMM seed is TF32 like PyTorch's cuDNN convolutions; the others 3xTF32 with the
    # weights split once (three TF32 dots a K step, the input tile split in registers).
    for case in ("cv01", "cv03", "cv04", "d02"):
        for i, r in enumerate(cseeds[case]):
            want = "tf32" if i == 0 else "tf32x3-bsplit"
            assert r.params["PRECISION"] == want, (case, r.algorithm)
            dots = [ln for ln in r.source.splitlines() if "tl.dot(" in ln]
            assert dots and all('input_precision="tf32"' in ln for ln in dots), dots
            if i:
                assert "_tf32_split(wp" in r.source and "bl = tl.load(wl_base + b_off" in r.source


@pytest.mark.parametrize("case", [f"geo_{k}" for k in GEOMETRY_CASES])
def test_conv_geometry(case, cseeds, cchecks):
    assert cseeds[case] and {r.family for r in cseeds[case]} == {"conv"}
    for r in cseeds[case]:
        res = cchecks[(case, r.origin)]
        assert res.get("ok"), f"{case} {r.origin}: {res.get('error')}\n{res.get('traceback', '')}"


@pytest.mark.parametrize("case", list(TAIL_CASES))
def test_conv_with_tail_keeps_its_family(case, cseeds, cchecks):
    replies = cseeds[case]
    assert replies and {r.family for r in replies} == {TAIL_CASES[case][2]}
    for r in replies:
        res = cchecks[(case, r.origin)]
        assert res.get("ok"), f"{case} {r.origin}: {res.get('error')}\n{res.get('traceback', '')}"


def test_uncovered_conv_is_named(cdescs):
    r = ExpertCode().write(request(cdescs["reflect"], seed_index=0))
    assert r.source is None
    assert r.unsupported and "conv2d" in r.unsupported and "padding_mode" in r.unsupported


def test_strict_policy_keeps_the_conv_kernels(cdescs, descs):
    strict = _seeds(cdescs["cv01"], "strict")
    assert [r.algorithm for r in strict] == [r.algorithm for r in _seeds(cdescs["cv01"])]
    # conv + elementwise tail: libconv's library seed is dropped, its Triton conv seeds remain
    tail = _seeds(descs["conv_bias_relu"], "strict")
    assert tail and all(r.family == "libconv" and not r.algorithm.startswith("library") for r in tail)
    assert "library-conv+fused-epilogue" in {r.algorithm for r in _seeds(descs["conv_bias_relu"])}


# Compiled at the tasks' own channel counts (the tiles the launcher picks depend on them) with tiny
# images: a compile job only records the launches, it runs no kernel.
COMPILE = {
    "cv01": {"B": 1, "H": 9, "W": 9},
    "cv02": {"B": 1, "H": 9, "W": 9},
    "cv03": {"B": 1, "H": 5, "W": 5},
    "cv04": {"B": 1, "D": 3, "H": 5, "W": 5},
    "cv05": {"B": 1, "D": 3, "H": 5, "W": 5},
    "d02": {"BATCH": 1, "H": 17, "W": 16},
    "geo_t2_s4_k2_groups": {},
    "geo_t2_s2x1_k3x1": {},
    "geo_conv1d_unbatched": {},
}


def test_conv_seeds_compile_for_sm90(cseeds):
    """Every seed compiles for sm_90 within shared memory, and a forward launches the implicit
    GEMM once: the stride phases of a transposed conv (cv03: 4, cv05: 8, the stride-4 case: 16,
    some reading no tap) share one launch (PHASED). On the H200 cv05's eight launches of ~45
    arguments made its forward host-bound: 0.565 ms launched against 0.370 ms replayed."""
    jobs, keys = [], []
    for name, ov in COMPILE.items():
        src = ALL[name][0]
        for r in cseeds[name]:
            jobs += [dict(j, kind="compile") for j in check_jobs(src, ov, [r])]
            keys.append((name, r.origin, r.algorithm))
    for key, res in zip(keys, run_jobs(jobs, interpret=False), strict=True):
        assert res.get("ok"), f"{key}: {res.get('error')}"
        for k in res["kernels"]:
            assert k["shared"] <= 227 * 1024, (key, k)
        igemm = [k for k in res["kernels"] if k["kernel"] == "conv_igemm_kernel"]
        assert len(igemm) == (1 if key[2].startswith("implicit-gemm") else 0), (key, res["kernels"])


def _best(seed, params):
    return BestKernel(
        candidate=Candidate(
            id="s",
            source=seed.source,
            stage="algorithm",
            origin=seed.origin,
            family=seed.family,
            algorithm=seed.algorithm,
            params=params,
        ),
        check=CheckReport(accepted=True),
    )


@pytest.mark.parametrize("case", ["cv01", "cv02"])
def test_tuning_space_points_are_correct(case, cdescs, cseeds):
    """Every point of the conv tuning stages generates, is distinct, and verifies."""
    code = ExpertCode()
    seed = cseeds[case][0]
    best = _best(seed, seed.params)
    replies = []
    for st in ("mapping", "tiling", "memory"):
        recent: list[AttemptSummary] = []
        for i in range(40):
            r = code.write(request(cdescs[case], mode="tune", stage=stage(st), best=best, recent=recent))
            if r.source is None:
                break
            replies.append(r)
            recent.append(
                AttemptSummary(candidate_id=f"t{i}", origin=r.origin, params=r.params, outcome="verified")
            )
    assert replies
    assert len({r.origin for r in replies}) == len(replies)
    src, ov = ALL[case]
    for r, res in zip(replies, run_jobs(check_jobs(src, ov, replies), interpret=True), strict=True):
        assert res.get("ok"), f"{case} {r.origin}: {res.get('error')}"


def test_largest_tiles_compile(cdescs, cseeds):
    """The largest tiles in the space (and ieee precision) still compile within sm_90 limits."""
    code = ExpertCode()
    jobs = []
    for case, changes in [
        ("cv01", {"BLOCK_M": 256, "BLOCK_N": 128, "BLOCK_K": 32, "num_stages": 3}),
        ("d02", {"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64, "num_stages": 2}),
        ("cv03", {"PRECISION": "ieee"}),
        ("cv01", {"PRECISION": "tf32"}),
    ]:
        seed = cseeds[case][0]
        params = dict(seed.params, **changes)
        r = code.write(request(cdescs[case], mode="tune", stage=stage("memory"), best=_best(seed, params)))
        assert r.source is not None
        for k, v in changes.items():
            assert r.params[k] == v
        jobs.append(dict(check_jobs(ALL[case][0], COMPILE[case], [r])[0], kind="compile"))
    for res in run_jobs(jobs, interpret=False):
        assert res.get("ok"), res.get("error")


def test_refinement_matches_the_references_tf32_convolution(cdescs, cseeds):
    """A 3xTF32 conv seed is refined to one TF32 MMA (what cuDNN does for fp32 by default); the
    checker, not the expert, decides whether that is accurate enough. A refinement of that
    refinement offers nothing further."""
    code = ExpertCode()
    seed = cseeds["cv01"][1]
    assert seed.params["PRECISION"] == "tf32x3-bsplit"
    r = code.write(request(cdescs["cv01"], mode="refine", best=_best(seed, seed.params)))
    assert r.origin == "refine:tf32-like-the-reference" and r.params["PRECISION"] == "tf32"
    assert 'input_precision="tf32"' in r.source
    again = code.write(request(cdescs["cv01"], mode="refine", best=_best(r, r.params)))
    assert again.source is None


def test_odd_channels_are_padded_to_whole_16_byte_runs(cseeds):
    """47 input channels (KernelBench's ragged conv shapes): the TF32 seed's channels-last input
    and weights get a zero 48th channel, so its implicit GEMM loads both operands with 16-byte
    async copies; the same seed without the padding loads 4 bytes at a time. Padding is only
    where it adds at most a quarter (the launcher's condition and the defaults' agree)."""
    from nodes.expert.families.conv import _PAD_CHANNELS, _pad_channels

    for c in range(16, 300):
        assert _pad_channels(c) == bool(eval(_PAD_CHANNELS, {}, {"cpg": c})), c  # noqa: S307
    assert _pad_channels(47) and _pad_channels(70) and not _pad_channels(19) and not _pad_channels(48)
    for name in ("geo_c47_padded", "geo_t47_padded"):
        (seed,) = [r for r in cseeds[name] if r.params.get("PRECISION") == "tf32"]
        assert seed.params["CHANNELS_LAST"], name
        plain = seed.model_copy(update={"source": seed.source.replace("if G == 1 and cpg % 16", "if False")})
        assert plain.source != seed.source
        src = ALL[name][0]
        jobs = [dict(j, kind="compile") for r in (seed, plain) for j in check_jobs(src, {}, [r])]
        padded, unpadded = (
            [k for k in res["kernels"] if k["kernel"] == "conv_igemm_kernel"][0]
            for res in run_jobs(jobs, interpret=False)
        )
        assert padded["cp16"] > 0 and padded["cp4"] == 0, (name, padded)
        assert unpadded["cp4"] > 0, (name, unpadded)
