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


def _t(ms: float, noise: float) -> dict:
    return {"measured": True, "candidate_ms": ms, "noise": noise}


def test_only_a_noisy_timing_that_could_win_is_taken_again():
    from tools.worker.evaluate import noisy_screen

    bar = {"incumbent_ms": 2.3587, "noise": 0.01}
    # the H200 case: 2.084 ms at a 27.4% spread was screened out by its own spread
    assert screened_out(_t(2.0842, 0.274), bar) is not None
    assert noisy_screen(_t(2.0842, 0.274), bar)
    assert not noisy_screen(_t(2.0842, 0.02), bar)  # a steady timing that wins is a contender
    assert not noisy_screen(_t(2.7286, 0.01), bar)  # steady and slower: screened out as is
    assert not noisy_screen(_t(5.0, 0.30), bar)  # slower even at the low end of its spread
    assert not noisy_screen(_t(2.40, 0.04), bar)  # spread under NOISY_SCREEN
    assert not noisy_screen(_t(2.40, 0.08), {"incumbent_ms": 2.3587, "noise": 0.09})  # as noisy as the bar
    assert not noisy_screen({"measured": False, "reason": "x"}, bar)


def test_a_noisy_screening_timing_is_retaken_and_the_steadier_decides(monkeypatch):
    from tools.worker import evaluate

    bar = {"incumbent_ms": 2.3587, "noise": 0.01}
    calls = []

    def fake_timed(job, runner, lap, sub, out):
        t = [_t(2.0842, 0.274), _t(2.0901, 0.008)][len(calls)]
        calls.append(t)
        out["time"] = t
        return t

    monkeypatch.setattr(evaluate, "_timed", fake_timed)
    out: dict = {}
    got = evaluate._screening_time(None, None, None, None, out, bar)
    assert len(calls) == 2 and got == _t(2.0901, 0.008) and out["time"] is got
    assert [r["noise"] for r in out["screen_retimed"]] == [0.274, 0.008]
    assert screened_out(got, bar) is None  # now a contender: it will be checked

    # a steady first timing is never taken twice, whatever it says
    calls.clear()
    out = {}
    monkeypatch.setattr(evaluate, "_timed", lambda *a: calls.append(1) or _t(2.7286, 0.01))
    assert evaluate._screening_time(None, None, None, None, out, bar)["candidate_ms"] == 2.7286
    assert len(calls) == 1 and "screen_retimed" not in out


def test_a_failed_retake_never_replaces_a_measured_first_timing(monkeypatch):
    from tools.worker import evaluate

    bar = {"incumbent_ms": 2.3587, "noise": 0.01}
    seq = [_t(2.0842, 0.274), {"measured": False, "reason": "timing.error: x"}]
    monkeypatch.setattr(evaluate, "_timed", lambda *a: seq.pop(0))
    got = evaluate._screening_time(None, None, None, None, {}, bar)
    assert got["candidate_ms"] == 2.0842
