"""The expert's modes: seed distinctness, refine, tune (coordinate search, exhaustion), fix,
unsupported, determinism. Pure Python (descriptions come from the session fixture)."""

from __future__ import annotations

from expert_helpers import request, stage
from fakes import best_from_reply

from graph.records import (
    Attempt,
    Candidate,
    CheckReport,
    CompileReport,
    Diagnosis,
    ProfilerAdvice,
)
from nodes.expert import ExpertCode
from nodes.models import AttemptSummary, CodeReply


def _summary(r: CodeReply, i: int) -> AttemptSummary:
    return AttemptSummary(candidate_id=f"c{i}", origin=r.origin, params=r.params, outcome="verified")


def test_seeds_are_distinct_and_end_with_none(descs):
    code = ExpertCode()
    for name in ("gelu_chain", "softmax", "linear_gelu"):
        replies = [code.write(request(descs[name], seed_index=i, n_seeds=8)) for i in range(8)]
        got = [r for r in replies if r.source is not None]
        assert len(got) >= 2, name
        assert len({r.algorithm for r in got}) == len(got), name
        assert len({r.source for r in got}) == len(got), name
        # once past the distinct variants, every further index is None (no repeats)
        first_none = next(i for i, r in enumerate(replies) if r.source is None)
        assert all(r.source is None for r in replies[first_none:])
        assert all(r.unsupported is None for r in replies)


def test_determinism_same_request_same_source(descs):
    for name in ("act_zoo", "softmax_pro_epi", "bmm_residual"):
        a = ExpertCode().write(request(descs[name], seed_index=0))
        b = ExpertCode().write(request(descs[name], seed_index=0))
        assert a.source == b.source and a.params == b.params and a.origin == b.origin


def test_tune_walks_space_and_exhausts(descs):
    code = ExpertCode()
    desc = descs["gelu_chain"]
    seed = code.write(request(desc, seed_index=0))
    best = best_from_reply(seed)
    recent: list[AttemptSummary] = []
    seen = set()
    for i in range(50):
        r = code.write(request(desc, mode="tune", stage=stage("tiling"), best=best, recent=recent))
        if r.source is None:
            break
        assert r.origin.startswith("tune:BLOCK=")
        # exactly one param differs from the best kernel's
        diff = {k for k in r.params if r.params[k] != best.candidate.params.get(k)}
        assert diff == {"BLOCK"}, diff
        assert r.params["BLOCK"] not in seen
        seen.add(r.params["BLOCK"])
        assert f"BLOCK={r.params['BLOCK']}" in r.source or f", {r.params['BLOCK']})" in r.source
        recent.append(_summary(r, i + 1))
    else:
        raise AssertionError("tune never exhausted")
    assert len(seen) >= 3


def test_tune_uses_advice_order(descs):
    code = ExpertCode()
    desc = descs["linear_gelu"]
    best = best_from_reply(code.write(request(desc, seed_index=0)))
    compute = ProfilerAdvice(bottleneck="compute", evidence=[], plan="")
    r = code.write(request(desc, mode="tune", stage=stage("tiling"), best=best, advice=compute))
    assert r.origin.startswith("tune:BLOCK_M="), r.origin
    mem = code.write(request(desc, mode="tune", stage=stage("memory"), best=best, advice=compute))
    assert mem.origin.startswith("tune:num_stages="), mem.origin


def test_refine_from_three_pass_then_nothing(descs):
    code = ExpertCode()
    desc = descs["softmax"]
    three = next(
        code.write(request(desc, seed_index=i))
        for i in range(3)
        if code.write(request(desc, seed_index=i)).algorithm == "three-pass"
    )
    r1 = code.write(request(desc, mode="refine", best=best_from_reply(three)))
    assert r1.source is not None and r1.origin == "refine:online-max-sum"
    r2 = code.write(request(desc, mode="refine", best=best_from_reply(three), recent=[_summary(r1, 1)]))
    assert r2.source is not None and r2.origin == "refine:row-in-registers"
    r3 = code.write(
        request(desc, mode="refine", best=best_from_reply(three), recent=[_summary(r1, 1), _summary(r2, 2)])
    )
    assert r3.source is None
    # the whole-row kernel has nothing left to refine
    whole = code.write(request(desc, seed_index=0))
    assert whole.algorithm == "whole-row"
    assert code.write(request(desc, mode="refine", best=best_from_reply(whole))).source is None


