"""EGG's code, profiler and debugger roles on any OpenAI-compatible chat model.

    cfg = LLMConfig.resolve(record_path=".egg/threads/T/llm.jsonl", run_tokens=200_000)
    code = make_llm_role("code", "openai:qwen2.5-coder", cfg)        # CodeModel
    prof = make_llm_role("profiler", "openai:qwen2.5-coder", cfg)    # ProfilerModel
    reply = code.write(request)                                      # CodeReply

Roles built from one `LLMConfig` share its usage ledger (budgets are per run) and its recorder.
Failures are typed (nodes.models): `ModelUnavailableError` (endpoint down after bounded retries),
`ModelFormatError` (no usable reply after corrective retries), `BudgetExceeded(which)` with which in
{"calls", "run tokens", "stage tokens (<stage>)"}. Each carries `.usage` (RoleUsage spent by that
role call before it failed) so the caller can still account for it.

Retries: connection errors, timeouts, 408/409/429 and 5xx are retried by the openai client
(`max_retries`, exponential backoff from 0.5 s capped at 8 s, `Retry-After` honoured up to 120 s), so
one call is bounded by about (max_retries + 1) * timeout_s plus the back-off.
"""

from __future__ import annotations

import hashlib
import os
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any, Literal, TypeVar

import openai
import structlog
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage
from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, SecretStr

from graph.records import Diagnosis, ProfilerAdvice, Role, RoleUsage
from nodes import llm_prompts as P
from nodes.llm_record import (
    Recorder,
    ReplayChatModel,
    ReplayedError,
    ReplayExhausted,
    message_dicts,
    request_hash,
)
from nodes.llm_replies import (
    CodeParse,
    DebuggerReply,
    ProfilerReply,
    json_schema_of,
    parse_code_reply,
    parse_json_reply,
    read_tunables,
    tunable_variants,
)
from nodes.models import (
    BudgetExceeded,
    CodeModel,
    CodeReply,
    CodeRequest,
    DebuggerModel,
    DebuggerRequest,
    ModelError,
    ModelFormatError,
    ModelUnavailableError,
    ProfilerModel,
    ProfilerRequest,
)
from tools import autotune

log = structlog.get_logger("egg.llm")

Structured = Literal["auto", "json_schema", "text"]
DEFAULT_OPENAI_URL = "https://api.openai.com/v1"

# Seeds sample with diversity (the seed index is also in the prompt); tuning and repair stay near-greedy.
DEFAULT_TEMPERATURES: dict[str, float] = {
    "code.seed": 0.8,
    "code.refine": 0.3,
    "code.tune": 0.1,
    "code.fix": 0.0,
    "profiler": 0.0,
    "debugger": 0.0,
}


# ---------------------------------------------------------------------------------------------
# Usage ledger (budgets)
# ---------------------------------------------------------------------------------------------


def _add(a: RoleUsage, b: RoleUsage) -> RoleUsage:
    return RoleUsage(
        calls=a.calls + b.calls,
        input_tokens=a.input_tokens + b.input_tokens,
        output_tokens=a.output_tokens + b.output_tokens,
        seconds=a.seconds + b.seconds,
    )


