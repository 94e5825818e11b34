"""Stage prompt templates (`stage_prompts/`) and the compact views of requests they are filled with.

A template file is a small header then a `string.Template` body:

    ---
    id: tiling/code
    version: 1
    inputs: stage_title, objective, ...
    output: one ```python block holding the whole candidate file
    changelog:
      - 1: first version
    ---
    body with $variables ($$ for a literal dollar)

Rendering is strict: a missing variable raises `PromptError` naming it, and at load time the declared
inputs must equal the body's placeholders. Prompts carry only summaries (the last K attempts as one
line each, earlier stages' decisions as one line each), never earlier transcripts, so a call's size
stays flat across iterations.

Prompts are steady: measured values (times, errors, rates) are printed to 3 significant digits, in
the structured fields and in the free text of notes, evidence and check reasons alike, so a re-run
of a thread whose values differ only in low-order digits (thread counts, reduction order) renders
byte-identical requests and `egg replay --llm recorded` matches every recorded call. A value that
moved by more than that (a GPU timing's noise) still changes the request, and replay says so.
"""

from __future__ import annotations

import hashlib
import re
import string
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache, lru_cache
from pathlib import Path
from typing import Any

from graph.records import (
    Attempt,
    BestKernel,
    Diagnosis,
    ProfilerAdvice,
    ProfileReport,
    StageDecision,
    TaskDescription,
)
from nodes.models import AttemptSummary, StageBrief

PROMPT_DIR = Path(__file__).resolve().parent.parent / "stage_prompts"
ROLES = ("code", "profiler", "debugger")


class PromptError(ValueError):
    """A template is malformed or a variable is missing: a bug, so it fails loudly."""


@dataclass(frozen=True)
class PromptTemplate:
    id: str
    version: str
    inputs: tuple[str, ...]
    output: str
    changelog: tuple[str, ...]
    body: str
    sha256: str  # of the whole template file as stored
    path: Path

    def render(self, values: Mapping[str, Any]) -> str:
        try:
            return string.Template(self.body).substitute({k: str(v) for k, v in values.items()})
        except KeyError as e:
            raise PromptError(f"prompt {self.id} v{self.version}: missing variable ${e.args[0]}") from None
        except ValueError as e:
            raise PromptError(f"prompt {self.id} v{self.version}: {e}") from None

    @property
    def ref(self) -> dict[str, str]:
        return {"id": self.id, "version": self.version, "sha256": self.sha256}


def _parse(path: Path) -> PromptTemplate:
    text = path.read_text(encoding="utf-8")
    lines = text.split("\n")
    if not lines or lines[0].strip() != "---" or "---" not in [ln.strip() for ln in lines[1:]]:
        raise PromptError(f"{path}: missing '---' header block")
    end = 1 + [ln.strip() for ln in lines[1:]].index("---")
    header: dict[str, str] = {}
    changelog: list[str] = []
    key = ""
    for ln in lines[1:end]:
        if ln.startswith("  -") and key == "changelog":
            changelog.append(ln.strip()[1:].strip())
        elif ":" in ln and not ln.startswith(" "):
            key, _, val = ln.partition(":")
            key = key.strip()
            header[key] = val.strip()
    for need in ("id", "version", "inputs", "output"):
        if need not in header:
            raise PromptError(f"{path}: header lacks '{need}'")
    body = "\n".join(lines[end + 1 :])
    inputs = tuple(s.strip() for s in header["inputs"].split(",") if s.strip())
    try:
        used = set(string.Template(body).get_identifiers())
    except ValueError as e:  # pragma: no cover - get_identifiers does not raise on 3.11, kept for clarity
        raise PromptError(f"{path}: {e}") from None
    if not string.Template(body).is_valid():
        raise PromptError(f"{path}: invalid placeholder (write $$ for a literal dollar sign)")
    if used != set(inputs):
        raise PromptError(
            f"{path}: declared inputs {sorted(inputs)} differ from the body's placeholders {sorted(used)}"
        )
    return PromptTemplate(
        id=header["id"],
        version=header["version"],
        inputs=inputs,
        output=header["output"],
        changelog=tuple(changelog),
        body=body,
        sha256=hashlib.sha256(text.encode("utf-8")).hexdigest(),
        path=path,
    )


@cache
def _load_cached(path: str, mtime_ns: int) -> PromptTemplate:
    return _parse(Path(path))


