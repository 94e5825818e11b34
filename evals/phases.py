"""Where a task's seconds went: per-phase seconds for its results row, from what the run left behind.

Sources, best first:
- report.json's own `phases` dict ({phase: seconds}), used as written when present;
- otherwise a sum of what today's run records:
  - `model`: seconds inside the code/profiler/debugger model calls (report usage, every device);
  - `tools`: seconds inside the graph's tool nodes (compile, check, time, profile; report usage);
    on a GPU it contains the job phases below;
  - on a GPU, the `tool.evaluate` log lines of optimize.log (one per candidate job): `startup`
    (interpreter imports, CUDA start-up, process exit), `wait_memory` (GPU memory shares),
    `wait_timing` (the exclusive timing lock), `estimate_memory`, `compile`, `check`, `time`;
    and parts of two of them: `check.reference`, `check.candidate`, `check.inputs`,
    `check.compare`, `check.precompile`, `compile.precompile`, `compile.record`, `compile.sm90`
    (included in `check` and `compile`).
Job phases are summed over jobs, and the jobs of a tuning round run in parallel, so they can add
up to more than the task's wall time: they say where the machine's seconds went, not the latency.
"""

from __future__ import annotations

import math
import re
from typing import Any

# tool.evaluate's top-level phases (tools/worker/evaluate.py), grouped; "step.sub" keys are parts
# of their step and other keys on the line are readings (memory shares, GiB), not seconds.
_JOB_PHASES = {
    "imports": "startup",
    "cuda_init": "startup",
    "startup_and_exit": "startup",
    "wait_memory": "wait_memory",
    "wait_exclusive": "wait_timing",
    "estimate_memory": "estimate_memory",
    "load": "compile",  # the candidate's import, sent ahead of the memory wait since 827efc1
    "compile": "compile",
    "check": "check",
    "time": "time",
}
# Parts of the check and compile steps ("step.sub" keys of the same lines), so the next cost
# inside a step is visible too: the judge's reference forwards (native and float64), the
# candidate's forwards in the runner (and its builds), input draws, the comparisons; recording
# the launches (a forward that JIT-compiles every kernel) and the sm_90 compile for the report.
_SUB_PHASES = {
    "check.judge.reference": "check.reference",
    "check.runner.call": "check.candidate",
    "check.runner.build": "check.candidate",
    "check.judge.inputs": "check.inputs",
    "check.judge.read_outputs": "check.compare",
    "check.judge.inputs_unchanged": "check.compare",
    "check.judge.compare": "check.compare",
    "check.second_shape_precompile": "check.precompile",
    "compile.precompile": "compile.precompile",
    # the runner's own compile seconds; since 827efc1 most of them overlap the memory wait, and
    # compile.precompile is only what the compile step still waited for
    "compile.precompile_runner": "compile.precompile_runner",
    "compile.record": "compile.record",
    "compile.compile_specs": "compile.sm90",
}
_KV_RE = re.compile(r"([A-Za-z_][\w.]*)=('[^']*'|\"[^\"]*\"|\S+)")


def _seconds(x: Any) -> float | None:
    if isinstance(x, bool) or not isinstance(x, (int, float, str)):
        return None
    try:
        v = float(x)
    except ValueError:
        return None
    return v if math.isfinite(v) and v >= 0 else None


def usage_phases(report: dict[str, Any]) -> dict[str, float]:
    usage = report.get("usage") if isinstance(report.get("usage"), dict) else {}
    by_key = usage.get("by_stage_role") or usage.get("by_key") or {}
    out: dict[str, float] = {}
    for key, u in by_key.items() if isinstance(by_key, dict) else ():
        sec = _seconds(u.get("seconds")) if isinstance(u, dict) else None
        if sec is not None:
            name = "tools" if str(key).endswith("/tools") else "model"
            out[name] = out.get(name, 0.0) + sec
    return out


def job_phases(log_text: str) -> dict[str, float]:
    """Sum the grouped phases of every `tool.evaluate` line of an optimize log."""
    out: dict[str, float] = {}
    for line in log_text.splitlines():
        if "tool.evaluate" not in line:
            continue
        for key, raw in _KV_RE.findall(line):
            group = _JOB_PHASES.get(key) or _SUB_PHASES.get(key)
            sec = _seconds(raw.strip("'\"")) if group else None
            if group and sec is not None:
                out[group] = out.get(group, 0.0) + sec
    return out


def task_phases(report: dict[str, Any] | None, log_text: str) -> tuple[dict[str, float], str | None]:
    """(phases, source) for one task; source is "report", "usage+log" or None when nothing was found."""
    rep = report or {}
    own = rep.get("phases")
    if isinstance(own, dict):
        phases = {str(k): v for k, x in own.items() if (v := _seconds(x)) is not None}
        if phases:
            return {k: round(v, 3) for k, v in phases.items()}, "report"
    phases = {**usage_phases(rep), **job_phases(log_text)}
    if not phases:
        return {}, None
    return {k: round(v, 3) for k, v in phases.items()}, "usage+log"