class UsageLedger:
    """Token and call counts of one run, keyed "<stage>/<role>" like graph.records.Usage."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.by_key: dict[str, RoleUsage] = {}
        self._next_index: dict[str, int] = {}

    def restore(self, by_key: Mapping[str, RoleUsage]) -> None:
        """Seed with a resumed thread's usage so run budgets count what was already spent."""
        with self._lock:
            for k, u in by_key.items():
                if not k.endswith("/tools"):
                    self.by_key[k] = _add(self.by_key.get(k, RoleUsage()), u)

    def snapshot(self) -> dict[str, RoleUsage]:
        with self._lock:
            return dict(self.by_key)

    def next_call_index(self, role: str) -> int:
        with self._lock:
            i = self._next_index.get(role, 0)
            self._next_index[role] = i + 1
            return i

    def _tokens(self, stage: str | None = None) -> int:
        return sum(
            u.input_tokens + u.output_tokens
            for k, u in self.by_key.items()
            if stage is None or k.split("/", 1)[0] == stage
        )

    def check(self, cfg: LLMConfig, stage: str) -> None:
        """Raise BudgetExceeded before a call that no budget leaves room for."""
        with self._lock:
            if cfg.max_calls is not None and sum(u.calls for u in self.by_key.values()) >= cfg.max_calls:
                raise BudgetExceeded("calls")
            if cfg.run_tokens is not None and self._tokens() >= cfg.run_tokens:
                raise BudgetExceeded("run tokens")
            if cfg.stage_tokens is not None and self._tokens(stage) >= cfg.stage_tokens:
                raise BudgetExceeded(f"stage tokens ({stage})")

    def add(self, stage: str, role: str, u: RoleUsage) -> None:
        with self._lock:
            k = f"{stage}/{role}"
            self.by_key[k] = _add(self.by_key.get(k, RoleUsage()), u)


# ---------------------------------------------------------------------------------------------
# Configuration
# ---------------------------------------------------------------------------------------------


class LLMConfig(BaseModel):
    """Settings shared by the LLM roles of one run (explicit value > OPENAI_* environment > default)."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    base_url: str | None = None
    api_key: SecretStr | None = None  # SecretStr: never printed in reprs, logs or recordings
    timeout_s: float = Field(default=120.0, gt=0)
    max_retries: int = Field(default=3, ge=0, le=10)
    format_retries: int = Field(default=2, ge=0, le=5)
    temperatures: dict[str, float] = Field(default_factory=lambda: dict(DEFAULT_TEMPERATURES))
    max_tokens: int = Field(default=8192, gt=0)  # per reply
    stage_tokens: int | None = None
    run_tokens: int | None = None
    max_calls: int | None = None
    structured: Structured = "auto"
    record_path: str | None = None
    replay_path: str | None = None
    recent_k: int = Field(default=4, ge=0)
    policy: Literal["strict", "mixed"] = "mixed"
    tune_sweep: bool = True  # tiling/tune: sweep declared EGG_TUNABLES before asking the model

    _ledger: UsageLedger = PrivateAttr(default_factory=UsageLedger)
    _recorder: Recorder | None = PrivateAttr(default=None)

    @classmethod
    def resolve(cls, env: Mapping[str, str] | None = None, **explicit: Any) -> LLMConfig:
        """Explicit (non-None) arguments win over OPENAI_BASE_URL / OPENAI_API_KEY, which win over defaults."""
        env = os.environ if env is None else env
        values = {k: v for k, v in explicit.items() if v is not None}
        if "base_url" not in values and env.get("OPENAI_BASE_URL"):
            values["base_url"] = env["OPENAI_BASE_URL"]
        if "api_key" not in values and env.get("OPENAI_API_KEY"):
            values["api_key"] = env["OPENAI_API_KEY"]
        temps = dict(DEFAULT_TEMPERATURES)
        temps.update(values.pop("temperatures", {}) or {})
        unknown = set(temps) - set(DEFAULT_TEMPERATURES)
        if unknown:
            raise ValueError(
                f"unknown temperature keys {sorted(unknown)}; use {sorted(DEFAULT_TEMPERATURES)}"
            )
        return cls(temperatures=temps, **values)

    @property
    def ledger(self) -> UsageLedger:
        return self._ledger

    @property
    def recorder(self) -> Recorder | None:
        if self.record_path and (self._recorder is None or str(self._recorder.path) != self.record_path):
            self._recorder = Recorder(self.record_path)
        return self._recorder if self.record_path else None

    @property
    def endpoint(self) -> str:
        return (self.base_url or DEFAULT_OPENAI_URL).rstrip("/")

    def temperature(self, key: str) -> float:
        return self.temperatures.get(key, DEFAULT_TEMPERATURES[key])


def build_chat(model: str, role: str, cfg: LLMConfig) -> BaseChatModel:
    """The chat model behind a role: a recording's replayer, or ChatOpenAI on the configured endpoint."""
    if cfg.replay_path:
        return ReplayChatModel.from_file(cfg.replay_path, role)
    from langchain_openai import ChatOpenAI

    key = cfg.api_key.get_secret_value() if cfg.api_key else None
    if key is None:
        if not cfg.base_url:
            raise ModelUnavailableError(
                "no API key for the OpenAI endpoint: set OPENAI_API_KEY, or point OPENAI_BASE_URL at a local "
                "OpenAI-compatible server"
            )
        key = "unused"  # local servers usually ignore it, but the client insists on one
    return ChatOpenAI(
        model=model,
        base_url=cfg.base_url,
        api_key=SecretStr(key),
        timeout=cfg.timeout_s,
        max_retries=cfg.max_retries,
        max_tokens=cfg.max_tokens,
        temperature=0.0,
        use_responses_api=False,  # local servers speak chat/completions only
    )


