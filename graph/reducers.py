"""Pure, total reducers for the graph's channels (unit-tested with shuffled parallel writes)."""

from __future__ import annotations

from graph.records import BestKernel, RoleUsage, StageDecision, TimingReport, Usage
from graph.stages import STAGE_ORDER

# Below this relative spread two medians are treated as equal even when the measured noise is smaller:
# clocks and L2 state move medians by about this much between processes.
MIN_NOISE = 0.01


def beats(new: TimingReport | None, incumbent: TimingReport | None) -> bool:
    """True when `new`'s median is faster than `incumbent`'s by more than the measured noise."""
    if new is None or not new.measured or new.candidate_ms is None:
        return False
    if incumbent is None or not incumbent.measured or incumbent.candidate_ms is None:
        return False
    noise = max(new.noise or 0.0, incumbent.noise or 0.0, MIN_NOISE)
    return new.candidate_ms * (1.0 + noise) < incumbent.candidate_ms


# The share of the roofline (ideal time from peak bandwidth and flop rate) that a kernel can
# reach in practice: eager elementwise ops on large tensors run at about 98% of the measured
# copy bandwidth on the H200 (PERF_NOTES).
ATTAINABLE_ROOFLINE = 0.98


def headroom(best: BestKernel | None) -> float | None:
    """The largest speedup still possible for `best` by the roofline, as a fraction (0.05 = 5%),
    or None when it was not measured."""
    if best is None or best.profile is None or not best.profile.roofline_fraction:
        return None
    return max(0.0, ATTAINABLE_ROOFLINE / best.profile.roofline_fraction - 1.0)


def not_worth_tuning(best: BestKernel | None) -> str | None:
    """Why a tuning stage cannot improve `best` beyond the noise `beats` demands, or None."""
    room = headroom(best)
    if room is None or best is None or best.timing is None:
        return None
    noise = max(best.timing.noise or 0.0, MIN_NOISE)
    if room <= noise:
        return (
            f"at {best.profile.roofline_fraction:.0%} of the roofline: at most {room:.1%} faster, "
            f"within the noise ({noise:.1%})"
        )
    return None


def keep_best(current: BestKernel | None, new: BestKernel | None) -> BestKernel | None:
    """Keep the incumbent unless the newcomer is verified and measurably faster.

    A verified kernel is never replaced by an unverified one, nor by one that is faster only
    within noise; an unmeasured newcomer replaces only an empty slot.
    """
    if new is None or not new.check.accepted:
        return current
    if current is None or not current.check.accepted:
        return new
    if new.candidate.id == current.candidate.id:
        return current
    return new if beats(new.timing, current.timing) else current


def merge_decisions(
    current: list[StageDecision] | None, new: list[StageDecision] | None
) -> list[StageDecision]:
    """One decision per stage (a later write for a stage replaces the earlier), in stage order."""
    by_stage: dict[str, StageDecision] = {d.stage: d for d in (current or [])}
    for d in new or []:
        by_stage[d.stage] = d
    order = {name: i for i, name in enumerate(STAGE_ORDER)}
    return sorted(by_stage.values(), key=lambda d: order.get(d.stage, len(order)))


def merge_usage(current: Usage | None, new: Usage | None) -> Usage:
    """Sum usage per key; associative and commutative, so parallel branches may write in any order."""
    out: dict[str, RoleUsage] = dict((current or Usage()).by_key)
    for key, u in (new or Usage()).by_key.items():
        old = out.get(key, RoleUsage())
        out[key] = RoleUsage(
            calls=old.calls + u.calls,
            input_tokens=old.input_tokens + u.input_tokens,
            output_tokens=old.output_tokens + u.output_tokens,
            seconds=round(old.seconds + u.seconds, 6),
        )
    return Usage(by_key=dict(sorted(out.items())))


def usage_of(key: str, u: RoleUsage) -> Usage:
    return Usage(by_key={key: u})


def first_set(current: str | None, new: str | None) -> str | None:
    """Keep the first non-empty value (e.g. the reason a run halted)."""
    return current if current else new
