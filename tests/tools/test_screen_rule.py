"""The worker's screening rule is the graph's acceptance rule: a candidate is screened out exactly
when, verified, it would not have been adopted (graph.reducers.beats)."""

import itertools

from graph.records import TimingReport
from graph.reducers import MIN_NOISE, beats
from tools.worker.evaluate import screened_out


def test_screened_out_is_exactly_not_beats():
    meds = (0.3, 0.396, 0.3999, 0.4, 0.404, 0.41, 0.5)
    noises = (None, 0.0, 0.005, 0.02, 0.08)
    for ms, n_new, n_inc in itertools.product(meds, noises, noises):
        new = TimingReport(measured=True, candidate_ms=ms, noise=n_new)
        inc = TimingReport(measured=True, candidate_ms=0.4, noise=n_inc)
        bar = {"incumbent_ms": 0.4, "noise": max(n_inc or 0.0, MIN_NOISE)}
        why = screened_out(new.model_dump(), bar)
        assert (why is None) == beats(new, inc), (ms, n_new, n_inc, why)
        if why is not None:
            assert why.startswith("not checked") and f"{ms:.4f} ms" in why


def test_a_refused_or_failed_timing_screens_nothing():
    bar = {"incumbent_ms": 0.4, "noise": 0.01}
    assert screened_out({"measured": False, "reason": "timing.speed_of_light: ..."}, bar) is None
    assert screened_out({"measured": True, "candidate_ms": None}, bar) is None
    assert screened_out({"measured": True, "candidate_ms": 0.0}, bar) is None