def make_llm_role(role: Role, spec: str, cfg: LLMConfig) -> CodeModel | ProfilerModel | DebuggerModel:
    """Build the `role` model for `spec` = "openai:<model-name>"."""
    kind, _, model = spec.partition(":")
    if kind != "openai" or not model:
        raise ValueError(f"unknown LLM spec {spec!r}: use openai:<model-name>")
    chat = build_chat(model, role, cfg)
    cls: dict[str, type[_LLMRole]] = {"code": LLMCode, "profiler": LLMProfiler, "debugger": LLMDebugger}
    if role not in cls:
        raise ValueError(f"unknown role {role!r}")
    return cls[role](model, chat, cfg)  # type: ignore[return-value]


# ---------------------------------------------------------------------------------------------
# The shared call path
# ---------------------------------------------------------------------------------------------

T = TypeVar("T")


def _attach_usage(err: ModelError, usage: RoleUsage) -> ModelError:
    err.usage = usage  # type: ignore[attr-defined]
    return err


def _prompt_ref(main: P.PromptTemplate, parts: list[P.PromptTemplate]) -> dict[str, str]:
    allsha = hashlib.sha256("".join(t.sha256 for t in [main, *parts]).encode()).hexdigest()
    return {
        **main.ref,
        "parts": ",".join(f"{t.id}@{t.version}" for t in parts),
        "sha256_all": allsha,
    }


