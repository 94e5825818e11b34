"""The run report (report.json): built from the graph's final state, a pure function."""

from __future__ import annotations

from typing import Any

from graph.records import BestKernel, StageDecision, TimingReport, Usage


def build_report(values: dict[str, Any], *, thread_id: str, wall_s: float | None = None) -> dict[str, Any]:
    settings = values.get("settings") or {}
    task = values.get("task")
    best: BestKernel | None = values.get("best")
    final: TimingReport | None = values.get("final")
    status = values.get("status") or "unknown"
    verified = status == "verified" and best is not None and best.check.accepted
    usage: Usage = values.get("usage") or Usage()
    decisions: list[StageDecision] = values.get("decisions") or []
    desc = values.get("desc")
    timing = None
    if final is not None and final.measured:
        timing = {
            "candidate_ms": final.candidate_ms,
            "candidate_p20_ms": final.candidate_p20_ms,
            "candidate_p80_ms": final.candidate_p80_ms,
            "eager_ms": final.eager_ms,
            "compile_ms": final.compile_ms,
            # torch.compile's own output held to the checker's bar (within_bar, or why not held)
            "compile_check": final.compile_check,
            "cudagraph_ms": final.cudagraph_ms,
            # the host's load and the timing's priority while it was timed, and where the
            # eager/torch.compile figures came from (measured here, or cached earlier in the run)
            "host_cpu_busy": final.host_cpu_busy,
            "host_priority": final.host_priority,
            "baseline": final.baseline,
            "noise": final.noise,
            "timed_by": final.timed_by,
            "claimed_ms": final.claimed_ms,
            # the first final benchmark, when it drifted from stage_ms and was taken again
            "first_benchmark_ms": final.first_benchmark_ms,
            # the same kernel as the stage that chose it timed it (another process, earlier):
            # far from candidate_ms, the kernel's time does not reproduce between processes
            "stage_ms": best.timing.candidate_ms
            if best is not None and best.timing is not None and best.timing.measured
            else None,
        }
    profile = values.get("final_profile")
    total = usage.total()
    return {
        "verified": verified,
        "status": status,
        "failure": None if verified else (values.get("failure") or values.get("halt") or status),
        # why the run stopped early (its wall-time or token budget), also when it verified
        "halt": values.get("halt"),
        "thread_id": thread_id,
        "task": task.name if task else values.get("task_path"),
        "task_path": task.path if task else values.get("task_path"),
        "device": settings.get("device"),
        "model": {r: settings.get(f"{r}_model") for r in ("code", "profiler", "debugger")},
        "policy": settings.get("policy"),
        "family": best.candidate.family if best else None,
        "algorithm": best.candidate.algorithm if best else None,
        "candidate_id": best.candidate.id if best else None,
        "params": best.candidate.params if best else None,
        "sizes_used": desc.sizes_used if desc else None,
        # The reference's output dtype(s), e.g. "float32": what reports print beside the GPU.
        "dtype": ",".join(dict.fromkeys(t.dtype for t in desc.outputs)) if desc and desc.outputs else None,
        "size_overrides": task.size_overrides if task else None,
        # the shapes asked for (`--shapes`), the shapes sizes_used follow, and why they differ
        "shapes_requested": task.shapes if task else None,
        "shapes": desc.shapes if desc else None,
        "shapes_note": desc.shapes_note if desc else None,
        "check": best.check.model_dump() if best else None,
        "delegated_ops": best.check.delegated_ops if best else [],
        "stages": [d.model_dump() for d in decisions],
        "timing": timing,
        "timing_note": None
        if timing
        else (final.reason if final is not None else "no verified kernel to time"),
        "speedup_vs_eager": final.speedup_vs_eager if final is not None and verified else None,
        "speedup_vs_compile": final.speedup_vs_compile if final is not None and verified else None,
        "speedup_vs_best": final.speedup_vs_best if final is not None and verified else None,
        "roofline_fraction": profile.roofline_fraction if profile else None,
        "bottleneck": profile.bottleneck if profile else None,
        # the profiler's one line on the final kernel (why it is where it is on its roofline)
        "profile_note": profile.suggestion if profile else None,
        "env": final.env.model_dump() if final is not None and final.env else None,
        "usage": {
            "by_stage_role": {k: v.model_dump() for k, v in usage.by_key.items()},
            "total": total.model_dump(),
        },
        "wall_s": wall_s,
    }
