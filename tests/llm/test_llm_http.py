"""The LLM roles over real HTTP (ChatOpenAI -> fake OpenAI-compatible server on 127.0.0.1)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from llm_helpers import (
    KERNEL_REPLY,
    KERNEL_SOURCE,
    FakeOpenAI,
    code_request,
    debugger_request,
    profiler_request,
)

from nodes.llm import LLMConfig, make_llm_role
from nodes.models import (
    BudgetExceeded,
    CodeModel,
    DebuggerModel,
    ModelFormatError,
    ModelUnavailableError,
    ProfilerModel,
)

ADVICE = {"bottleneck": "memory", "evidence": ["1700 GB/s is 40% of 4.3 TB/s"], "plan": "use NUM_WARPS=8"}
DIAG = {"diagnosis": "tl.arange(0, 1000) is not a power of two", "fix_plan": "use BLOCK_SIZE (1024) and mask"}


def cfg_for(srv: FakeOpenAI, **kw: object) -> LLMConfig:
    base = {"timeout_s": 2.0, "max_retries": 1, "format_retries": 2}
    base.update(kw)
    return LLMConfig.resolve(env={}, base_url=srv.base_url, api_key="sk-test-123", **base)


def user_text(body: dict) -> str:
    return "\n".join(m["content"] for m in body["messages"] if m["role"] == "user")


def test_roles_implement_the_protocols() -> None:
    with FakeOpenAI("fixed", reply=KERNEL_REPLY) as srv:
        cfg = cfg_for(srv)
        assert isinstance(make_llm_role("code", "openai:m", cfg), CodeModel)
        assert isinstance(make_llm_role("profiler", "openai:m", cfg), ProfilerModel)
        assert isinstance(make_llm_role("debugger", "openai:m", cfg), DebuggerModel)
        assert make_llm_role("code", "openai:m", cfg).name == "openai:m"
        with pytest.raises(ValueError, match="openai:<model-name>"):
            make_llm_role("code", "anthropic:x", cfg)


def test_correct_kernel_reply_is_parsed_with_usage_and_prompt_ref() -> None:
    with FakeOpenAI("fixed", reply=KERNEL_REPLY) as srv:
        code = make_llm_role("code", "openai:fake-coder", cfg_for(srv))
        reply = code.write(code_request("algorithm", "seed"))
        assert reply.source == KERNEL_SOURCE
        assert reply.origin == "seed:llm-0" and reply.params == {"BLOCK_SIZE": 1024, "NUM_WARPS": 4}
        assert reply.note.startswith("fused scale")
        assert (
            reply.prompt is not None
            and reply.prompt["id"] == "algorithm/code"
            and len(reply.prompt["sha256"]) == 64
        )
        assert reply.usage.calls == 1 and reply.usage.input_tokens > 100 and reply.usage.output_tokens > 100
        body = srv.requests[0]
        assert body["model"] == "fake-coder" and body["temperature"] == 0.8  # seeds sample with diversity
        assert "seed 1 of 4" in user_text(body)
        assert srv.auth_headers[0] == "Bearer sk-test-123"
        code.write(code_request("memory", "tune"))
        assert srv.requests[1]["temperature"] == 0.1  # tuning stays near-greedy


def test_broken_code_reply_is_still_returned() -> None:
    broken = "CHANGE: try\n```python\nclass ModelNew(nn.Module:\n    pass\n```\n"
    with FakeOpenAI("fixed", reply=broken) as srv:
        reply = make_llm_role("code", "openai:m", cfg_for(srv)).write(code_request("algorithm", "seed"))
        assert reply.source == "class ModelNew(nn.Module:\n    pass\n" and len(srv.requests) == 1


@pytest.mark.parametrize("mode", ["refuse", "truncated"])
def test_unusable_code_reply_raises_format_error_after_bounded_retries(mode: str) -> None:
    with FakeOpenAI(mode) as srv:
        code = make_llm_role("code", "openai:m", cfg_for(srv, format_retries=2))
        with pytest.raises(ModelFormatError, match="no usable reply after 3 tries") as ei:
            code.write(code_request("algorithm", "seed"))
        assert len(srv.requests) == 3
        # Retries carry a short correction, not a growing transcript.
        assert srv.requests[1]["messages"][-1]["content"].startswith("Your reply could not be used")
        assert len(srv.requests[2]["messages"]) == len(srv.requests[1]["messages"]) == 4
        assert ei.value.usage.calls == 3  # type: ignore[attr-defined]


def test_invalid_json_raises_format_error() -> None:
    with FakeOpenAI("invalid_json") as srv:
        prof = make_llm_role("profiler", "openai:m", cfg_for(srv, format_retries=1))
        with pytest.raises(ModelFormatError, match="no JSON object"):
            prof.advise(profiler_request())
        assert len(srv.requests) == 2


def test_http_500_is_unavailable_within_bounded_time() -> None:
    with FakeOpenAI("error500") as srv:
        code = make_llm_role("code", "openai:m", cfg_for(srv, max_retries=2))
        t0 = time.monotonic()
        with pytest.raises(ModelUnavailableError) as ei:
            code.write(code_request())
        elapsed = time.monotonic() - t0
        assert len(srv.requests) == 3 and elapsed < 6.0
        assert srv.base_url in str(ei.value) and "last status 500" in str(ei.value)


def test_429_with_retry_after_is_honoured_then_succeeds() -> None:
    with FakeOpenAI("rate_limit_once", reply=KERNEL_REPLY, retry_after=1.0) as srv:
        code = make_llm_role("code", "openai:m", cfg_for(srv))
        t0 = time.monotonic()
        reply = code.write(code_request())
        assert reply.source == KERNEL_SOURCE
        assert srv.statuses == [429, 200] and time.monotonic() - t0 >= 0.95


def test_hanging_server_times_out_as_unavailable() -> None:
    with FakeOpenAI("hang", hang_s=30) as srv:
        code = make_llm_role("code", "openai:m", cfg_for(srv, timeout_s=1.0, max_retries=1))
        t0 = time.monotonic()
        with pytest.raises(ModelUnavailableError, match="no reply within 1s"):
            code.write(code_request())
        assert time.monotonic() - t0 < 5.0


def test_endpoint_down_is_unavailable() -> None:
    srv = FakeOpenAI("fixed", reply=KERNEL_REPLY).start()
    url = srv.base_url
    srv.stop()
    cfg = LLMConfig.resolve(env={}, base_url=url, api_key="k", timeout_s=1.0, max_retries=1)
    with pytest.raises(ModelUnavailableError, match="cannot reach model endpoint http://127.0.0.1"):
        make_llm_role("code", "openai:m", cfg).write(code_request())


def test_profiler_and_debugger_structured_replies() -> None:
    with FakeOpenAI("fixed", reply=json.dumps(ADVICE)) as srv:
        advice, usage = make_llm_role("profiler", "openai:m", cfg_for(srv)).advise(profiler_request("memory"))
        assert advice.bottleneck == "memory" and advice.plan == "use NUM_WARPS=8" and advice.source == "llm"
        assert advice.prompt and advice.prompt["id"] == "memory/profiler"
        assert usage.calls == 1 and usage.input_tokens > 0
        assert srv.requests[0]["response_format"]["type"] == "json_schema"
    with FakeOpenAI("fixed", reply="Looking at it:\n```json\n" + json.dumps(DIAG) + "\n```") as srv:
        diag, _ = make_llm_role("debugger", "openai:m", cfg_for(srv)).diagnose(debugger_request())
        assert diag.rule == "triton" and "power of two" in diag.diagnosis and diag.source == "llm"
        assert diag.prompt and diag.prompt["id"] == "algorithm/debugger"


def test_structured_auto_falls_back_to_text_when_server_rejects_it() -> None:
    with FakeOpenAI("fixed", reply=json.dumps(ADVICE), reject_response_format=True) as srv:
        prof = make_llm_role("profiler", "openai:m", cfg_for(srv))
        advice, _ = prof.advise(profiler_request())
        advice2, _ = prof.advise(profiler_request())
        assert advice.plan == advice2.plan == "use NUM_WARPS=8"
        assert srv.statuses == [400, 200, 200]
        assert ["response_format" in b for b in srv.requests] == [True, False, False]
    with FakeOpenAI("fixed", reply=json.dumps(ADVICE)) as srv:
        make_llm_role("profiler", "openai:m", cfg_for(srv, structured="text")).advise(profiler_request())
        assert "response_format" not in srv.requests[0]


def test_budgets_stop_calls_and_name_the_budget() -> None:
    with FakeOpenAI("fixed", reply=KERNEL_REPLY) as srv:
        cfg = cfg_for(srv, run_tokens=1000)
        code = make_llm_role("code", "openai:m", cfg)
        code.write(code_request())  # spends > 1000 tokens
        with pytest.raises(BudgetExceeded) as ei:
            make_llm_role("debugger", "openai:m", cfg).diagnose(debugger_request())  # shared ledger
        assert ei.value.which == "run tokens" and len(srv.requests) == 1

        cfg = cfg_for(srv, stage_tokens=1000)
        code = make_llm_role("code", "openai:m", cfg)
        code.write(code_request("algorithm", "seed"))
        with pytest.raises(BudgetExceeded, match=r"stage tokens \(algorithm\)"):
            code.write(code_request("algorithm", "refine"))
        assert code.write(code_request("mapping", "tune")).source is not None  # another stage has its own

        cfg = cfg_for(srv, max_calls=2)
        code = make_llm_role("code", "openai:m", cfg)
        code.write(code_request())
        code.write(code_request())
        with pytest.raises(BudgetExceeded, match="calls"):
            code.write(code_request())


def test_config_resolution_explicit_beats_environment() -> None:
    env = {"OPENAI_BASE_URL": "http://127.0.0.1:1/v1", "OPENAI_API_KEY": "env-key"}
    cfg = LLMConfig.resolve(env=env)
    assert (
        cfg.base_url == "http://127.0.0.1:1/v1"
        and cfg.api_key
        and cfg.api_key.get_secret_value() == "env-key"
    )
    cfg = LLMConfig.resolve(env=env, base_url="http://127.0.0.1:2/v1", api_key="explicit")
    assert cfg.base_url == "http://127.0.0.1:2/v1" and cfg.api_key.get_secret_value() == "explicit"  # type: ignore[union-attr]
    assert "explicit" not in repr(cfg) and "explicit" not in cfg.model_dump_json()
    assert cfg.timeout_s == 120.0 and cfg.temperatures["code.seed"] == 0.8
    with pytest.raises(ValueError, match="unknown temperature"):
        LLMConfig.resolve(env={}, temperatures={"code.sed": 0.5})
    with pytest.raises(ModelUnavailableError, match="OPENAI_API_KEY"):
        make_llm_role("code", "openai:m", LLMConfig.resolve(env={}))


def test_later_stage_prompt_never_contains_earlier_transcript() -> None:
    marker = "PROSE-ONLY-IN-THE-ALGORITHM-REPLY"
    with FakeOpenAI("fixed", reply=marker + "\n" + KERNEL_REPLY) as srv:
        code = make_llm_role("code", "openai:m", cfg_for(srv, tune_sweep=False))
        code.write(code_request("algorithm", "seed"))
        for stage in ("mapping", "tiling", "memory"):
            code.write(code_request(stage, "tune"))
        assert len(srv.requests) == 4
        for body in srv.requests[1:]:
            assert all(marker not in m["content"] for m in body["messages"])
            assert len(body["messages"]) == 2  # system + user, no history


def test_tiling_tune_sweeps_declared_tunables_before_asking_the_model() -> None:
    with FakeOpenAI("fixed", reply=KERNEL_REPLY) as srv:
        code = make_llm_role("code", "openai:m", cfg_for(srv))
        seen = []
        for _ in range(3):
            r = code.write(code_request("tiling", "tune", best_params={"BLOCK_SIZE": 1024, "NUM_WARPS": 4}))
            assert r.usage.calls == 0 and r.source and r.origin.startswith("tune:")
            seen.append(r.params)
        assert seen == [
            {"BLOCK_SIZE": 512, "NUM_WARPS": 4},
            {"BLOCK_SIZE": 2048, "NUM_WARPS": 4},
            {"BLOCK_SIZE": 1024, "NUM_WARPS": 8},
        ]
        assert srv.requests == []
        r = code.write(code_request("tiling", "tune", best_params={"BLOCK_SIZE": 1024, "NUM_WARPS": 4}))
        assert r.usage.calls == 1 and len(srv.requests) == 1  # sweep exhausted: the model is asked


def test_fake_server_runs_as_a_script(tmp_path: Path) -> None:
    reply = tmp_path / "reply.md"
    reply.write_text(KERNEL_REPLY)
    script = Path(__file__).resolve().parent / "fake_openai.py"
    proc = subprocess.Popen(
        [sys.executable, str(script), "--mode", "fixed", "--reply-file", str(reply), "--port", "0"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        url = line.rsplit(" ", 1)[-1].strip()
        assert url.startswith("http://127.0.0.1:") and url.endswith("/v1"), line
        cfg = LLMConfig.resolve(env={"OPENAI_BASE_URL": url, "OPENAI_API_KEY": "test"}, timeout_s=5)
        assert make_llm_role("code", "openai:fake", cfg).write(code_request()).source == KERNEL_SOURCE
    finally:
        proc.terminate()
        proc.wait(timeout=10)
