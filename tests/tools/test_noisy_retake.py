"""A kept timing that spreads over NOISY_TIMING is taken once more and the steadier stands
(tools/worker/timing.py `steadier`): host jitter, not the kernel, made the first one slow."""

from __future__ import annotations

from tools.worker.timing import NOISY_TIMING, _claim, steadier


def _reply(med: float, p20: float, p80: float) -> dict:
    return {"ok": True, "median": med, "p20": p20, "p80": p80}


def test_a_steadier_retake_replaces_a_jittery_timing_and_both_are_recorded():
    # the H100 case: median 0.166 ms over a p20 of 0.096 (62% spread); the retake is steady
    out = _claim(_reply(0.1657, 0.0962, 0.1983), 0.1657)
    assert out["noise"] > NOISY_TIMING
    med = steadier(out, _reply(0.0966, 0.0961, 0.0972), 0.1657)
    assert med == 0.0966 and out["candidate_ms"] == 0.0966 and out["noise"] < 0.02
    assert [r["candidate_ms"] for r in out["noisy_retake"]] == [0.1657, 0.0966]


def test_a_noisier_or_failed_retake_keeps_the_first():
    out = _claim(_reply(0.20, 0.18, 0.23), 0.20)
    assert steadier(out, _reply(0.15, 0.10, 0.25), 0.20) == 0.20  # faster but noisier: not taken
    assert out["candidate_ms"] == 0.20 and out["noisy_retake"][1]["candidate_ms"] == 0.15
    out = _claim(_reply(0.20, 0.18, 0.23), 0.20)
    assert steadier(out, {"ok": False, "error": "runner died"}, 0.20) == 0.20
    assert out["candidate_ms"] == 0.20 and "runner died" in out["noisy_retake"][1]["error"]
    out = _claim(_reply(0.20, 0.18, 0.23), 0.20)
    assert steadier(out, {"ok": True, "median": float("nan")}, 0.20) == 0.20
