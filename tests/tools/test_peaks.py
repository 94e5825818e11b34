"""Peak numbers: a GPU missing from the table is "peak unknown", never another GPU's numbers."""

from __future__ import annotations

import pytest

from graph.records import Environment, TaskDescription, TensorInfo, TimingReport
from tools.toolbox import peaks_for, profile_report


def _profile(gpu: str | None, ms: float = 1.0):
    desc = TaskDescription(
        name="t", source="", inputs=[], outputs=[TensorInfo(shape=[1024, 1024], dtype="float32")],
        flops=2e9, bytes_moved=8e9,
    )  # fmt: skip
    timing = TimingReport(measured=True, candidate_ms=ms, eager_ms=2.0, env=Environment(gpu=gpu))
    return profile_report(desc, timing, None)


def test_known_gpus_are_matched_by_name() -> None:
    assert peaks_for("NVIDIA H200")["gbps"] == 4300.0
    assert peaks_for("NVIDIA H100 80GB HBM3")["gbps"] == 3000.0


@pytest.mark.parametrize("gpu", ["NVIDIA GeForce RTX 4090", "NVIDIA B200", None])
def test_unknown_gpu_has_no_peaks_and_no_roofline(gpu: str | None) -> None:
    assert peaks_for(gpu) is None
    p = _profile(gpu)
    assert p.roofline_fraction is None and p.bottleneck == "unknown"
    assert p.achieved_gbps is None  # nothing downstream divides it by a made-up peak
    assert any(f"peak unknown for GPU {gpu!r}" in e for e in p.evidence)
    assert any("8000 GB/s" in e for e in p.evidence)  # the measured rate is still reported


def test_known_gpu_gets_its_roofline() -> None:
    p = _profile("NVIDIA H200", ms=4.0)
    # 8 GB at 4300 GB/s take 1.86 ms at best; the kernel took 4 ms.
    assert p.bottleneck == "memory" and p.roofline_fraction == pytest.approx(8e9 / 4300e9 / 4e-3)