class _LLMRole:
    role: str = ""

    def __init__(self, model: str, chat: BaseChatModel, cfg: LLMConfig):
        self.model = model
        self.name = f"openai:{model}"
        self.chat = chat
        self.cfg = cfg
        self._chats: dict[float, BaseChatModel] = {}
        # "auto": try json_schema once; a server that rejects it gets plain text from then on.
        self._structured_ok: bool | None = (
            None if cfg.structured == "auto" else cfg.structured == "json_schema"
        )

    def _chat_at(self, temperature: float) -> BaseChatModel:
        if isinstance(self.chat, ReplayChatModel):
            return self.chat
        if temperature not in self._chats:
            self._chats[temperature] = self.chat.model_copy(update={"temperature": temperature})
        return self._chats[temperature]

    def _system(self, device: str) -> tuple[str, list[P.PromptTemplate]]:
        role_t = P.load_template(f"common/role_{self.role}")
        sys_t = P.load_template("common/system")
        text = sys_t.render(
            {
                "role_block": role_t.render({}),
                "policy_rule": P.POLICY_RULES[self.cfg.policy],
                "target": P.fmt_target(device),
            }
        )
        return text, [sys_t, role_t]

    def _unavailable(self, e: BaseException, attempts: int) -> ModelUnavailableError:
        url = self.cfg.endpoint
        if isinstance(e, ReplayExhausted):
            return ModelUnavailableError(str(e))
        if isinstance(e, ReplayedError):
            return ModelUnavailableError(f"(replayed) {e}")
        if isinstance(e, openai.APITimeoutError):
            return ModelUnavailableError(
                f"model endpoint {url} gave no reply within {self.cfg.timeout_s:g}s ({attempts} attempts)"
            )
        if isinstance(e, openai.APIConnectionError):
            return ModelUnavailableError(f"cannot reach model endpoint {url} ({attempts} attempts): {e}")
        status = getattr(e, "status_code", None)
        msg = getattr(e, "message", None) or str(e)
        return ModelUnavailableError(
            f"model endpoint {url} failed after {attempts} attempts: last status {status} ({P.clip(msg, 300)})"
        )

    def _invoke(
        self, messages: list[BaseMessage], stage: str, temperature: float, schema: dict[str, Any] | None
    ) -> tuple[str, str | None, RoleUsage, list[str]]:
        """One model call: budget check, call, usage, record. Returns (text, finish_reason, usage, warnings)."""
        cfg = self.cfg
        cfg.ledger.check(cfg, stage)
        idx = cfg.ledger.next_call_index(self.role)
        use_schema = schema is not None and self._structured_ok is not False
        chat = self._chat_at(temperature)
        if isinstance(chat, ReplayChatModel):
            chat.expect_stage(stage)
        entry: dict[str, Any] = {
            "role": self.role,
            "stage": stage,
            "call_index": idx,
            "model": self.name,
            "temperature": temperature,
            "structured": use_schema,
            "messages": message_dicts(messages),
            "request_sha256": request_hash(messages),
        }
        t0 = time.monotonic()
        rec = cfg.recorder
        try:
            if use_schema:
                out = chat.with_structured_output(schema, method="json_schema", include_raw=True).invoke(
                    messages
                )
                msg = out["raw"]
            else:
                msg = chat.invoke(messages)
        except (openai.BadRequestError, ReplayedError) as e:
            kind = e.kind if isinstance(e, ReplayedError) else "bad_request"
            secs = time.monotonic() - t0
            if use_schema and cfg.structured == "auto" and kind in ("bad_request", "structured_unsupported"):
                # The server refused response_format: remember, and ask again for plain JSON text.
                if rec:
                    rec.write(
                        {
                            **entry,
                            "reply": None,
                            "seconds": secs,
                            "error": {"kind": "structured_unsupported", "message": P.clip(str(e), 500)},
                        }
                    )
                cfg.ledger.add(stage, self.role, RoleUsage(calls=1, seconds=secs))
                self._structured_ok = False
                log.info("structured output unsupported; using text JSON", model=self.name, role=self.role)
                return self._invoke(messages, stage, temperature, None)
            err = self._unavailable(e, cfg.max_retries + 1)
            self._record_error(rec, entry, secs, kind, err, stage)
            raise err from None
        except (openai.APIError, ReplayExhausted) as e:
            secs = time.monotonic() - t0
            err = self._unavailable(e, cfg.max_retries + 1)
            self._record_error(rec, entry, secs, type(e).__name__, err, stage)
            raise err from None
        secs = time.monotonic() - t0
        if use_schema:
            self._structured_ok = True
        text = msg.content if isinstance(msg.content, str) else str(msg.content)
        finish = (msg.response_metadata or {}).get("finish_reason")
        um = getattr(msg, "usage_metadata", None) or {}
        it = int(um.get("input_tokens") or 0)
        ot = int(um.get("output_tokens") or 0)
        if not um:  # servers that omit usage: estimate so budgets still bind
            it = sum(P.token_estimate(m["content"]) for m in entry["messages"])
            ot = P.token_estimate(text)
        usage = RoleUsage(calls=1, input_tokens=it, output_tokens=ot, seconds=secs)
        cfg.ledger.add(stage, self.role, usage)
        warnings: list[str] = []
        replay = (msg.response_metadata or {}).get("replay")
        if replay and replay.get("mismatch"):
            warnings.append(
                f"replay warning: {self.role} call {idx} was sent a request that differs from the recorded one "
                f"(sha256 {str(replay.get('request_sha256'))[:12]} vs recorded {str(replay.get('recorded_sha256'))[:12]})"
            )
            log.warning("replay request mismatch", role=self.role, call_index=idx, stage=stage)
        if rec:
            rec.write(
                {
                    **entry,
                    "reply": {
                        "text": text,
                        "finish_reason": finish,
                        "usage": {"input_tokens": it, "output_tokens": ot},
                    },
                    "error": None,
                    "seconds": round(secs, 4),
                }
            )
        return text, finish, usage, warnings

    def _record_error(
        self, rec: Recorder | None, entry: dict[str, Any], secs: float, kind: str, err: Exception, stage: str
    ) -> None:
        self.cfg.ledger.add(stage, self.role, RoleUsage(calls=1, seconds=secs))
        if rec:
            rec.write(
                {
                    **entry,
                    "reply": None,
                    "error": {"kind": kind, "message": str(err)},
                    "seconds": round(secs, 4),
                }
            )

    def _converse(
        self,
        system: str,
        user: str,
        stage: str,
        temperature: float,
        parse: Callable[[str, str | None], tuple[T | None, str | None]],
        corrective: Callable[[str], str],
        schema: dict[str, Any] | None = None,
    ) -> tuple[T, RoleUsage, list[str]]:
        """Ask, parse, and on an unusable reply ask again with a short correction (bounded)."""
        base: list[BaseMessage] = [SystemMessage(content=system), HumanMessage(content=user)]
        messages = list(base)
        total = RoleUsage()
        warnings: list[str] = []
        problem = ""
        tries = self.cfg.format_retries + 1
        for _ in range(tries):
            try:
                text, finish, usage, warns = self._invoke(messages, stage, temperature, schema)
            except ModelError as e:
                raise _attach_usage(e, total) from None
            total = _add(total, usage)
            warnings.extend(warns)
            result, problem_ = parse(text, finish)
            if problem_ is None and result is not None:
                return result, total, warnings
            problem = problem_ or "unusable reply"
            log.info("unusable model reply", role=self.role, stage=stage, problem=problem)
            # Only the failed reply (clipped) and the correction are added: context stays bounded.
            messages = [
                *base,
                AIMessage(content=P.clip(text, 3000) or "(empty reply)"),
                HumanMessage(content=corrective(problem)),
            ]
        err = ModelFormatError(
            f"{self.name} ({self.role}, stage {stage}) gave no usable reply after {tries} tries: {problem}"
        )
        raise _attach_usage(err, total)


