"""GPU-host checks (skipped without CUDA): the egg suite at full size, and a real `egg eval`.

Run on the H200 host:
  .venv/bin/pytest -q -m gpu tests/evals/test_gpu_eval.py -s
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from eval_helpers import SMOKE
from test_suites import EGG, load_task

torch = pytest.importorskip("torch")

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]


@pytest.mark.parametrize("path", EGG, ids=lambda p: p.stem)
def test_egg_task_full_size_on_gpu(path: Path) -> None:
    """Each task fits the GPU at full size and its eager reference runs in milliseconds."""
    torch.manual_seed(0)
    mod = load_task(path, shrink=False)
    with torch.device("cuda"):
        model = mod.Model(*mod.get_init_inputs())
        inputs = mod.get_inputs()
    try:
        with torch.no_grad():
            out = model(*inputs)  # warm-up (cuBLAS/cuDNN heuristics)
            torch.cuda.synchronize()
            reps = 5
            t0 = time.perf_counter()
            for _ in range(reps):
                out = model(*inputs)
            torch.cuda.synchronize()
        ms = (time.perf_counter() - t0) / reps * 1e3
        peak_gb = torch.cuda.max_memory_allocated() / 2**30
        print(f"\n{path.stem}: eager {ms:.3f} ms, peak {peak_gb:.1f} GiB")
        if out.is_floating_point():
            assert torch.isfinite(out).all()
        assert ms < 1000.0, f"{path.stem} eager takes {ms:.0f} ms"
    finally:
        del inputs, model
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()


@pytest.mark.slow
def test_real_eval_smoke_on_gpu(tmp_path: Path) -> None:
    """The real optimize over the smoke suite on CUDA: verified rows carry measured timing."""
    from evals.runner import eval_command

    out = tmp_path / "ev"
    assert eval_command([str(SMOKE)], out=str(out), device="cuda", task_timeout_s=1800) == 0
    rows = [json.loads(x) for x in (out / "results.jsonl").read_text().splitlines()]
    assert len(rows) == len(list(SMOKE.glob("*.py")))
    verified = [r for r in rows if r["verified"]]
    assert verified, [r["failure"] for r in rows]
    for r in verified:
        assert r["timing_measured"] and r["candidate_ms"] and r["eager_ms"], r
        assert r["speedup_vs_eager"] == pytest.approx(r["eager_ms"] / r["candidate_ms"], rel=1e-6)
        assert r["gpu"] and r["versions_source"] == "report"
        assert r["candidate_p20_ms"] <= r["candidate_ms"] <= r["candidate_p80_ms"], r
        # On a GPU the candidate jobs log their phases: the waits and the steps are visible.
        assert {"compile", "check", "startup"} <= set(r["phases"]), r["phases"]
        assert any(k.startswith("wait_") for k in r["phases"]), r["phases"]
    m = json.loads((out / "metrics.json").read_text())
    assert m["overall"]["speedup"]["vs_eager"]["n"] == len(verified)
    assert m["plots"]["speedup_per_task.png"] and m["plots"]["roofline.png"], m["plots_not_drawn"]
    assert m["measured_on"].startswith(verified[0]["gpu"])
