"""Reading LLM replies: the candidate file in a code reply, JSON in an advice reply, and the tunables
convention the tiling stage sweeps. Pure text / `ast` work: nothing here executes model output.

Tunables convention (documented in the code role's system prompt): a candidate file may declare

    EGG_TUNABLES = {"BLOCK_SIZE": [256, 512, 1024], "NUM_WARPS": [4, 8]}
    BLOCK_SIZE = 512
    NUM_WARPS = 4

at module level: a literal dict of name -> candidate values, and for every name a module-level
assignment holding the value baked in (which `forward` passes to the kernel as a tl.constexpr or a
launch option). `tunable_variants` rewrites that one assignment per untried value.
"""

from __future__ import annotations

import ast
import json
import re
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from tools import pysource

_OPEN = re.compile(r"^\s*```\s*([A-Za-z0-9_+-]*)\s*$")
_CLOSE = re.compile(r"^\s*```\s*$")
_MODELNEW = re.compile(r"^\s*class\s+ModelNew\b", re.MULTILINE)
_CHANGE = re.compile(r"^\s*(?:\*\*)?CHANGE(?:\*\*)?\s*:\s*(.+?)\s*$", re.MULTILINE)
_NO_CHANGE = re.compile(r"^\s*(?:\*\*)?NO_CHANGE(?:\*\*)?\s*:\s*(.+?)\s*$", re.MULTILINE)
_PY_LANGS = {"python", "py", "python3"}


@dataclass(frozen=True)
class CodeParse:
    source: str | None  # the candidate file, when one was found
    problem: str | None  # why the reply is unusable (fed back to the model as a correction)
    change: str = ""  # the reply's one-line CHANGE summary (or its first prose line)
    no_change: str | None = None  # the reason, when the model declined to propose anything


def _blocks(text: str) -> list[tuple[str, str, bool]]:
    """Fenced blocks as (language, body, closed), in order."""
    out: list[tuple[str, str, bool]] = []
    lang: str | None = None
    body: list[str] = []
    for line in text.splitlines():
        if lang is None:
            m = _OPEN.match(line)
            if m:
                lang, body = m.group(1).lower(), []
        elif _CLOSE.match(line):
            out.append((lang, "\n".join(body) + "\n", True))
            lang = None
        else:
            body.append(line)
    if lang is not None:
        out.append((lang, "\n".join(body) + "\n", False))
    return out


def _summary_line(text: str) -> str:
    m = _CHANGE.search(text)
    if m:
        return m.group(1)[:240]
    for line in text.splitlines():
        s = line.strip().strip("#*").strip()
        if s and not s.startswith("```"):
            return s[:240]
    return ""


def parse_code_reply(
    text: str, *, finish_reason: str | None = None, allow_no_change: bool = False
) -> CodeParse:
    """Find the candidate file: the last complete ```python block that defines ModelNew.

    A block that does not compile is still returned (the graph's compile node and debugger deal with
    it); an unterminated final block means the reply was cut off and is rejected."""
    change = _summary_line(text)
    blocks = _blocks(text)
    if blocks and not blocks[-1][2]:
        return CodeParse(None, "the reply was cut off inside a code block (unterminated ``` fence)", change)
    if finish_reason == "length":
        return CodeParse(None, "the reply hit the output token limit before it finished", change)
    code = [b for lang, b, _ in blocks if lang in _PY_LANGS or (lang == "" and _MODELNEW.search(b))]
    with_model = [b for b in code if _MODELNEW.search(b)]
    if with_model:
        return CodeParse(with_model[-1], None, change)
    if allow_no_change:
        m = _NO_CHANGE.search(text)
        if m and not code:
            return CodeParse(None, None, change, no_change=m.group(1)[:400])
    if code:
        return CodeParse(None, "the ```python block does not define `class ModelNew`", change)
    return CodeParse(None, "no ```python code block in the reply", change)


# ---------------------------------------------------------------------------------------------
# JSON replies (profiler, debugger)
# ---------------------------------------------------------------------------------------------


class ProfilerReply(BaseModel):
    model_config = ConfigDict(extra="ignore")

    bottleneck: Literal["memory", "compute", "latency", "unknown"]
    evidence: list[str] = Field(min_length=1)
    plan: str = Field(min_length=3)

    @field_validator("bottleneck", mode="before")
    @classmethod
    def _lower(cls, v: Any) -> Any:
        return v.strip().lower() if isinstance(v, str) else v

    @field_validator("evidence", mode="before")
    @classmethod
    def _listify(cls, v: Any) -> Any:
        return [v] if isinstance(v, str) else v


