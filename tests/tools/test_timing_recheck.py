"""The near-miss path of the judge's wall check, with fakes for the runner's replies (CPU)."""

from __future__ import annotations

from tools.worker import timing

DISAGREE = ("timing.disagree", "claims less than the judge's clock saw")


def _wall(values):
    """A fake second wall check: sets out['wall_ms'] to the next value, and disagrees when it is
    past the tolerance, like `_wall_check`."""
    it = iter(values)

    def run(out):
        def check(med):
            out["wall_ms"] = next(it)
            return DISAGREE if out["wall_ms"] > med * timing.WALL_TOLERANCE + timing.WALL_SLACK_MS else None

        return check

    return run


def test_confirmed_on_the_second_try_keeps_the_events_median():
    out = {"wall_ms": 7.0, "candidate_ms": 4.1}
    v = timing.recheck(
        lambda: {"ok": True, "median": 5.0, "p20": 4.9, "p80": 5.2}, _wall([5.5])(out), 4.1, out
    )
    assert v is None
    assert out["candidate_ms"] == 5.0 and out["timed_by"] == "events, second try"


def test_a_second_near_miss_reports_the_judges_slower_figure():
    out = {"wall_ms": 7.04, "candidate_ms": 4.13}
    v = timing.recheck(lambda: {"ok": True, "median": 4.2}, _wall([6.9])(out), 4.13, out)
    assert v is None
    assert out["timed_by"] == "judge_wall"
    assert out["candidate_ms"] == 6.9 and out["claimed_ms"] == 4.13
    # never faster than either claim: the figure is the judge's, not the candidate's
    assert out["candidate_ms"] > 4.2 * timing.WALL_TOLERANCE


def test_a_gross_lie_on_the_second_try_is_still_rejected():
    out = {"wall_ms": 7.0}
    v = timing.recheck(lambda: {"ok": True, "median": 1e-6}, _wall([7.0])(out), 4.0, out)
    assert v == DISAGREE
    assert "timed_by" not in out


def test_no_usable_median_on_the_second_try_is_rejected():
    out = {"wall_ms": 7.0}
    v = timing.recheck(lambda: {"ok": False}, _wall([])(out), 4.0, out)
    assert v is not None and v[0] == "timing.disagree"


def test_near_miss_bounds():
    assert timing._near_miss(DISAGREE, {"wall_ms": 7.0}, 4.0)
    assert not timing._near_miss(DISAGREE, {"wall_ms": 7.0}, 7.0 / (timing.ADOPT_RATIO + 0.1))
    assert not timing._near_miss(("runtime.stale", "x"), {"wall_ms": 7.0}, 4.0)
    assert not timing._near_miss(DISAGREE, {}, 4.0)
