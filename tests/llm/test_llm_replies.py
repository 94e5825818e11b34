"""Reply parsing (code blocks, JSON) and the EGG_TUNABLES sweep, without any model."""

from __future__ import annotations

import ast

from llm_helpers import KERNEL_REPLY, KERNEL_SOURCE

from nodes.llm_replies import (
    DebuggerReply,
    ProfilerReply,
    parse_code_reply,
    parse_json_reply,
    read_tunables,
    tunable_variants,
)


def test_reply_file_holds_the_candidate_file() -> None:
    p = parse_code_reply(KERNEL_REPLY)
    assert p.problem is None and p.source == KERNEL_SOURCE
    assert p.change == "fused scale, bias add and tanh into one elementwise Triton kernel"


def test_last_complete_python_block_defining_modelnew_wins() -> None:
    old = "class ModelNew:\n    version = 1\n"
    new = "class ModelNew:\n    version = 2\n"
    text = f"first try\n```python\n{old}```\nbetter:\n```python\n{new}```\nusage:\n```python\nm = ModelNew()\n```\n"
    assert parse_code_reply(text).source == new


def test_unterminated_block_is_a_truncated_reply() -> None:
    text = (
        "```python\nclass ModelNew:\n    pass\n```\nrevised:\n```python\nclass ModelNew:\n    def f(self):\n"
    )
    p = parse_code_reply(text)
    assert p.source is None and "cut off" in (p.problem or "")
    assert parse_code_reply(KERNEL_REPLY, finish_reason="length").source is None


def test_broken_code_is_still_returned_for_the_debugger() -> None:
    text = "```python\nimport triton\nclass ModelNew(nn.Module:\n    def forward(self, x) return x\n```"
    p = parse_code_reply(text)
    assert p.problem is None and p.source is not None and "ModelNew(nn.Module:" in p.source


def test_refusal_and_missing_modelnew_are_problems() -> None:
    assert (
        parse_code_reply("I'm sorry, I can't help with that.").problem
        == "no ```python code block in the reply"
    )
    assert "does not define" in (parse_code_reply("```python\nx = 1\n```").problem or "")
    # NO_CHANGE is honoured only where the caller allows it (refine/tune), never in seed/fix.
    assert parse_code_reply("NO_CHANGE: already at the roofline").problem is not None
    p = parse_code_reply("NO_CHANGE: already at the roofline", allow_no_change=True)
    assert p.problem is None and p.source is None and p.no_change == "already at the roofline"


def test_json_reply_found_in_prose_fences_or_raw() -> None:
    raw = '{"bottleneck": "Memory", "evidence": "1.7 TB/s of 4.3", "plan": "raise num_warps to 8"}'
    for text in (raw, f"Analysis follows.\n```json\n{raw}\n```\n", f"I think {raw} is right."):
        r, problem = parse_json_reply(text, ProfilerReply)
        assert problem is None and isinstance(r, ProfilerReply)
        assert r.bottleneck == "memory" and r.evidence == ["1.7 TB/s of 4.3"]
    r, problem = parse_json_reply(
        '{"diagnosis": "unmasked load", "fix_plan": ["add mask", "use other=0"]}', DebuggerReply
    )
    assert problem is None and isinstance(r, DebuggerReply) and r.fix_plan == "1. add mask\n2. use other=0"


def test_json_problems_are_reported() -> None:
    assert parse_json_reply("no json here", ProfilerReply) == (None, "no JSON object in the reply")
    r, problem = parse_json_reply(
        '{"bottleneck": "disk", "evidence": ["x"], "plan": "buy ssd"}', ProfilerReply
    )
    assert r is None and "bottleneck" in (problem or "")
    r, problem = parse_json_reply('{"bottleneck": "memory", "evidence": ["a", plan: x', ProfilerReply)
    assert r is None and problem == "no JSON object in the reply"


def test_tunable_variants_rewrite_one_assignment_each() -> None:
    space, baked = read_tunables(KERNEL_SOURCE)
    assert space == {"BLOCK_SIZE": [512, 1024, 2048], "NUM_WARPS": [4, 8]}
    assert baked == {"BLOCK_SIZE": 1024, "NUM_WARPS": 4}
    variants = tunable_variants(KERNEL_SOURCE, {"BLOCK_SIZE": 1024, "NUM_WARPS": 4})
    assert [p for p, _ in variants] == [
        {"BLOCK_SIZE": 512, "NUM_WARPS": 4},
        {"BLOCK_SIZE": 2048, "NUM_WARPS": 4},
        {"BLOCK_SIZE": 1024, "NUM_WARPS": 8},
    ]
    for params, src in variants:
        assert read_tunables(src)[1] == params
        # Only the assignment changed: the rest of the file is byte-identical.
        changed = [a for a, b in zip(KERNEL_SOURCE.splitlines(), src.splitlines(), strict=True) if a != b]
        assert len(changed) == 1
        ast.parse(src)
    # The incumbent's params decide what is current (here the graph already moved to 2048).
    assert [p["BLOCK_SIZE"] for p, _ in tunable_variants(KERNEL_SOURCE, {"BLOCK_SIZE": 2048})][:2] == [
        512,
        1024,
    ]


def test_tunables_ignored_when_undeclared_or_unparseable() -> None:
    assert tunable_variants("BLOCK = 4\n", {}) == []
    assert tunable_variants("EGG_TUNABLES = {'B': [1, 2]}\n", {}) == []  # no assignment of B to rewrite
    assert tunable_variants("EGG_TUNABLES = {'B': [1, 2]}\nB = f(3)\n", {}) == []  # not a literal
    assert tunable_variants("def broken(:\n", {}) == []
    src = "# é comment ü\nEGG_TUNABLES = {'B': [1, 2]}\nB = 1  # ünïcode\n"
    assert tunable_variants(src, {}) == [
        ({"B": 2}, "# é comment ü\nEGG_TUNABLES = {'B': [1, 2]}\nB = 2  # ünïcode\n")
    ]