class DebuggerReply(BaseModel):
    model_config = ConfigDict(extra="ignore")

    diagnosis: str = Field(min_length=3)
    fix_plan: str = Field(min_length=3)

    @field_validator("fix_plan", mode="before")
    @classmethod
    def _join(cls, v: Any) -> Any:
        # Models often answer a plan as a list of steps; keep it as numbered text.
        if isinstance(v, list):
            return "\n".join(f"{i + 1}. {s}" for i, s in enumerate(v))
        return v


def json_schema_of(model: type[BaseModel], title: str) -> dict[str, Any]:
    """A plain JSON schema (OpenAI response_format style) for a reply model."""
    schema = model.model_json_schema()
    schema["title"] = title
    schema["additionalProperties"] = False
    schema.pop("description", None)
    return schema


def _json_candidates(text: str) -> list[Any]:
    found: list[Any] = []
    s = text.strip()
    try:
        found.append(json.loads(s))
    except json.JSONDecodeError:
        pass
    for lang, body, closed in _blocks(text):
        if closed and lang in ("json", ""):
            try:
                found.append(json.loads(body))
            except json.JSONDecodeError:
                pass
    dec = json.JSONDecoder()
    for m in re.finditer(r"\{", text):
        try:
            obj, _ = dec.raw_decode(text, m.start())
        except json.JSONDecodeError:
            continue
        found.append(obj)
    return [o for o in found if isinstance(o, dict)]


def parse_json_reply(text: str, model: type[BaseModel]) -> tuple[BaseModel | None, str | None]:
    """(parsed reply, None) or (None, problem). Takes the last JSON object in the text that fits."""
    candidates = _json_candidates(text)
    if not candidates:
        return None, "no JSON object in the reply"
    last_err = ""
    for obj in reversed(candidates):
        try:
            return model.model_validate(obj), None
        except ValidationError as e:
            last_err = "; ".join(f"{'.'.join(map(str, x['loc']))}: {x['msg']}" for x in e.errors()[:4])
    return None, f"the JSON object does not fit the schema ({last_err})"


# ---------------------------------------------------------------------------------------------
# Tunables
# ---------------------------------------------------------------------------------------------


def _module_assigns(tree: ast.Module) -> dict[str, ast.Assign]:
    out: dict[str, ast.Assign] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            out[node.targets[0].id] = node
    return out


def read_tunables(source: str) -> tuple[dict[str, list[Any]], dict[str, Any]]:
    """(declared search space, values baked in) of a candidate file; ({}, {}) when it declares none."""
    tree = pysource.parse(source)
    if tree is None:
        return {}, {}
    return _tunables(tree)


def _tunables(tree: ast.Module) -> tuple[dict[str, list[Any]], dict[str, Any]]:
    assigns = _module_assigns(tree)
    decl = assigns.get("EGG_TUNABLES")
    if decl is None:
        return {}, {}
    try:
        space = ast.literal_eval(decl.value)
    except (ValueError, SyntaxError, TypeError):
        return {}, {}
    if not isinstance(space, dict):
        return {}, {}
    clean: dict[str, list[Any]] = {}
    values: dict[str, Any] = {}
    for name, vals in space.items():
        if not isinstance(name, str) or not isinstance(vals, (list, tuple)) or name not in assigns:
            continue
        try:
            values[name] = ast.literal_eval(assigns[name].value)
        except (ValueError, SyntaxError, TypeError):
            continue  # not a literal: the sweep cannot rewrite it
        clean[name] = list(vals)
    return clean, values


def tunable_variants(source: str, current: dict[str, Any]) -> list[tuple[dict[str, Any], str]]:
    """One rewritten source per declared value not equal to the current one (one name at a time).

    `current` overrides the file's own values when deciding what is "current" (the graph passes the
    incumbent's params). Each item is (the full parameter set of the variant, its source)."""
    tree = pysource.parse(source)
    space, baked = _tunables(tree) if tree is not None else ({}, {})
    if not space:
        return []
    assigns = _module_assigns(tree)
    out: list[tuple[dict[str, Any], str]] = []
    for name, values in space.items():
        cur = current.get(name, baked[name])
        for v in values:
            if v == cur or (isinstance(v, bool) != isinstance(cur, bool)):
                continue
            params = {**baked, name: v}
            out.append((params, pysource.replace(source, assigns[name].value, repr(v))))
    return out