def test_refine_library_to_fused(descs):
    code = ExpertCode()
    desc = descs["linear_gelu"]
    lib = next(
        r
        for r in (code.write(request(desc, seed_index=i)) for i in range(5))
        if r.algorithm == "library+fused-epilogue"
    )
    r = code.write(request(desc, mode="refine", best=best_from_reply(lib)))
    assert r.origin == "refine:fuse-epilogue-into-gemm" and r.algorithm == "tiled"
    assert "torch.nn.functional.linear" not in r.source


def test_fix_shrinks_then_switches_algorithm(descs):
    code = ExpertCode()
    desc = descs["linear_gelu"]
    seed = code.write(request(desc, seed_index=0))
    cand = Candidate(
        id="c1",
        source=seed.source,
        stage="algorithm",
        origin=seed.origin,
        family=seed.family,
        algorithm=seed.algorithm,
        params=seed.params,
    )
    failed = Attempt(
        candidate=cand,
        compile=CompileReport(ok=False, error="out of resource: shared memory", error_kind="triton"),
    )
    diag = Diagnosis(rule="shared_memory", diagnosis="x", fix_plan="y")
    r1 = code.write(request(desc, mode="fix", failed=failed, diagnosis=diag))
    assert r1.source is not None and r1.origin.startswith("fix:shared_memory:")
    assert (
        r1.params["BLOCK_M"] < seed.params["BLOCK_M"] or r1.params["num_stages"] < seed.params["num_stages"]
    )
    recent = [_summary(r1, 2)]
    r2 = code.write(request(desc, mode="fix", failed=failed, diagnosis=diag, recent=recent))
    assert r2.source is not None and r2.algorithm != seed.algorithm
    # keep asking: eventually no safer variant is left
    for i in range(10):
        recent.append(_summary(r2, 3 + i))
        r2 = code.write(request(desc, mode="fix", failed=failed, diagnosis=diag, recent=recent))
        if r2.source is None:
            break
    assert r2.source is None


def test_fix_mismatch_prefers_ieee(descs):
    code = ExpertCode()
    desc = descs["matmul_ta"]
    seed = code.write(request(desc, seed_index=0))
    assert seed.algorithm == "tiled"
    cand = Candidate(
        id="c1",
        source=seed.source,
        stage="algorithm",
        origin=seed.origin,
        family=seed.family,
        algorithm=seed.algorithm,
        params=seed.params,
    )
    failed = Attempt(
        candidate=cand,
        compile=CompileReport(ok=True),
        check=CheckReport(accepted=False, reasons=["mismatch: max_abs_err 3e-3 > 1e-4"]),
    )
    diag = Diagnosis(rule="mismatch", diagnosis="x", fix_plan="y")
    r = code.write(request(desc, mode="fix", failed=failed, diagnosis=diag))
    assert r.algorithm == "tiled-ieee", r.origin
    assert r.origin == "fix:mismatch:ieee"


def test_unsupported_names_the_op(descs):
    r = ExpertCode().write(request(descs["unsupported_sort"]))
    assert r.source is None
    assert r.unsupported and "sort" in r.unsupported


def test_empty_op_graph_is_unsupported(descs):
    desc = descs["softmax"].model_copy(update={"op_graph": [], "capture_error": "fx failed: data-dependent"})
    r = ExpertCode().write(request(desc))
    assert r.source is None and "data-dependent" in (r.unsupported or "")


def test_refine_fuses_kernel_per_op(descs):
    code = ExpertCode()
    desc = descs["gelu_chain"]
    per_op = code.write(request(desc, seed_index=1))
    assert per_op.algorithm == "kernel-per-op"
    r = code.write(request(desc, mode="refine", best=best_from_reply(per_op)))
    assert r.origin == "refine:fuse-chain" and r.algorithm == "fused"
    assert r.source.count("@triton.jit") < per_op.source.count("@triton.jit")
    assert code.write(request(desc, mode="refine", best=best_from_reply(r))).source is None


