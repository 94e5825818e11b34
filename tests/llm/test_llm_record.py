"""Record a thread's LLM calls over HTTP, then replay them with the server stopped."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from llm_helpers import KERNEL_REPLY, FakeOpenAI, code_request, debugger_request, profiler_request

from nodes.llm import LLMConfig, make_llm_role
from nodes.llm_record import load_recording
from nodes.models import ModelUnavailableError

SECRET = "sk-live-DO-NOT-RECORD-4242"


def _script(body: dict) -> str:
    """Reply by role (told apart by the system prompt): JSON for profiler/debugger, else the kernel."""
    user = body["messages"][-1]["content"]
    if "PROFILER" in body["messages"][0]["content"]:
        return json.dumps({"bottleneck": "memory", "evidence": ["40% of roofline"], "plan": "NUM_WARPS=8"})
    if "DEBUGGER" in body["messages"][0]["content"]:
        return json.dumps({"diagnosis": "arange extent 1000", "fix_plan": "use a power of two"})
    return ("seed reply\n" if "seed 1 of" in user else "tune reply\n") + KERNEL_REPLY


def _same(x: object) -> object:
    """A reply with wall-clock seconds dropped (the only field replay cannot reproduce)."""
    if isinstance(x, tuple):
        return tuple(_same(y) for y in x)
    d = x.model_dump()  # type: ignore[attr-defined]
    d.pop("seconds", None)
    if isinstance(d.get("usage"), dict):
        d["usage"].pop("seconds", None)
    return d


def _run(cfg: LLMConfig) -> list[object]:
    code = make_llm_role("code", "openai:m", cfg)
    prof = make_llm_role("profiler", "openai:m", cfg)
    dbg = make_llm_role("debugger", "openai:m", cfg)
    out: list[object] = [code.write(code_request("algorithm", "seed"))]
    out.append(dbg.diagnose(debugger_request("algorithm")))
    out.append(code.write(code_request("algorithm", "refine")))
    out.append(prof.advise(profiler_request("memory")))
    out.append(code.write(code_request("memory", "tune")))
    return out


def test_record_then_replay_offline_reproduces_replies(tmp_path: Path) -> None:
    rec = tmp_path / "threads" / "t1" / "llm.jsonl"
    with FakeOpenAI("callable", handler=_script, reject_response_format=True) as srv:
        live = _run(
            LLMConfig.resolve(
                env={}, base_url=srv.base_url, api_key=SECRET, timeout_s=2, record_path=str(rec)
            )
        )
        n_http = len(srv.requests)
    entries = load_recording(rec)
    # 5 answered calls + 2 refused structured-output attempts (one per JSON role), all recorded in order.
    assert n_http == 7 and len(entries) == 7
    assert [e["role"] for e in entries if e["error"] is None] == [
        "code",
        "debugger",
        "code",
        "profiler",
        "code",
    ]
    for e in entries:
        assert {"messages", "request_sha256", "role", "stage", "call_index", "model", "temperature"} <= set(e)
    assert SECRET not in rec.read_text()

    # The server is gone: replay must not need it (an unroutable URL makes any network use fail loudly).
    replay_cfg = LLMConfig.resolve(
        env={}, base_url="http://127.0.0.1:9/v1", api_key="x", replay_path=str(rec)
    )
    replayed = _run(replay_cfg)
    assert [_same(x) for x in replayed] == [_same(x) for x in live]
    assert _same(live[0])["source"] and _same(live[1])[0]["diagnosis"] == "arange extent 1000"


def test_replay_reports_a_changed_request_and_runs_out_cleanly(tmp_path: Path) -> None:
    rec = tmp_path / "llm.jsonl"
    with FakeOpenAI("fixed", reply=KERNEL_REPLY) as srv:
        cfg = LLMConfig.resolve(env={}, base_url=srv.base_url, api_key="k", record_path=str(rec))
        make_llm_role("code", "openai:m", cfg).write(code_request("algorithm", "seed"))
    code = make_llm_role("code", "openai:m", LLMConfig.resolve(env={}, replay_path=str(rec)))
    changed = code.write(code_request("mapping", "tune"))  # a different request than the recorded one
    assert changed.source is not None and "replay warning" in changed.note and "differs" in changed.note
    with pytest.raises(ModelUnavailableError, match="no recorded code reply left"):
        code.write(code_request("algorithm", "seed"))


def test_replay_reproduces_a_recorded_outage(tmp_path: Path) -> None:
    rec = tmp_path / "llm.jsonl"
    with FakeOpenAI("error500") as srv:
        cfg = LLMConfig.resolve(
            env={}, base_url=srv.base_url, api_key="k", max_retries=0, record_path=str(rec)
        )
        with pytest.raises(ModelUnavailableError, match="last status 500"):
            make_llm_role("code", "openai:m", cfg).write(code_request())
    code = make_llm_role("code", "openai:m", LLMConfig.resolve(env={}, replay_path=str(rec)))
    with pytest.raises(ModelUnavailableError, match=r"\(replayed\).*last status 500"):
        code.write(code_request())


def test_replay_matches_a_changed_request_within_its_stage(tmp_path: Path) -> None:
    rec = tmp_path / "llm.jsonl"
    replies = [
        "CHANGE: algorithm reply\n" + KERNEL_REPLY.split("CHANGE:", 1)[1].split("\n", 1)[1],
        "CHANGE: mapping reply\n" + KERNEL_REPLY.split("CHANGE:", 1)[1].split("\n", 1)[1],
    ]
    with FakeOpenAI("sequence", replies=replies) as srv:
        cfg = LLMConfig.resolve(env={}, base_url=srv.base_url, api_key="k", record_path=str(rec))
        code = make_llm_role("code", "openai:m", cfg)
        code.write(code_request("algorithm", "seed"))
        code.write(code_request("mapping", "tune"))
    code = make_llm_role("code", "openai:m", LLMConfig.resolve(env={}, replay_path=str(rec)))
    r = code.write(code_request("mapping", "tune", iteration=5))  # differs from the recorded mapping call
    assert r.note.startswith("mapping reply") and "replay warning" in r.note
