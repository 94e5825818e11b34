"""ExpertDebugger: maps compile errors and check failures to a rule, a diagnosis and a fix plan."""

from __future__ import annotations

import re

from graph.records import Attempt, Diagnosis, RoleUsage
from nodes.models import DebuggerRequest

from .assemble import group_at_line

_LINE = re.compile(r"candidate line (\d+)")


def failing_line(a: Attempt) -> int | None:
    """The candidate line an attempt failed on: the compile error's, or the one a run error names."""
    if a.compile is not None and a.compile.error_line:
        return a.compile.error_line
    if a.check is not None:
        for r in a.check.reasons:
            m = _LINE.search(r)
            if m:
                return int(m.group(1))
    return None


# (rule, pattern over the error text, diagnosis, fix plan), first match wins.
_COMPILE_RULES: list[tuple[str, str, str, str]] = [
    (
        "shared_memory",
        r"out of resource: shared|shared memory|OutOfResources.*shared",
        "the pipelined operand tiles need more shared memory than the SM has",
        "smaller BLOCK_K / BLOCK_N, or fewer num_stages",
    ),
    (
        "registers",
        r"out of resource|registers|too many resources",
        "the per-program tile needs more registers than available",
        "smaller blocks (BLOCK / BLOCK_N / ROWS) or more num_warps",
    ),
    (
        "dot_shape",
        r"tl\.dot|dot.*(shape|at least 16)|K >= 16|must be >= 16",
        "tl.dot operand shapes are invalid (each dim must be >= 16 and a power of two)",
        "use BLOCK_M/BLOCK_N/BLOCK_K >= 16, powers of two",
    ),
    (
        "constexpr",
        r"constexpr|must be a power of 2|arange's range must be",
        "a block size is not a compile-time power of two",
        "pass block sizes as tl.constexpr powers of two",
    ),
    (
        "unsupported_op",
        r"has no attribute|is not supported|unsupported|NotImplemented",
        "the kernel uses a Triton op or feature this version does not provide",
        "rewrite the failing expression with basic tl ops (exp, log, where, maximum)",
    ),
    (
        "type",
        r"TypeError|incompatible types|dtype",
        "operand dtypes do not agree inside the kernel",
        "cast loads to fp32 before arithmetic and cast back only at the store",
    ),
    (
        "syntax",
        r"SyntaxError|IndentationError",
        "the generated file is not valid Python",
        "regenerate from the family generator",
    ),
]

_CHECK_RULES: dict[str, tuple[str, str]] = {
    "mismatch": (
        "the kernel's output differs from the reference beyond tolerance",
        "check masking of tails and reduction order; for fp32 matmuls use exact (ieee) or 3xTF32 dots; "
        "try the other algorithm",
    ),
    "nan": (
        "the kernel produced NaN/Inf where the reference did not",
        "masked lanes must not feed exp/log (use -inf only where the max stays finite); guard "
        "0/0 in normalisations",
    ),
    "shape": (
        "the output has the wrong shape or dtype",
        "derive the output shape from the inputs at run time, as the reference does",
    ),
    "exception": (
        "the candidate raised while running",
        "check the launcher's shape/contiguity assumptions; use a safer algorithm",
    ),
    "timeout": ("the candidate did not finish in time", "smaller grid loops; check loop bounds"),
}


class ExpertDebugger:
    name = "expert"

    def diagnose(self, req: DebuggerRequest) -> tuple[Diagnosis, RoleUsage]:
        a = req.attempt
        if a.compile is not None and not a.compile.ok:
            text = f"{a.compile.error_kind or ''} {a.compile.error or ''}"
            where = f" (line {a.compile.error_line})" if a.compile.error_line else ""
            tag = group_at_line(a.candidate.source, a.compile.error_line) if a.compile.error_line else None
            if tag:
                where += f" in group {tag}'s code"
            for rule, pat, diag, fix in _COMPILE_RULES:
                if re.search(pat, text, re.IGNORECASE):
                    return (
                        Diagnosis(
                            rule=rule,
                            diagnosis=f"{diag}{where}: {_first_line(a.compile.error)}",
                            fix_plan=fix,
                        ),
                        RoleUsage(calls=1),
                    )
            return (
                Diagnosis(
                    rule=a.compile.error_kind or "compile",
                    diagnosis=f"compile failed{where}: {_first_line(a.compile.error)}",
                    fix_plan="fall back to a safer variant (smaller blocks, fewer stages, other algorithm)",
                ),
                RoleUsage(calls=1),
            )
        if a.check is not None and not a.check.accepted:
            rule = a.check.first_rule or "rejected"
            reasons = "; ".join(a.check.reasons)[:400]
            diag, fix = _CHECK_RULES.get(
                rule,
                (
                    "the candidate broke a verification rule",
                    "keep all arithmetic in Triton kernels and keep Model's parameters; regenerate",
                ),
            )
            if rule == "mismatch" and a.check.max_abs_err is not None:
                diag += f" (max abs err {a.check.max_abs_err:.3g})"
            line = failing_line(a)
            tag = group_at_line(a.candidate.source, line) if line else None
            if tag:
                diag += f" in group {tag}'s code"
            return Diagnosis(rule=rule, diagnosis=f"{diag}: {reasons}", fix_plan=fix), RoleUsage(calls=1)
        return (
            Diagnosis(rule="none", diagnosis="no failure recorded on this attempt", fix_plan="none"),
            RoleUsage(calls=1),
        )


def _first_line(text: str | None) -> str:
    if not text:
        return ""
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    return lines[-1][:300] if lines else ""