# ---------------------------------------------------------------------------------------------
# Roles
# ---------------------------------------------------------------------------------------------


def _canon(params: Mapping[str, Any]) -> str:
    return repr(sorted(params.items()))


class LLMCode(_LLMRole):
    """CodeModel: writes whole candidate files."""

    role = "code"

    def __init__(self, model: str, chat: BaseChatModel, cfg: LLMConfig):
        super().__init__(model, chat, cfg)
        # Parameter sets already proposed by the tiling sweep, per (task, stage): `recent` only holds K.
        # Parallel variants of a round call in from several threads: one picks at a time.
        self._swept: dict[tuple[str, str], set[str]] = {}
        self._sweep_lock = threading.Lock()

    def render(self, req: CodeRequest) -> tuple[str, str, dict[str, str]]:
        """(system, user, prompt ref) for a request: also used by tests and `egg` to show prompts."""
        system, sys_parts = self._system(req.desc.device)
        mode_t = P.load_template(f"common/mode_{req.mode}")
        mode_vars: dict[str, Any] = {"iteration": req.iteration}
        if req.mode == "seed":
            mode_vars = {"seed_number": req.seed_index + 1, "n_seeds": req.n_seeds}
        elif req.mode == "tune":
            mode_vars.update(variant_number=req.seed_index + 1, n_variants=req.n_seeds)
            best_src = req.best.candidate.source if req.best else ""
            space, baked = read_tunables(best_src) if best_src else ({}, {})
            declared = [
                f"`{s.kernel}`: {len(s.configs)} @triton.autotune config(s)" for s in autotune.sites(best_src)
            ] + [f"{k}: now {baked.get(k)!r}, declared {v!r}" for k, v in space.items()]
            mode_vars["tunables"] = "; ".join(declared) or "(the current kernel declares no autotune configs)"
        elif req.mode == "fix":
            a = req.failed
            mode_vars = {
                "failed_id": a.candidate.id if a else "(unknown)",
                "failed_origin": a.candidate.origin if a else "",
                "failure": P.failure_text(a) if a else "(not given)",
                "diagnosis": P.fmt_diagnosis(req.diagnosis),
                "failed_source": (a.candidate.source.rstrip() if a else "(not given)"),
            }
        stage_t = P.load_template(f"{req.stage.name}/code")
        user = stage_t.render(
            {
                **P.stage_vars(req.stage),
                "task_name": req.task.name,
                "reference_source": req.task.source.rstrip(),
                "io_summary": P.fmt_desc(req.desc),
                "best_block": P.fmt_best(req.best),
                "decisions": P.fmt_decisions(req.decisions),
                "recent_k": self.cfg.recent_k,
                "recent": P.fmt_recent(req.recent, self.cfg.recent_k),
                "advice": P.fmt_advice(req.advice),
                "mode_block": mode_t.render(mode_vars),
            }
        )
        return system, user, _prompt_ref(stage_t, [*sys_parts, mode_t])

    def _sweep(self, req: CodeRequest) -> CodeReply | None:
        best = req.best
        if best is None:
            return None
        variants = tunable_variants(best.candidate.source, dict(best.candidate.params))
        with self._sweep_lock:
            tried = self._swept.setdefault((req.task.name, req.stage.name), set())
            tried.add(_canon(read_tunables(best.candidate.source)[1]))
            seen = tried | {_canon(s.params) for s in req.recent if s.params} | {_canon(p) for p in req.tried}
            pick = next(((p, src) for p, src in variants if _canon(p) not in seen), None)
            if pick is not None:
                tried.add(_canon(pick[0]))
        if pick is None:
            return None
        params, source = pick
        changed = {k: v for k, v in params.items() if best.candidate.params.get(k, v) != v} or params
        name, value = next(iter(changed.items()))
        return CodeReply(
            source=source,
            origin=f"tune:{name}={value}",
            params=params,
            note=f"sweep of the declared EGG_TUNABLES: {name}={value!r} (no model call)",
        )

    def write(self, req: CodeRequest) -> CodeReply:
        if req.mode == "tune" and req.stage.name == "tiling" and self.cfg.tune_sweep:
            swept = self._sweep(req)
            if swept is not None:
                return swept
        system, user, ref = self.render(req)
        allow_none = req.mode in ("refine", "tune")

        def parse(text: str, finish: str | None) -> tuple[CodeParse | None, str | None]:
            p = parse_code_reply(text, finish_reason=finish, allow_no_change=allow_none)
            return p, p.problem

        def corrective(problem: str) -> str:
            return (
                f"Your reply could not be used: {problem}. Reply again: one line `CHANGE: <summary>`, then "
                "exactly one complete ```python block holding the whole candidate file (imports, the "
                "@triton.jit kernel(s), class ModelNew). Keep it short enough to finish."
            )

        parsed, usage, warnings = self._converse(
            system, user, req.stage.name, self.cfg.temperature(f"code.{req.mode}"), parse, corrective
        )
        note = " | ".join([parsed.change or parsed.no_change or "", *warnings]).strip(" |")
        if parsed.source is None:  # the model declined: nothing further in this step
            return CodeReply(source=None, note=note or "model proposed no change", prompt=ref, usage=usage)
        origin = {
            "seed": f"seed:llm-{req.seed_index}",
            "refine": "refine:llm",
            "tune": "tune:llm",
            "fix": f"fix:{P.failure_rule(req.failed) if req.failed else 'unknown'}",
        }[req.mode]
        return CodeReply(
            source=parsed.source,
            origin=origin,
            algorithm=P.clip(parsed.change, 80) or None if req.mode == "seed" else None,
            params=read_tunables(parsed.source)[1],
            note=note,
            prompt=ref,
            usage=usage,
        )


