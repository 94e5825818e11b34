"""Prompts name the run's real device and are steady: values that differ only in low-order digits
render byte-identical requests, so a recorded thread replays without request mismatches."""

from __future__ import annotations

from pathlib import Path

from llm_helpers import (
    KERNEL_REPLY,
    FakeOpenAI,
    best,
    code_request,
    debugger_request,
    decision,
    profiler_request,
    summary,
)

from graph.records import Attempt, CheckReport, CompileReport, Environment, ProfilerAdvice
from nodes import llm_prompts as P
from nodes.llm import LLMCode, LLMConfig, LLMDebugger, LLMProfiler, make_llm_role
from nodes.llm_record import ReplayChatModel


def _offline(cls: type, role: str):  # a role that is only rendered, never called
    return cls("fake", ReplayChatModel(role=role, entries=[]), LLMConfig())


def _on(req, device: str):
    return req.model_copy(update={"desc": req.desc.model_copy(update={"device": device})})


def test_system_prompt_names_the_runs_device_not_an_h200() -> None:
    role = _offline(LLMCode, "code")
    cpu_system, _, ref = role.render(_on(code_request("algorithm", "seed"), "cpu"))
    assert "no GPU in this run" in cpu_system and "Triton interpreter" in cpu_system
    assert "NVIDIA H200" not in cpu_system
    assert "common/system@2" in ref["parts"]
    gpu_system, _, _ = role.render(_on(code_request("algorithm", "seed"), "cuda"))
    assert "an NVIDIA GPU" in gpu_system and "no GPU" not in gpu_system
    for cls, role_name, req in (
        (LLMProfiler, "profiler", profiler_request("memory")),
        (LLMDebugger, "debugger", debugger_request("algorithm")),
    ):
        system, _, _ = _offline(cls, role_name).render(_on(req, "cpu"))
        assert "no GPU in this run" in system and "NVIDIA H200" not in system


def _timed_best(ms: float, err: float, gpu: str | None):
    b = best(ms=ms)
    timing = b.timing.model_copy(update={"env": Environment(gpu=gpu), "candidate_p20_ms": ms * 0.98})
    return b.model_copy(update={"timing": timing, "check": b.check.model_copy(update={"max_abs_err": err})})


def test_the_measured_gpu_is_named_with_its_peaks_or_peak_unknown() -> None:
    _, user, _ = _offline(LLMCode, "code").render(
        code_request("tiling", "refine").model_copy(update={"best": _timed_best(0.1, 1e-7, "NVIDIA H200")})
    )
    assert "measured on NVIDIA H200 (peaks 4300 GB/s HBM" in user
    _, user, _ = _offline(LLMCode, "code").render(
        code_request("tiling", "refine").model_copy(update={"best": _timed_best(0.1, 1e-7, "NVIDIA Z900")})
    )
    assert "measured on NVIDIA Z900 (peak unknown)" in user and "4300" not in user


def _jittered_requests(scale: float):
    """The same thread's requests with every measured value multiplied by `scale`."""

    def v(x: float) -> float:
        return x * scale

    b = _timed_best(v(0.14849600195884705), v(1.370124987909449e-07), "NVIDIA H200")
    note = f"mismatch: trial 2 max_abs_err {v(0.031234567)} > tol 1e-4"
    recent = [summary(1).model_copy(update={"note": note, "outcome": f"verified:{v(1.35274):.4f}ms"})]
    dec = decision("algorithm").model_copy(update={"why": f"median {v(0.1484960019)} ms vs {v(0.2)} ms"})
    advice = ProfilerAdvice(bottleneck="memory", evidence=[f"achieved {v(3456.789):.1f} GB/s"], plan="fuse")
    code = code_request("tiling", "refine", recent=recent, decisions=[dec]).model_copy(
        update={"best": b, "advice": advice}
    )
    prof = profiler_request("memory")
    att = prof.attempt.model_copy(update={"timing": b.timing})
    profile = prof.profile.model_copy(
        update={
            "achieved_gbps": v(1700.123),
            "evidence": [f"candidate {v(148.49600195)} us; ideal {v(125.3)} us", "timing noise 1.2%"],
        }
    )
    prof = prof.model_copy(update={"attempt": att, "profile": profile, "best": b, "recent": recent})
    dbg = debugger_request("algorithm")
    failed = Attempt(
        candidate=dbg.attempt.candidate,
        compile=CompileReport(ok=True),
        check=CheckReport(accepted=False, max_abs_err=v(0.4213), max_rel_err=v(1.5), reasons=[note]),
    )
    dbg = dbg.model_copy(update={"attempt": failed})
    return code, prof, dbg


