"""ExpertProfiler and ExpertDebugger: evidence in, bottleneck/diagnosis out, deterministic."""

from __future__ import annotations

from expert_helpers import stage

from graph.records import (
    Attempt,
    Candidate,
    CheckReport,
    CompileReport,
    KernelCompileInfo,
    ProfileReport,
    TimingReport,
)
from nodes.expert import ExpertDebugger, ExpertProfiler
from nodes.models import DebuggerRequest, ProfilerRequest


def _attempt(**kw) -> Attempt:
    cand = Candidate(id="c1", source="x", stage="tiling", origin="seed:fused")
    return Attempt(candidate=cand, **kw)


def test_profiler_memory_bound_and_spills(descs):
    prof = ProfileReport(achieved_gbps=2100.0, roofline_fraction=0.49, bottleneck="memory")
    comp = CompileReport(ok=True, kernels=[KernelCompileInfo(name="k", registers=255, spills=64)])
    req = ProfilerRequest(
        stage=stage("tiling"), desc=descs["softmax"], attempt=_attempt(compile=comp), profile=prof
    )
    adv, usage = ExpertProfiler().advise(req)
    assert adv.bottleneck == "memory" and usage.calls == 1
    assert any("2100 GB/s" in e for e in adv.evidence)
    assert any("spilled" in e for e in adv.evidence) and "spills" in adv.plan
    assert ExpertProfiler().advise(req)[0] == adv
    comp = CompileReport(ok=True, kernels=[KernelCompileInfo(name="mm", registers=90, mma="mma.sync")])
    req = req.model_copy(update={"attempt": _attempt(compile=comp)})
    assert any(
        "mm: its dots compile to per-warp mma.sync" in e for e in ExpertProfiler().advise(req)[0].evidence
    )


def test_profiler_latency_from_timing(descs):
    t = TimingReport(measured=True, candidate_ms=0.005, eager_ms=0.01)
    req = ProfilerRequest(
        stage=stage("memory"), desc=descs["softmax"], attempt=_attempt(timing=t), profile=ProfileReport()
    )
    adv, _ = ExpertProfiler().advise(req)
    assert adv.bottleneck == "latency" and "launch" in adv.evidence[-1]


def test_profiler_names_a_host_bound_forward_from_its_cuda_graph_replay(descs):
    """A stage timing of a forward of many launches carries the replay time of the same launches
    (tools/worker/runner.py); a call much longer than that is host-bound, whatever its roofline."""
    prof = ProfileReport(roofline_fraction=0.05, bottleneck="compute")
    host = TimingReport(measured=True, candidate_ms=6.48, cudagraph_ms=0.56, candidate_launches=70)
    req = ProfilerRequest(
        stage=stage("mapping"), desc=descs["softmax"], attempt=_attempt(timing=host), profile=prof
    )
    adv, _ = ExpertProfiler().advise(req)
    assert adv.bottleneck == "latency"
    assert any("host-bound" in e and "70 launches" in e and "91%" in e for e in adv.evidence), adv.evidence
    assert "CUDA graph" in adv.plan
    gpu = host.model_copy(update={"candidate_ms": 0.6})  # the replay is hardly faster: not host-bound
    adv, _ = ExpertProfiler().advise(req.model_copy(update={"attempt": _attempt(timing=gpu)}))
    assert adv.bottleneck == "compute" and not any("host-bound" in e for e in adv.evidence)


def test_debugger_compile_rules(descs):
    cases = {
        "out of resource: shared memory, Required: 262144, Hardware limit: 232448": "shared_memory",
        "AssertionError: All values in both first input shape and other shape must be >= 16": "dot_shape",
        "AttributeError: module 'triton.language' has no attribute 'tanh'": "unsupported_op",
    }
    for err, rule in cases.items():
        a = _attempt(compile=CompileReport(ok=False, error=err, error_kind="triton", error_line=12))
        d, _ = ExpertDebugger().diagnose(DebuggerRequest(stage=stage(), desc=descs["softmax"], attempt=a))
        assert d.rule == rule, (err, d.rule)
        assert "line 12" in d.diagnosis and d.fix_plan


def test_debugger_check_rules(descs):
    a = _attempt(
        compile=CompileReport(ok=True),
        check=CheckReport(
            accepted=False, reasons=["mismatch: trial 1 max_abs_err 3.1e-2 > tol 1e-4"], max_abs_err=3.1e-2
        ),
    )
    d, _ = ExpertDebugger().diagnose(DebuggerRequest(stage=stage(), desc=descs["softmax"], attempt=a))
    assert d.rule == "mismatch" and "0.031" in d.diagnosis and "ieee" in d.fix_plan
    a = _attempt(
        compile=CompileReport(ok=True),
        check=CheckReport(accepted=False, reasons=["torch_arith: forward calls torch.exp outside a kernel"]),
    )
    d, _ = ExpertDebugger().diagnose(DebuggerRequest(stage=stage(), desc=descs["softmax"], attempt=a))
    assert d.rule == "torch_arith" and "Triton" in d.fix_plan
