"""Stage prompt templates: every file loads and renders strictly; context stays flat over iterations."""

from __future__ import annotations

import hashlib
import string
from pathlib import Path

import pytest
from llm_helpers import (
    KERNEL_REPLY,
    STAGE_NAMES,
    FakeOpenAI,
    code_request,
    debugger_request,
    decision,
    profiler_request,
    summary,
)

from nodes import llm_prompts as P
from nodes.llm import LLMCode, LLMConfig, LLMDebugger, LLMProfiler, make_llm_role
from nodes.llm_record import ReplayChatModel

MODES = ("seed", "refine", "tune", "fix")


def _offline(cls: type, role: str, **kw: object):  # a role that is only rendered, never called
    return cls("fake", ReplayChatModel(role=role, entries=[]), LLMConfig(**kw))


def test_every_stage_and_role_has_a_template_with_a_valid_header() -> None:
    for stage in STAGE_NAMES:
        for role in P.ROLES:
            t = P.load_template(f"{stage}/{role}")
            assert t.id == f"{stage}/{role}" and t.path.name == f"{role}.v{t.version}.md"
            assert set(t.inputs) == set(string.Template(t.body).get_identifiers())
            assert t.changelog and t.output
            assert t.sha256 == hashlib.sha256(t.path.read_bytes()).hexdigest()
    for name in ("system", "role_code", "role_profiler", "role_debugger", *(f"mode_{m}" for m in MODES)):
        assert P.load_template(f"common/{name}").id == f"common/{name}"


def test_stage_prompts_carry_their_stage_principles() -> None:
    must = {
        "algorithm": ["fuse", "online", "exact", "split-k"],
        "mapping": ["grid", "work per program", "grouped", "persistent"],
        "tiling": ["tl.constexpr", "powers of two", "occupancy", "registers"],
        "memory": ["coalesc", "vectoris", "num_stages", "evict", "num_warps"],
    }
    for stage, words in must.items():
        body = P.load_template(f"{stage}/code").body.lower()
        for w in words:
            assert w in body, f"{stage}/code lacks {w!r}"
    system = P.load_template("common/system").body
    for rule in (
        "ModelNew",
        "state_dict",
        'input_precision="ieee"',
        "try/except",
        "streams",
        "caching",
        "timers",
        "fp32",
    ):
        assert rule in system, rule


@pytest.mark.parametrize("stage", STAGE_NAMES)
@pytest.mark.parametrize("mode", MODES)
def test_code_prompt_renders_every_variable(stage: str, mode: str) -> None:
    role = _offline(LLMCode, "code")
    req = code_request(stage, mode, recent=[summary(i) for i in range(3)], decisions=[decision("algorithm")])
    system, user, ref = role.render(req)
    for text in (system, user):
        assert "$" not in text.replace("$$", ""), "an unrendered $variable leaked"
    assert req.task.source.strip() in user
    assert P.POLICY_RULES["mixed"] in system
    # mapping keeps v1; the other stages' v2 ask for tuning choices as @triton.autotune configs
    assert ref["id"] == f"{stage}/code" and ref["version"] == ("1" if stage == "mapping" else "2")
    assert len(ref["sha256"]) == 64
    version = {"tune": 3}.get(mode, 1)  # tune v2: variants of a parallel round; v3: autotune configs
    assert f"common/mode_{mode}@{version}" in ref["parts"] and "common/role_code@2" in ref["parts"]
    assert "@triton.autotune" in system + user
    if mode == "tune":
        assert f"variant {req.seed_index + 1} of {req.n_seeds}" in user
    if mode == "fix":
        assert "max_abs_err 4.2e-1" in user and "REPAIR" in user
    if mode == "seed":
        assert "seed 1 of 4" in user


@pytest.mark.parametrize("stage", STAGE_NAMES)
def test_profiler_and_debugger_prompts_render(stage: str) -> None:
    _, user, ref = _offline(LLMProfiler, "profiler").render(profiler_request(stage))
    assert "achieved 1700 GB/s" in user and ref["id"] == f"{stage}/profiler"
    _, user, ref = _offline(LLMDebugger, "debugger").render(debugger_request(stage))
    assert "power of 2" in user and "failing rule: triton" in user and ref["id"] == f"{stage}/debugger"