def load_template(name: str, *, root: Path | None = None) -> PromptTemplate:
    """Load `<name>.v<N>.md` (highest N) from the prompt directory; `name` is e.g. "tiling/code"."""
    base = (root or PROMPT_DIR) / name
    versions = sorted(
        base.parent.glob(base.name + ".v*.md"),
        key=lambda p: (
            int(re.search(r"\.v(\d+)\.md$", p.name).group(1)) if re.search(r"\.v(\d+)\.md$", p.name) else -1
        ),
    )
    if not versions:
        raise PromptError(f"no prompt template {name} under {root or PROMPT_DIR}")
    p = versions[-1]
    return _load_cached(str(p), p.stat().st_mtime_ns)


# ---------------------------------------------------------------------------------------------
# Compact views of request parts (one line per item; long texts clipped)
# ---------------------------------------------------------------------------------------------


def clip(text: str | None, n: int) -> str:
    if not text:
        return ""
    text = text.strip()
    return text if len(text) <= n else text[: n - 15].rstrip() + " …[clipped]"


POLICY_RULES = {
    "strict": "Policy STRICT: every arithmetic operation of forward runs inside your @triton.jit kernels. "
    "PyTorch may only allocate outputs (torch.empty / empty_like / zeros) and reshape views "
    "(view, reshape, contiguous, size/stride queries).",
    "mixed": "Policy MIXED: as strict, except that a library matmul or convolution (torch.matmul, "
    "F.linear, F.conv*) may be called for the matmul/conv itself; everything around it (bias, "
    "activations, normalisations, reductions, elementwise epilogues) must be in your Triton kernels.",
}


# A decimal number in free text ("0.14849600195884705", "3.1e-2", "1.3527ms"); not part of a
# version ("3.6.0"), an identifier ("sm_90", "v1.2") or an integer.
_DECIMAL_RE = re.compile(r"(?<![\w.])(\d+\.\d+(?:[eE][-+]?\d+)?|\d+[eE][-+]?\d+)(?![.\d])")


def num(x: float | None, digits: int = 3) -> str:
    """A measured value to `digits` significant digits, printed without a needless exponent."""
    if x is None:
        return "n/a"
    return f"{float(f'{x:.{digits}g}'):g}"


def _steady_number(m: re.Match[str]) -> str:
    written = m.group(1)
    mantissa = re.split("[eE]", written)[0].replace(".", "").lstrip("0")
    return written if len(mantissa) <= 3 else num(float(written))


def steady(text: str | None) -> str:
    """Free text with every decimal number of more than 3 significant digits rounded as `num` does
    (see the module docstring); shorter numbers stay as written."""
    return _DECIMAL_RE.sub(_steady_number, text or "")


def fmt_target(device: str) -> str:
    """What the system prompt says about the hardware: the run's device, never a GPU it lacks."""
    if device == "cuda":
        return (
            "an NVIDIA GPU. Candidates are compiled for sm_90 (Hopper: 64K 32-bit registers and up to "
            "227 KB shared memory per SM), checked and timed on this GPU; its name and peak bandwidth "
            "and FLOP/s are given with each measured timing."
        )
    return (
        "no GPU in this run. Candidates are compiled for sm_90 (Hopper, e.g. H100/H200) and checked "
        "with the Triton interpreter on the CPU; nothing is timed, so correctness decides and no "
        "speedup is known. Still write the kernel you would run on the GPU."
    )


def fmt_gpu(timing: Any) -> str:
    """The GPU a timing was measured on, with its peak numbers, or "" when not timed on a GPU."""
    from tools.toolbox import peaks_for

    gpu = timing.env.gpu if timing is not None and timing.measured and timing.env else None
    if not gpu:
        return ""
    pk = peaks_for(gpu)
    if pk is None:
        return f"measured on {gpu} (peak unknown)"
    return (
        f"measured on {gpu} (peaks {pk['gbps']:g} GB/s HBM; {pk['tflops_fp32']:g} fp32 / "
        f"{pk['tflops_tf32']:g} TF32 / {pk['tflops_bf16']:g} bf16 TFLOP/s)"
    )


def fmt_tensor(t: Any) -> str:
    if hasattr(t, "shape"):
        return f"{t.dtype}[{', '.join(map(str, t.shape))}]"
    return f"{getattr(t, 'type', 'scalar')} {getattr(t, 'value', '')}"


