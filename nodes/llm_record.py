"""Record every LLM call of a thread to JSONL, and replay a recording with no network.

One line per call (the request as sent and the reply or error as received):

    {"v": 1, "role": "code", "stage": "tiling", "call_index": 3, "model": "openai:qwen", "temperature": 0.0,
     "structured": false, "messages": [{"type": "system", "content": "..."}, ...],
     "request_sha256": "...", "reply": {"text": "...", "finish_reason": "stop",
     "usage": {"input_tokens": 812, "output_tokens": 640}}, "error": null, "seconds": 1.9}

No headers or settings are written, so the API key never reaches the file.

`ReplayChatModel` is a langchain `BaseChatModel` that serves one role's recorded replies: the first
unused entry whose request hash matches, else the next unused one in call order (and then the reply
carries a mismatch warning in `response_metadata["replay"]`, which the role puts in its note).
"""

from __future__ import annotations

import hashlib
import json
import threading
from pathlib import Path
from typing import Any

from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.runnables import Runnable, RunnableLambda
from pydantic import ConfigDict, Field, PrivateAttr

RECORD_VERSION = 1


def message_dicts(messages: list[BaseMessage]) -> list[dict[str, str]]:
    return [
        {"type": m.type, "content": m.content if isinstance(m.content, str) else json.dumps(m.content)}
        for m in messages
    ]


def request_hash(messages: list[BaseMessage]) -> str:
    blob = json.dumps(message_dicts(messages), sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


class Recorder:
    """Appends one JSON line per call; safe to share between roles and threads."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()

    def write(self, entry: dict[str, Any]) -> None:
        line = json.dumps({"v": RECORD_VERSION, **entry}, ensure_ascii=False)
        with self._lock, self.path.open("a", encoding="utf-8") as f:
            f.write(line + "\n")


def load_recording(path: str | Path) -> list[dict[str, Any]]:
    p = Path(path)
    if not p.exists():
        raise FileNotFoundError(f"no LLM recording at {p}")
    out = []
    for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError as e:
            raise ValueError(f"{p}:{n}: not a JSON line ({e})") from None
    return out


class ReplayExhausted(RuntimeError):
    """The replayed run asked for more calls of a role than were recorded."""


class ReplayedError(RuntimeError):
    """The recorded call ended in an error; replay reproduces it."""

    def __init__(self, kind: str, message: str):
        super().__init__(message)
        self.kind = kind


class ReplayChatModel(BaseChatModel):
    """Serves a role's recorded replies in order; never touches the network."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    role: str
    entries: list[dict[str, Any]] = Field(default_factory=list)
    source_path: str = ""
    _used: set[int] = PrivateAttr(default_factory=set)
    _stage: str | None = PrivateAttr(default=None)
    _lock: threading.Lock = PrivateAttr(default_factory=threading.Lock)

    @classmethod
    def from_file(cls, path: str | Path, role: str) -> ReplayChatModel:
        entries = [e for e in load_recording(path) if e.get("role") == role]
        entries.sort(key=lambda e: e.get("call_index", 0))
        return cls(role=role, entries=entries, source_path=str(path))

    @property
    def _llm_type(self) -> str:
        return "egg-replay"

    def expect_stage(self, stage: str) -> None:
        """The stage of the next request: a changed request is matched within its stage first."""
        self._stage = stage

    def _pick(self, h: str) -> tuple[int, dict[str, Any], bool]:
        with self._lock:
            for i, e in enumerate(self.entries):
                if i not in self._used and e.get("request_sha256") == h:
                    self._used.add(i)
                    return i, e, False
            # No exact match (e.g. timings differ on replay): the next unused call of the same stage,
            # else the next unused call at all; the caller is told it differs.
            for same_stage in (True, False):
                for i, e in enumerate(self.entries):
                    if i not in self._used and (not same_stage or e.get("stage") == self._stage):
                        self._used.add(i)
                        return i, e, True
        raise ReplayExhausted(
            f"replay of {self.source_path}: no recorded {self.role} reply left "
            f"({len(self.entries)} recorded, all used)"
        )

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        h = request_hash(messages)
        i, e, mismatch = self._pick(h)
        if e.get("error"):
            err = e["error"]
            raise ReplayedError(str(err.get("kind", "error")), str(err.get("message", "recorded error")))
        reply = e.get("reply") or {}
        usage = reply.get("usage") or {}
        it, ot = int(usage.get("input_tokens", 0)), int(usage.get("output_tokens", 0))
        meta = {
            "finish_reason": reply.get("finish_reason"),
            "replay": {
                "call_index": e.get("call_index", i),
                "mismatch": mismatch,
                "recorded_sha256": e.get("request_sha256"),
                "request_sha256": h,
            },
        }
        msg = AIMessage(
            content=str(reply.get("text", "")),
            response_metadata=meta,
            usage_metadata={"input_tokens": it, "output_tokens": ot, "total_tokens": it + ot},
        )
        return ChatResult(generations=[ChatGeneration(message=msg)])

    def with_structured_output(
        self, schema: Any = None, *, include_raw: bool = False, **kwargs: Any
    ) -> Runnable:
        # The recorded raw text is what the role parses, exactly as for a live model's raw reply.
        if not include_raw:
            raise ValueError("ReplayChatModel only serves include_raw=True (the role parses the raw reply)")
        return RunnableLambda(lambda msgs: {"raw": self.invoke(msgs), "parsed": None, "parsing_error": None})