def test_missing_variable_fails_loudly(tmp_path: Path) -> None:
    (tmp_path / "x").mkdir()
    (tmp_path / "x" / "code.v1.md").write_text(
        "---\nid: x/code\nversion: 1\ninputs: a, b\noutput: text\nchangelog:\n  - 1: first\n---\n$a and ${b} {braces} ok\n"
    )
    t = P.load_template("x/code", root=tmp_path)
    assert t.render({"a": 1, "b": 2}).strip() == "1 and 2 {braces} ok"
    with pytest.raises(P.PromptError, match=r"missing variable \$b"):
        t.render({"a": 1})


def test_header_must_declare_exactly_the_placeholders(tmp_path: Path) -> None:
    (tmp_path / "y").mkdir()
    (tmp_path / "y" / "code.v1.md").write_text(
        "---\nid: y/code\nversion: 1\ninputs: a\noutput: t\n---\n$a $b\n"
    )
    with pytest.raises(P.PromptError, match="differ"):
        P.load_template("y/code", root=tmp_path)
    (tmp_path / "y" / "code.v2.md").write_text(
        "---\nid: y/code\nversion: 2\ninputs: a\noutput: t\n---\n$a costs 5$\n"
    )
    with pytest.raises(P.PromptError, match="placeholder"):
        P.load_template("y/code", root=tmp_path)  # the highest version is picked, and it is malformed


def test_context_stays_flat_over_ten_iterations(capsys: pytest.CaptureFixture[str]) -> None:
    """10 scripted calls per stage over real HTTP with growing history and decisions: the last call's
    input is within 20% of the first call's (measured on the requests the server received)."""
    with FakeOpenAI("fixed", reply=KERNEL_REPLY) as srv:
        cfg = LLMConfig.resolve(
            env={},
            base_url=srv.base_url,
            api_key="test",
            timeout_s=5,
            max_retries=0,
            recent_k=4,
            tune_sweep=False,
        )
        role = make_llm_role("code", "openai:fake", cfg)
        seed = role.write(code_request("algorithm", "seed"))
        assert seed.source is not None
        decisions: list = []
        history: list = []
        figures = []
        for stage in STAGE_NAMES:
            mode = "refine" if stage == "algorithm" else "tune"
            start = len(srv.requests)
            for it in range(10):
                req = code_request(stage, mode, iteration=it, recent=list(history), decisions=list(decisions))
                assert role.write(req).source is not None
                history.append(summary(len(history), note_len=300))  # the graph's history keeps growing
            sizes = [
                sum(P.token_estimate(m["content"]) for m in body["messages"]) for body in srv.requests[start:]
            ]
            assert len(sizes) == 10
            growth = (sizes[-1] - sizes[0]) / sizes[0]
            figures.append((stage, mode, sizes[0], sizes[-1], growth))
            assert growth <= 0.20, f"{stage}: input grew {growth:.1%} ({sizes[0]} -> {sizes[-1]} tokens)"
            decisions.append(decision(stage))
        seed_in = sum(P.token_estimate(m["content"]) for m in srv.requests[0]["messages"])
    lines = [
        f"input tokens per call over 10 scripted iterations ({P.token_method()}, recent_k=4):",
        f"  algorithm seed call: {seed_in}",
    ]
    lines += [f"  {s:9s} {m:6s} first {a:5d}  last {b:5d}  growth {g:+.1%}" for s, m, a, b, g in figures]
    lines.append("usage by stage/role (from response usage):")
    lines.append(f"  {'key':20s} {'calls':>5s} {'in':>7s} {'out':>7s}")
    for k, u in sorted(cfg.ledger.snapshot().items()):
        lines.append(f"  {k:20s} {u.calls:5d} {u.input_tokens:7d} {u.output_tokens:7d}")
    with capsys.disabled():
        print("\n" + "\n".join(lines))


def test_tune_prompt_names_the_best_kernels_autotune_configs() -> None:
    src = (Path(__file__).resolve().parents[1] / "corpus" / "good" / "relu_autotune.py").read_text()
    req = code_request("tiling", "tune")
    assert req.best is not None
    req = req.model_copy(
        update={
            "best": req.best.model_copy(
                update={"candidate": req.best.candidate.model_copy(update={"source": src})}
            )
        }
    )
    _, user, _ = _offline(LLMCode, "code").render(req)
    assert "Declared tunables now: `relu_kernel`: 3 @triton.autotune config(s)." in user
