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


def test_a_host_bound_forward_of_a_tiny_kernel_is_a_near_miss_and_a_claim_under_the_floor_never_is():
    # the H100's one-launch reduction: 0.0121 ms claimed, 0.0382 ms on the judge's clock (3.2x)
    assert 0.0382 > 0.0121 * timing.ADOPT_RATIO
    assert timing._near_miss(DISAGREE, {"wall_ms": 0.0382}, 0.0121, floor_ms=0.002)
    # the same clocks with a claim below the speed-of-light bound: a lie, refused as one
    assert not timing._near_miss(DISAGREE, {"wall_ms": 0.0382}, 0.0121, floor_ms=0.013)
    # the host allowance is per call, not a ratio: a slow kernel's lie is still one
    assert not timing._near_miss(DISAGREE, {"wall_ms": 7.0}, 2.0, floor_ms=0.0)
    # adopted after a second near miss: the judge's slower figure, never the claim
    out = {"wall_ms": 0.0382, "candidate_ms": 0.0121}
    v = timing.recheck(lambda: {"ok": True, "median": 0.0120}, _wall([0.0395])(out), 0.0121, out, 0.002)
    assert v is None and out["timed_by"] == "judge_wall" and out["candidate_ms"] == 0.0382
    out = {"wall_ms": 0.0382, "candidate_ms": 0.0121}
    v = timing.recheck(lambda: {"ok": True, "median": 0.0120}, _wall([0.0395])(out), 0.0121, out, 0.013)
    assert v == DISAGREE and "timed_by" not in out