class LLMProfiler(_LLMRole):
    """ProfilerModel: turns a profile into a bottleneck and a plan (structured JSON)."""

    role = "profiler"
    schema = json_schema_of(ProfilerReply, "ProfilerAdvice")

    def render(self, req: ProfilerRequest) -> tuple[str, str, dict[str, str]]:
        system, parts = self._system(req.desc.device)
        t = P.load_template(f"{req.stage.name}/profiler")
        user = t.render(
            {
                **P.stage_vars(req.stage),
                "task_name": req.desc.name,
                "io_summary": P.fmt_desc(req.desc),
                "kernel_source": req.attempt.candidate.source.rstrip(),
                "candidate_id": req.attempt.candidate.id,
                "profile": P.fmt_profile(req.profile, req.attempt),
                "incumbent": P.fmt_timing_of(req.best),
                "recent_k": self.cfg.recent_k,
                "recent": P.fmt_recent(req.recent, self.cfg.recent_k),
            }
        )
        return system, user, _prompt_ref(t, parts)

    def advise(self, req: ProfilerRequest) -> tuple[ProfilerAdvice, RoleUsage]:
        system, user, ref = self.render(req)
        r, usage, warnings = self._converse(
            system,
            user,
            req.stage.name,
            self.cfg.temperature("profiler"),
            lambda text, _f: parse_json_reply(text, ProfilerReply),
            lambda problem: (
                f"Your reply could not be used: {problem}. Reply with only a JSON object: "
                '{"bottleneck": "memory"|"compute"|"latency"|"unknown", "evidence": ["..."], "plan": "..."}'
            ),
            schema=self.schema,
        )
        assert isinstance(r, ProfilerReply)
        advice = ProfilerAdvice(
            bottleneck=r.bottleneck,
            evidence=[P.clip(e, 300) for e in r.evidence[:8]] + warnings,
            plan=P.clip(r.plan, 1500),
            source="llm",
            prompt=ref,
        )
        return advice, usage