def _render_all(reqs) -> list[tuple[str, str]]:
    code, prof, dbg = reqs
    return [
        _offline(LLMCode, "code").render(code)[:2],
        _offline(LLMProfiler, "profiler").render(prof)[:2],
        _offline(LLMDebugger, "debugger").render(dbg)[:2],
    ]


def test_low_order_digits_do_not_change_a_request() -> None:
    base = _render_all(_jittered_requests(1.0))
    assert base == _render_all(_jittered_requests(1.0 + 3e-7))  # e.g. another reduction order
    code_user, prof_user, dbg_user = (u for _, u in base)
    assert "0.148 ms" in code_user and "max abs err 1.37e-07" in code_user and "0.14849" not in code_user
    assert "max_abs_err 0.0312 > tol 1e-4" in code_user  # short numbers stay as written
    assert "verified:1.35ms" in code_user and "median 0.148 ms vs 0.2 ms" in code_user
    assert "achieved 3460 GB/s" in code_user
    assert "p20 0.146, p80 n/a" in prof_user and "candidate 148 us; ideal 125 us" in prof_user
    assert "max abs err 0.421, max rel err 1.5" in dbg_user
    # A real change in a measured value is still a different request.
    assert _render_all(_jittered_requests(1.05)) != base


def test_steady_leaves_versions_identifiers_and_integers_alone() -> None:
    text = "triton 3.6.0 on sm_90, 4096 rows, v1.2345, 0.123456789 ms, 2.5e-07, 1.23456e+03x"
    assert P.steady(text) == "triton 3.6.0 on sm_90, 4096 rows, v1.2345, 0.123 ms, 2.5e-07, 1230x"
    assert P.num(None) == "n/a" and P.num(0.0123456) == "0.0123" and P.num(1700.0) == "1700"


def test_a_rerun_with_jittered_values_replays_without_mismatch(tmp_path: Path) -> None:
    """Record the three roles' calls, then replay requests whose values moved in low-order digits:
    every call matches its recording by hash (no replay warning), as `egg replay --llm recorded` needs."""
    rec = tmp_path / "llm.jsonl"

    def calls(cfg: LLMConfig, scale: float) -> list[str]:
        code, prof, dbg = _jittered_requests(scale)
        notes = [make_llm_role("code", "openai:m", cfg).write(code).note]
        advice, _ = make_llm_role("profiler", "openai:m", cfg).advise(prof)
        diag, _ = make_llm_role("debugger", "openai:m", cfg).diagnose(dbg)
        return notes + advice.evidence + [diag.diagnosis]

    def script(body: dict) -> str:
        system = body["messages"][0]["content"]
        if "PROFILER" in system:
            return '{"bottleneck": "memory", "evidence": ["40% of roofline"], "plan": "NUM_WARPS=8"}'
        if "DEBUGGER" in system:
            return '{"diagnosis": "arange extent 1000", "fix_plan": "use a power of two"}'
        return KERNEL_REPLY

    with FakeOpenAI("callable", handler=script) as srv:
        calls(LLMConfig.resolve(env={}, base_url=srv.base_url, api_key="k", record_path=str(rec)), 1.0)
    replayed = calls(LLMConfig.resolve(env={}, replay_path=str(rec)), 1.0 - 2e-7)
    assert not [n for n in replayed if "replay warning" in n], replayed
    moved = calls(LLMConfig.resolve(env={}, replay_path=str(rec)), 1.1)
    assert any("replay warning" in n for n in moved)  # a real difference is still reported
