"""Every seed's kernels compile for sm_90 (triton.compile, no GPU needed): catches what the
interpreter does not check (tl.dot shape rules, constexpr misuse, layout/resource limits)."""

from __future__ import annotations

import pytest
from expert_helpers import check_jobs, run_jobs
from expert_tasks import CASES

# The priority-1 families plus a few broadcast / transpose variants.
COMPILE_CASES = [
    "gelu_chain",
    "act_zoo",
    "channel_bias",
    "softmax",
    "softmax_long",
    "log_softmax_dim1",
    "softmax_pro_epi",
    "linear_gelu",
    "bmm_residual",
    "matmul_ta",
    "red_argmax_last",
    "red_argmin_mid",
    "red_lse_mid",
    "red_prod_last",
    "red_sum_all_long",
    "loss_smooth_l1",
    "rn_layernorm_module",
    "rn_standardize",
    "rn_layernorm_long",
    "rn_l1_relu",
    "scan_reverse",
    "scan_masked",
    "scan_cumprod",
    "scan_cumsum_first",
    "conv_bias_relu",
    "attention",
    "sdpa_causal",
    "bn2d_split",
    "conv_bn_relu",
    "xent",
    "loss_kldiv",
    "pool_max2d",
    "pool_avg2d_nopad",
    "pool_max3d",
    "bn2d_running",
    "bn_functional_eval",
    "softmax_masked",
    "softmax_masked_dim1",
    "rn_mid_standardize",
    "rn_frobenius",
    "gn_module",
    "gn_functional_relu",
    "scan_exclusive_last",
    "scan_exclusive_first",
    "rl_cosine_mean",
    "rl_triplet_module_sum",
    "linear_bn1d_gelu",
    "pool_conv_relu_bias",
    "pool_conv_bias_rows",
    "pool_avg2d_chscale",
    "pool_cl_max2d_bias",
    "pool_cl_max3d",
]


@pytest.fixture(scope="module")
def compiled(seeds):
    jobs, keys = [], []
    for name in COMPILE_CASES:
        src, ov = CASES[name]
        for r in seeds[name]:
            jobs += [dict(j, kind="compile") for j in check_jobs(src, ov, [r])]
            keys.append((name, r.origin))
    return dict(zip(keys, run_jobs(jobs, interpret=False), strict=True))


@pytest.mark.parametrize("case", COMPILE_CASES)
def test_seeds_compile_for_sm90(case, seeds, compiled):
    for r in seeds[case]:
        res = compiled[(case, r.origin)]
        assert res.get("ok"), f"{case} {r.origin}: {res.get('error')}"
        assert res["kernels"], "no kernel compiled"
        for k in res["kernels"]:
            assert k["shared"] <= 227 * 1024, k


def test_tuned_gemm_tiles_compile(descs):
    """Largest tiles in the tuning space still compile (shared memory within sm_90 limits)."""
    from expert_helpers import request, stage

    from graph.records import BestKernel, Candidate, CheckReport
    from nodes.expert import ExpertCode

    code = ExpertCode()
    desc = descs["linear_gelu"]
    seed = code.write(request(desc, seed_index=0))
    params = dict(seed.params, BLOCK_M=128, BLOCK_N=256, BLOCK_K=64, num_stages=3)
    best = BestKernel(
        candidate=Candidate(
            id="c",
            source=seed.source,
            stage="tiling",
            origin=seed.origin,
            family=seed.family,
            algorithm=seed.algorithm,
            params=params,
        ),
        check=CheckReport(accepted=True),
    )
    r = code.write(request(desc, mode="tune", stage=stage("memory"), best=best))
    assert r.source is not None
    src, ov = CASES["linear_gelu"]
    (res,) = run_jobs([dict(check_jobs(src, ov, [r])[0], kind="compile")], interpret=False)
    assert res.get("ok"), res.get("error")


def test_tuned_variants_compile(descs):
    """Persistent grid-stride elementwise, eviction hints and split-K partials compile for sm_90."""
    from expert_helpers import request, stage

    from graph.records import BestKernel, Candidate, CheckReport
    from nodes.expert import ExpertCode

    code = ExpertCode()
    jobs = []
    for name, changes, st in [
        ("gelu_chain", {"PERSISTENT": True, "EVICT": "evict_first"}, "tiling"),
        ("softmax", {"EVICT": "evict_first"}, "mapping"),
        ("linear_gelu", {}, "mapping"),
    ]:
        seed = code.write(request(descs[name], seed_index=0 if name != "linear_gelu" else 1))
        params = dict(seed.params, **changes)
        best = BestKernel(
            candidate=Candidate(
                id="c",
                source=seed.source,
                stage="x",
                origin=seed.origin,
                family=seed.family,
                algorithm=seed.algorithm,
                params=params,
            ),
            check=CheckReport(accepted=True),
        )
        r = code.write(request(descs[name], mode="tune", stage=stage(st), best=best))
        assert r.source is not None
        for k, v in changes.items():
            assert r.params[k] == v
        src, ov = CASES[name]
        jobs.append(dict(check_jobs(src, ov, [r])[0], kind="compile"))
    for res in run_jobs(jobs, interpret=False):
        assert res.get("ok"), res.get("error")
