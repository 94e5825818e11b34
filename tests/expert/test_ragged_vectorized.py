"""Ragged sizes keep vectorized memory access (issue 13's ragged-edge shapes).

Triton proves an access aligned, and so moves it as 128-bit vectors, only when its offsets and
mask are multiples of 16 elements; a launch specialises each int argument divisible by 16. A
kernel that masks every block against a size like 3071 x 294911 therefore loads and stores one
32-bit word at a time and streams at a fraction of the bandwidth (H100, 2026-12-05: the ragged
ReLU at 0.92 of eager, the ragged online softmax at 0.74). The elementwise and softmax row
kernels mask only the block an end cuts. Each seed here is compiled for sm_90 with the GPU
launch's own specialisation and its PTX counted, and runs under the interpreter against the
reference at the same ragged sizes (so both the unmasked and the masked path are checked)."""

from __future__ import annotations

import pytest
from expert_helpers import EXAMPLES, check_jobs, describe_many, request, run_jobs
from expert_tasks import ACT_ZOO, MASKED_SOFTMAX, ROWNORM_CASES, ROWNORM_TEMPLATE, SOFTMAX_PRO_EPI


def _rownorm(case: str) -> str:
    init, expr = ROWNORM_CASES[case]
    return ROWNORM_TEMPLATE.replace("{init}", init).replace("{expr}", expr)


# (source, ragged sizes, algorithms to check, the kernel that streams the tensor)
RAGGED = {
    "gelu_chain": ((EXAMPLES / "gelu_chain.py").read_text(), {"BATCH": 9, "DIM": 1001}),
    "act_zoo": (ACT_ZOO, {"N": 7, "D": 1003}),
    "softmax_long": ((EXAMPLES / "softmax.py").read_text(), {"BATCH": 3, "DIM": 20001}),
    "softmax_pro_epi": (SOFTMAX_PRO_EPI, {"B": 3, "D": 17003}),
    "softmax_masked": (MASKED_SOFTMAX.replace("{dim}", "-1"), {"B": 1, "M": 3, "N": 16411}),
    # long rows: LayerNorm (weight and bias per column), a scan-free L1 normalisation with a
    # per-column weight, and a standardisation (Welford partials in the split-row kernels)
    "rn_layernorm_long": (_rownorm("rn_layernorm_module"), {"B": 1, "S": 3, "D": 17003}),
    "rn_l1_relu": (_rownorm("rn_l1_relu"), {"B": 1, "S": 3, "D": 17011}),
    "rn_standardize": (_rownorm("rn_standardize"), {"B": 1, "S": 2, "D": 20001}),
}
# the kernels that stream the tensor, per algorithm
STREAMING = {
    "fused": ("ew_fused_kernel",),
    "online": ("sm_row_kernel",),
    "three-pass": ("sm_row_kernel",),
    "split-row": ("rn_split_pass1_kernel", "rn_split_out_kernel"),
    "multi-pass": ("rn_multi_pass_kernel",),
}


@pytest.fixture(scope="module")
def ragged():
    from nodes.expert import ExpertCode

    code = ExpertCode()
    names = list(RAGGED)
    descs = describe_many([RAGGED[n] for n in names])
    picked = []
    for name, desc in zip(names, descs, strict=True):
        for i in range(8):
            r = code.write(request(desc, seed_index=i, n_seeds=8))
            if r.source is None:
                break
            if r.algorithm in STREAMING:
                picked.append((name, r))
    assert {n for n, _ in picked} == set(RAGGED), "a case lost its streaming seed"
    jobs = []
    for name, r in picked:
        src, ov = RAGGED[name]
        jobs += check_jobs(src, ov, [r], trials=2)
    checks = run_jobs(jobs, interpret=True)
    compiled = run_jobs([dict(j, kind="compile") for j in jobs], interpret=False)
    return list(zip(picked, checks, compiled, strict=True))


def test_ragged_seeds_match_the_reference(ragged):
    for (name, r), check, _ in ragged:
        assert check.get("ok"), f"{name} {r.algorithm}: {check.get('error')}"


def test_ragged_streams_move_128_bit_vectors(ragged):
    for (name, r), _, comp in ragged:
        assert comp.get("ok"), f"{name} {r.algorithm}: {comp.get('error')}"
        ks = [k for k in comp["kernels"] if k["kernel"] in STREAMING[r.algorithm]]
        assert ks, f"{name} {r.algorithm}: none of {STREAMING[r.algorithm]} launched"
        for k in ks:
            # the whole blocks: the streamed tensor's loads (and stores) are 128-bit vectors
            stores = k["kernel"] != "rn_split_pass1_kernel"  # partials only: no row store
            assert k["ld_v4"] > 0 and (k["st_v4"] > 0 or not stores), f"{name} {r.algorithm}: {k}"