def fmt_desc(desc: TaskDescription) -> str:
    parts = [
        "inputs: " + "; ".join(fmt_tensor(t) for t in desc.inputs),
        "outputs: " + "; ".join(fmt_tensor(t) for t in desc.outputs),
    ]
    if desc.init_args:
        parts.append("constructor args: " + clip(repr(desc.init_args), 200))
    if desc.params:
        parts.append(
            "parameters: "
            + clip("; ".join(f"{p.name} {p.dtype}[{', '.join(map(str, p.shape))}]" for p in desc.params), 600)
        )
    if desc.sizes_used and desc.sizes_used != desc.constants:
        parts.append("sizes used in this run: " + clip(repr(desc.sizes_used), 300))
    ops = [n.op for n in desc.op_graph if n.kind not in ("placeholder", "output", "get_attr")]
    if ops:
        parts.append("op chain: " + clip(" -> ".join(ops), 400))
    if desc.flops is not None or desc.bytes_moved is not None:
        parts.append(f"work: {desc.flops or 0:.3g} FLOP, {desc.bytes_moved or 0:.3g} bytes (minimum traffic)")
    if desc.degenerate:
        parts.append("degenerate: " + "; ".join(desc.degenerate))
    return "\n".join(f"- {p}" for p in parts)


def fmt_timing_of(best: BestKernel | None) -> str:
    if best is None or best.timing is None or not best.timing.measured:
        return "not timed (CPU run or not yet measured)"
    t = best.timing
    s = f"{num(t.candidate_ms)} ms"
    if t.speedup_vs_eager:
        s += f", {t.speedup_vs_eager:.2f}x vs eager"
    if t.speedup_vs_compile:
        s += f", {t.speedup_vs_compile:.2f}x vs torch.compile"
    if t.noise is not None:
        s += f", noise {t.noise:.0%}"
    if gpu := fmt_gpu(t):
        s += f", {gpu}"
    return s


def fmt_best(best: BestKernel | None) -> str:
    if best is None:
        return "(none yet: this step writes the first kernel)"
    c = best.candidate
    head = (
        f"id {c.id}, origin {c.origin}, params {c.params or {}}; verified "
        f"(max abs err {num(best.check.max_abs_err)}); "
        f"time: {fmt_timing_of(best)}"
    )
    if best.profile is not None and best.profile.bottleneck != "unknown":
        head += f"; bottleneck {best.profile.bottleneck}"
        if best.profile.roofline_fraction is not None:
            head += f" at {best.profile.roofline_fraction:.0%} of roofline"
    return f"{head}\n```python\n{c.source.rstrip()}\n```"


def fmt_decision(d: StageDecision) -> str:
    sp = ""
    if d.speedup_entry is not None or d.speedup_exit is not None:
        sp = f" [{d.speedup_entry or 0:.2f}x -> {d.speedup_exit or 0:.2f}x]"
    return clip(steady(f"- {d.stage}: {d.outcome}; changed {d.changed}; why: {d.why}") + sp, 300)


def fmt_decisions(ds: list[StageDecision]) -> str:
    return "\n".join(fmt_decision(d) for d in ds) if ds else "(none: this is the first stage)"


def fmt_summary(s: AttemptSummary) -> str:
    bits = [f"- {s.candidate_id} {s.origin}"]
    if s.params:
        bits.append(clip(repr(s.params), 120))
    bits.append(f"-> {steady(s.outcome)}")
    if s.speedup_vs_eager is not None:
        bits.append(f"({s.speedup_vs_eager:.2f}x eager)")
    line = " ".join(bits)
    if s.note:
        line += " | " + clip(steady(s.note.replace("\n", " ")), 200)
    return line


def fmt_recent(recent: list[AttemptSummary], k: int) -> str:
    if not recent or k <= 0:
        return "(none yet)"
    return "\n".join(fmt_summary(s) for s in recent[-k:])


def fmt_advice(a: ProfilerAdvice | None) -> str:
    if a is None:
        return "(none)"
    ev = "; ".join(a.evidence[:5])
    return clip(steady(f"bottleneck {a.bottleneck} ({a.source}); evidence: {ev}; plan: {a.plan}"), 900)


def fmt_diagnosis(d: Diagnosis | None) -> str:
    if d is None:
        return "(none)"
    return clip(steady(f"rule {d.rule} ({d.source}): {d.diagnosis}\nfix plan: {d.fix_plan}"), 1200)


