import random

import pytest

from graph.records import BestKernel, Candidate, CheckReport, RoleUsage, StageDecision, TimingReport, Usage
from graph.reducers import beats, keep_best, merge_decisions, merge_usage


def bk(i: str, ms: float | None, accepted: bool = True, noise: float = 0.005) -> BestKernel:
    t = TimingReport(measured=ms is not None, candidate_ms=ms, noise=noise if ms is not None else None)
    return BestKernel(
        candidate=Candidate(id=i, source="x", stage="s", origin="seed:0"),
        check=CheckReport(accepted=accepted, reasons=[] if accepted else ["mismatch: x"]),
        timing=t,
    )


def test_beats_requires_margin_beyond_noise():
    assert beats(bk("a", 0.5).timing, bk("b", 1.0).timing)
    assert not beats(bk("a", 0.995).timing, bk("b", 1.0).timing)  # within the 1% floor
    assert not beats(bk("a", 0.9, noise=0.2).timing, bk("b", 1.0).timing)  # within measured noise
    assert not beats(bk("a", None).timing, bk("b", 1.0).timing)
    assert not beats(bk("a", 0.5).timing, bk("b", None).timing)


def test_keep_best_never_takes_unverified_or_noise_level_gains():
    inc = bk("inc", 1.0)
    assert keep_best(inc, bk("bad", 0.1, accepted=False)) is inc
    assert keep_best(inc, bk("tie", 0.995)) is inc
    assert keep_best(inc, None) is inc
    assert keep_best(None, bk("new", 2.0)).candidate.id == "new"
    assert keep_best(inc, bk("fast", 0.5)).candidate.id == "fast"
    assert keep_best(bk("unmeasured", None), bk("slow", 5.0)).candidate.id == "unmeasured"


def test_keep_best_shuffled_parallel_writes_converge():
    writes = [bk("a", 1.0), bk("b", 0.7), bk("c", 0.4), bk("d", 0.1, accepted=False), bk("e", 0.9), None]
    rng = random.Random(0)
    for _ in range(200):
        rng.shuffle(writes)
        cur = None
        for w in writes:
            cur = keep_best(cur, w)
        assert cur.candidate.id == "c"


def test_merge_decisions_one_per_stage_in_order():
    d = lambda s, o: StageDecision(stage=s, outcome=o, changed="x", why="y")
    out = merge_decisions(
        [d("tiling", "kept"), d("algorithm", "improved")], [d("mapping", "kept"), d("tiling", "improved")]
    )
    assert [(x.stage, x.outcome) for x in out] == [
        ("algorithm", "improved"),
        ("mapping", "kept"),
        ("tiling", "improved"),
    ]
    assert merge_decisions(out, out) == out  # idempotent: a subgraph echoing the parent's list adds nothing


def test_merge_usage_is_order_independent():
    parts = [
        Usage(by_key={f"s{i % 3}/code": RoleUsage(calls=1, input_tokens=i, output_tokens=2 * i, seconds=0.5)})
        for i in range(10)
    ]
    rng = random.Random(1)
    results = set()
    for _ in range(20):
        rng.shuffle(parts)
        acc = Usage()
        for p in parts:
            acc = merge_usage(acc, p)
        results.add(acc.model_dump_json())
    assert len(results) == 1
    total = Usage.model_validate_json(results.pop()).total()
    assert total.calls == 10 and total.input_tokens == 45 and total.output_tokens == 90


def test_a_kernel_at_the_roofline_is_not_worth_tuning() -> None:
    from graph.records import BestKernel, Candidate, CheckReport, ProfileReport, TimingReport
    from graph.reducers import headroom, not_worth_tuning

    def best(rf: float | None, noise: float) -> BestKernel:
        return BestKernel(
            candidate=Candidate(id="c", stage="algorithm", source="x", origin="seed"),
            check=CheckReport(accepted=True),
            timing=TimingReport(measured=True, candidate_ms=1.0, noise=noise),
            profile=ProfileReport(roofline_fraction=rf),
        )

    assert not_worth_tuning(best(0.975, 0.01)) is not None  # 0.5% left < 1% noise
    assert "roofline" in not_worth_tuning(best(0.975, 0.01))
    assert not_worth_tuning(best(0.80, 0.01)) is None  # 22% left: tune
    assert headroom(best(0.95, 0.05)) == pytest.approx(0.98 / 0.95 - 1)
    assert not_worth_tuning(best(0.95, 0.05)) is not None  # 3.2% left < 5% noise
    assert not_worth_tuning(best(None, 0.01)) is None  # unmeasured (CPU): never skipped