def _mismatch(r: CodeReply) -> tuple[Attempt, Diagnosis]:
    cand = Candidate(
        id="c1", source=r.source, stage="algorithm", origin=r.origin, family=r.family,
        algorithm=r.algorithm, params=r.params,
    )  # fmt: skip
    failed = Attempt(
        candidate=cand,
        compile=CompileReport(ok=True),
        check=CheckReport(accepted=False, reasons=["mismatch: max_abs_err 2.5e-4 > 1e-4"]),
    )
    return failed, Diagnosis(rule="mismatch", diagnosis="x", fix_plan="y")


def test_fix_mismatch_of_a_library_conv_turns_tf32_off_and_keeps_the_layout(descs):
    """A channels-last TF32 library conv that misses the bar (level2/71 on the H200) is fixed by
    the same candidate with cuDNN's TF32 off, not by giving up the layout (the NCHW library seed
    is tried anyway); the fixed candidate passes the static rules and the check, and a second
    mismatch switches algorithm."""
    from expert_helpers import check_jobs, run_jobs
    from expert_tasks import CASES

    code = ExpertCode()
    desc = descs["conv_bias_relu"]
    seed = code.write(request(desc, seed_index=0))
    assert seed.algorithm == "library-conv+tile-epilogue" and seed.params["CHANNELS_LAST"]
    failed, diag = _mismatch(seed)
    r = code.write(request(desc, mode="fix", failed=failed, diagnosis=diag))
    assert r.origin == "fix:mismatch:cudnn-fp32" and r.algorithm == seed.algorithm
    assert r.params["PRECISION"] == "cudnn-fp32" and r.params["CHANNELS_LAST"]
    assert "_cudnn_fp32(lambda: torch.nn.functional.conv2d(to_channels_last(" in r.source
    # the checker's static rules come first (the test runner's check below has none): assigning
    # torch.backends.cudnn.allow_tf32 failed them on the H200, so the fix never ran
    from tools.worker.static_rules import static_findings

    assert static_findings(r.source) == [], static_findings(r.source)
    src, ov = CASES["conv_bias_relu"]
    [res] = run_jobs(check_jobs(src, ov, [r], trials=2), interpret=True)
    assert res.get("ok"), res
    failed2, _ = _mismatch(r)
    r2 = code.write(request(desc, mode="fix", failed=failed2, diagnosis=diag))
    assert r2.source is not None and r2.algorithm != seed.algorithm, r2.origin


def test_a_failed_tuning_variant_is_never_repaired_by_another_algorithm(descs):
    """A tiling variant that overflows shared memory gets smaller tiles, or nothing: never the
    other algorithms, which the algorithm stage already measured (an H200 attention task's
    variant was 'repaired' into the ieee algorithm, 67.6 ms against the incumbent's 2.36)."""
    code = ExpertCode()
    desc = descs["linear_gelu"]
    seed = code.write(request(desc, seed_index=0))
    big = dict(seed.params, BLOCK_M=256, num_stages=4)
    variant = Candidate(
        id="t1",
        source=seed.source,
        stage="tiling",
        origin="tune:BLOCK_M=256",
        family=seed.family,
        algorithm=seed.algorithm,
        params=big,
    )
    failed = Attempt(
        candidate=variant,
        compile=CompileReport(ok=False, error="out of resource: shared memory", error_kind="triton"),
    )
    diag = Diagnosis(rule="shared_memory", diagnosis="x", fix_plan="y")
    recent: list = []
    algos = set()
    for i in range(10):
        r = code.write(
            request(desc, mode="fix", stage=stage("tiling"), failed=failed, diagnosis=diag, recent=recent)
        )
        if r.source is None:
            break
        algos.add(r.algorithm)
        recent.append(_summary(r, 2 + i))
    assert r.source is None and algos <= {seed.algorithm}, algos
    # the same failure of an algorithm seed still moves on to another algorithm
    seed_failed = failed.model_copy(update={"candidate": variant.model_copy(update={"origin": seed.origin})})
    recent = []
    for i in range(10):
        r = code.write(request(desc, mode="fix", failed=seed_failed, diagnosis=diag, recent=recent))
        if r.source is None or r.algorithm != seed.algorithm:
            break
        recent.append(_summary(r, 2 + i))
    assert r.source is not None and r.algorithm != seed.algorithm