def failure_text(a: Attempt) -> str:
    if a.compile is not None and not a.compile.ok:
        where = f" (line {a.compile.error_line})" if a.compile.error_line else ""
        return clip(f"compile error [{a.compile.error_kind}]{where}: {a.compile.error}", 1500)
    if a.check is not None and not a.check.accepted:
        errs = ""
        if a.check.max_abs_err is not None:
            errs = f" (max abs err {num(a.check.max_abs_err)}, max rel err {num(a.check.max_rel_err or 0)})"
        return clip("check rejected" + errs + ": " + steady("; ".join(a.check.reasons)), 1500)
    if a.timing is not None and not a.timing.measured and a.timing.reason:
        return clip(f"timing failed: {steady(a.timing.reason)}", 800)
    return f"outcome {a.outcome}"


def failure_rule(a: Attempt) -> str:
    if a.compile is not None and not a.compile.ok:
        return a.compile.error_kind or "compile"
    if a.check is not None and not a.check.accepted:
        return a.check.first_rule or "check"
    return "unknown"


def fmt_profile(p: ProfileReport, a: Attempt) -> str:
    lines = [f"- roofline bottleneck estimate: {p.bottleneck}"]
    if p.achieved_gbps is not None:
        lines.append(f"- achieved {num(p.achieved_gbps)} GB/s")
    if p.achieved_tflops is not None:
        lines.append(f"- achieved {num(p.achieved_tflops)} TFLOP/s")
    if p.roofline_fraction is not None:
        lines.append(f"- {p.roofline_fraction:.0%} of the roofline bound")
    for e in p.evidence[:6]:
        lines.append(f"- {clip(steady(e), 200)}")
    if p.ncu_skipped:
        lines.append(f"- ncu not run: {clip(p.ncu_skipped, 150)}")
    if a.compile is not None:
        for k in a.compile.kernels[:4]:
            lines.append(
                f"- kernel {k.name}: num_warps={k.num_warps} num_stages={k.num_stages} registers={k.registers} "
                f"spills={k.spills} shared={k.shared_bytes}B constexprs={clip(repr(k.constants), 120)}"
            )
    if a.timing is not None and a.timing.measured:
        t = a.timing
        lines.append(
            f"- time {num(t.candidate_ms)} ms (p20 {num(t.candidate_p20_ms)}, p80 {num(t.candidate_p80_ms)}), "
            f"eager {num(t.eager_ms)} ms, torch.compile {num(t.compile_ms)} ms, launches {t.candidate_launches}"
        )
        if gpu := fmt_gpu(t):
            lines.append(f"- {gpu}")
    elif a.timing is not None:
        lines.append(f"- not timed: {clip(steady(a.timing.reason), 150)}")
    return "\n".join(lines)


def stage_vars(st: StageBrief) -> dict[str, str]:
    return {
        "stage": st.name,
        "objective": st.objective,
        "may_change": ", ".join(st.may_change) or "(unspecified)",
        "must_keep": ", ".join(st.must_keep) or "(unspecified)",
        "run_principles": "\n".join(f"- {p}" for p in st.principles) or "- (none given)",
    }


def token_estimate(text: str) -> int:
    """Token count of `text`: tiktoken's cl100k_base when its file is cached locally, else chars/4.

    tiktoken downloads its encoding on first use; that must not happen here (no network), so it is
    only used when the cache file is already present."""
    enc = _cached_encoding()
    if enc is not None:
        return len(enc.encode(text, disallowed_special=()))
    return max(1, len(text) // 4)


@lru_cache(maxsize=1)
def _cached_encoding() -> Any:
    import os
    import tempfile

    try:
        import tiktoken
        import tiktoken_ext.openai_public as pub  # noqa: F401 - presence check only
    except ImportError:
        return None
    url = "https://openaipublic.blob.core.windows.net/encodings/cl100k_base.tiktoken"
    cache_dir = (
        os.environ.get("TIKTOKEN_CACHE_DIR")
        or os.environ.get("DATA_GYM_CACHE_DIR")
        or os.path.join(tempfile.gettempdir(), "data-gym-cache")
    )
    if not os.path.exists(os.path.join(cache_dir, hashlib.sha1(url.encode()).hexdigest())):
        return None
    try:
        return tiktoken.get_encoding("cl100k_base")
    except Exception:  # a corrupt cache must not break a run; the proxy is good enough for budgets
        return None


def token_method() -> str:
    return "tiktoken cl100k_base" if _cached_encoding() is not None else "chars/4"