class LLMDebugger(_LLMRole):
    """DebuggerModel: explains a failed attempt and plans the fix (structured JSON)."""

    role = "debugger"
    schema = json_schema_of(DebuggerReply, "Diagnosis")

    def render(self, req: DebuggerRequest) -> tuple[str, str, dict[str, str]]:
        system, parts = self._system(req.desc.device)
        t = P.load_template(f"{req.stage.name}/debugger")
        a = req.attempt
        user = t.render(
            {
                **P.stage_vars(req.stage),
                "task_name": req.desc.name,
                "reference_source": req.desc.source.rstrip(),
                "io_summary": P.fmt_desc(req.desc),
                "failed_id": a.candidate.id,
                "failed_origin": a.candidate.origin,
                "failed_source": a.candidate.source.rstrip(),
                "rule": P.failure_rule(a),
                "failure": P.failure_text(a),
                "recent_k": self.cfg.recent_k,
                "recent": P.fmt_recent(req.recent, self.cfg.recent_k),
            }
        )
        return system, user, _prompt_ref(t, parts)

    def diagnose(self, req: DebuggerRequest) -> tuple[Diagnosis, RoleUsage]:
        system, user, ref = self.render(req)
        r, usage, warnings = self._converse(
            system,
            user,
            req.stage.name,
            self.cfg.temperature("debugger"),
            lambda text, _f: parse_json_reply(text, DebuggerReply),
            lambda problem: (
                f"Your reply could not be used: {problem}. Reply with only a JSON object: "
                '{"diagnosis": "...", "fix_plan": "..."}'
            ),
            schema=self.schema,
        )
        assert isinstance(r, DebuggerReply)
        text = P.clip(r.diagnosis, 1500)
        if warnings:
            text += "\n" + "\n".join(warnings)
        diag = Diagnosis(
            rule=P.failure_rule(req.attempt),
            diagnosis=text,
            fix_plan=P.clip(r.fix_plan, 1500),
            source="llm",
            prompt=ref,
        )
        return diag, usage
