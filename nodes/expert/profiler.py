"""ExpertProfiler: reads the ProfileReport and compile info and says what limits the kernel."""

from __future__ import annotations

from graph.records import ProfilerAdvice, RoleUsage, TaskDescription
from nodes.models import ProfilerRequest

from .graphview import Unsupported
from .lowering import PARTITION, lower
from .partition import group_cost

# H200 figures used to interpret achieved numbers when the report has no roofline fraction.
PEAK_GBPS = 4300.0

_PLANS = {
    "memory": (
        "memory-bound: raise bytes in flight and cut traffic — larger BLOCK per program, evict_first "
        "on streamed inputs, fuse remaining passes so each byte is read once"
    ),
    "compute": (
        "compute-bound: keep tensor cores fed — larger output tiles (128x128/128x256), deeper "
        "pipelining (num_stages 3-5), GROUP_M ordering for L2 reuse of the operand tiles"
    ),
    "latency": (
        "latency/launch-bound: too little work per launch — fewer, larger programs (more rows or "
        "elements per program), fewer kernels, fewer warps per small tile"
    ),
    "unknown": "no timing evidence: tune tile sizes first, then warps/stages",
}


class ExpertProfiler:
    name = "expert"

    def advise(self, req: ProfilerRequest) -> tuple[ProfilerAdvice, RoleUsage]:
        p = req.profile
        evidence = list(p.evidence)
        bottleneck = p.bottleneck
        if p.roofline_fraction is not None:
            evidence.append(f"roofline fraction {p.roofline_fraction:.2f}")
        if p.achieved_gbps is not None:
            evidence.append(
                f"achieved {p.achieved_gbps:.0f} GB/s ({p.achieved_gbps / PEAK_GBPS:.0%} of peak)"
            )
        if p.achieved_tflops is not None:
            evidence.append(f"achieved {p.achieved_tflops:.1f} TFLOP/s")
        timing = req.attempt.timing
        if bottleneck == "unknown" and timing is not None and timing.measured and timing.candidate_ms:
            if timing.candidate_ms < 0.02:
                bottleneck = "latency"
                evidence.append(f"{timing.candidate_ms * 1000:.1f} us per call: launch overhead dominates")
        if bottleneck == "unknown" and req.desc.flops is not None and req.desc.bytes_moved:
            intensity = req.desc.flops / req.desc.bytes_moved
            # The fp32-tensor-core ridge on H200 is ~100 FLOP/byte; well below it is memory-bound.
            bottleneck = "compute" if intensity > 60 else "memory"
            evidence.append(f"arithmetic intensity {intensity:.1f} FLOP/byte")
        plan = _PLANS[bottleneck]
        comp = req.attempt.compile
        if comp is not None:
            for k in comp.kernels:
                if k.spills:
                    evidence.append(f"{k.name}: {k.spills} bytes spilled ({k.registers} registers)")
                    plan = (
                        f"{k.name} spills registers: shrink the per-program tile or raise num_warps "
                        "before anything else; then " + plan
                    )
                elif k.registers is not None and k.registers >= 224:
                    evidence.append(f"{k.name}: {k.registers} registers per thread limits occupancy")
        if p.suggestion:
            evidence.append(f"tool suggestion: {p.suggestion}")
        share = dominant_group(req.desc, req.attempt.candidate.params)
        if share is not None:
            tag, name, frac = share
            evidence.append(f"group {tag} ({name}) holds ~{frac:.0%} of the estimated work")
            plan = f"tune {tag} first: it dominates the estimated work; then " + plan
        return ProfilerAdvice(bottleneck=bottleneck, evidence=evidence, plan=plan), RoleUsage(calls=1)


def dominant_group(desc: TaskDescription, params: dict) -> tuple[str, str, float] | None:
    """(tag, family, share) of the group with the most estimated work, for a partitioned
    candidate (its parameters are namespaced by group); None for a whole-graph kernel."""
    if params.get("algorithm") != PARTITION:
        return None
    # The policy shapes the groups only where a family's algorithms are all library calls; a
    # candidate using none of them was planned as under strict.
    lib = any(str(v).startswith("library") for k, v in params.items() if k.endswith(".algorithm"))
    try:
        low = lower(desc, "mixed" if lib else "strict")
    except Unsupported:
        return None
    costs = [(group_cost(low.view, u.group), u) for u in low.units if u.group is not None]
    total = sum(c for c, _ in costs)
    if not costs or total <= 0:
        return None
    cost, unit = max(costs, key=lambda x: x[0])
    return unit.tag or "", unit.name, cost / total
