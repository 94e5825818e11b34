"""evals.report, evals.phases and level inference on hand-made rows and logs (no optimize runs)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from eval_helpers import REPO

from evals.phases import job_phases, task_phases
from evals.report import _spread, run_caption, write_report
from evals.tasks import discover, task_level

H200 = {"torch": "2.11.0+cu130", "triton": "3.6.0", "cuda": "13.0"}
PNG = b"\x89PNG\r\n\x1a\n"


def gpu_row(
    task: str, level: str, se: float, sc: float, gpu: str = "NVIDIA H200", **kw: Any
) -> dict[str, Any]:
    cand = 1.0
    r = {
        "task": f"{level}__{task}", "name": task, "level": level, "family": "f", "kind": "single-op",
        "verified": True, "device": "cuda", "gpu": gpu, "dtype": "float32", "versions": H200,
        "candidate_ms": cand, "eager_ms": se * cand, "compile_ms": sc * cand,
        "candidate_p20_ms": 0.95, "candidate_p80_ms": 1.1, "speedup_vs_eager": se,
        "speedup_vs_compile": sc, "speedup_vs_best": min(se, sc), "roofline_fraction": 0.6,
        "bottleneck": "memory", "wall_s": 30.0,
        "stages": [{"stage": "algorithm", "outcome": "improved", "speedup_exit": se}],
    }  # fmt: skip
    r.update(kw)
    return r


def cpu_row(task: str, verified: bool) -> dict[str, Any]:
    return {"task": task, "name": task, "level": "smoke", "family": "f", "kind": "single-op",
            "verified": verified, "device": "cpu", "gpu": None, "dtype": "float32",
            "versions": {"torch": "2.13.0", "triton": "3.6.0"}, "wall_s": 60.0,
            "phases": {"model": 0.5, "tools": 50.0}, "phases_source": "usage+log"}  # fmt: skip


def test_gpu_report_draws_every_plot_with_the_run_in_the_titles(tmp_path: Path) -> None:
    rows = [
        gpu_row("a", "level1", 2.0, 1.2),
        gpu_row(
            "b",
            "level1",
            0.8,
            0.5,
            compile_within_bar=False,
            compile_check_note="mismatch: trial torch.compile",
        ),
        gpu_row("c", "level2", 3.0, 1.5),
        {**gpu_row("d", "level2", 1.0, 1.0), "verified": False, "speedup_vs_eager": None},
    ]
    write_report(tmp_path, rows)
    m = json.loads((tmp_path / "metrics.json").read_text())
    assert m["plots_not_drawn"] == {}
    for name in (
        "speedup_per_task.png",
        "fast_p.png",
        "roofline.png",
        "per_family.png",
        "stage_waterfall.png",
    ):
        assert (tmp_path / name).read_bytes()[:8] == PNG
    assert m["measured_on"] == (
        "NVIDIA H200 | float32 | torch 2.11.0+cu130 | triton 3.6.0 | CUDA 13.0 | shapes as-written"
    )
    lv1, lv2 = m["per_level"]["level1"], m["per_level"]["level2"]
    assert lv1["speedup"]["vs_eager"]["geomean"] == pytest.approx((2.0 * 0.8) ** 0.5)
    assert lv1["speedup"]["vs_compile"]["geomean"] == pytest.approx((1.2 * 0.5) ** 0.5)
    assert lv2["verified"]["pct"] == 50.0 and lv2["fast_p"]["vs_eager"]["0.0"] == 0.5
    md = (tmp_path / "report.md").read_text()
    assert "- measured on: NVIDIA H200 | float32" in md
    # the last speedup column: against the faster of the two baselines (here compile's 1.5x)
    assert "| level2 | 2 | 1 (50%) | 50.0% | 3.00x | 3.00x | 1.50x | 50.0% | 1.50x | 30 |" in md
    # the one task whose torch.compile output missed the bar is named, with the ratio against it
    assert m["compile_outside_bar"] == [
        {"task": "level1__b", "speedup_vs_compile": 0.5, "reason": "mismatch: trial torch.compile"}
    ]
    assert "## torch.compile outside the checker's bar" in md
    assert "- level1__b: ours 0.50x of it: mismatch: trial torch.compile" in md
    # Error bars: the speedup at the kernel's p80 and p20 times.
    assert _spread(rows[0], rows[0]["eager_ms"]) == pytest.approx((2.0 / 1.1, 2.0 / 0.95))
    assert _spread({"candidate_p20_ms": None, "candidate_p80_ms": 1.0}, 2.0) is None


def test_cpu_report_gives_fast_0_and_says_why_plots_are_missing(tmp_path: Path) -> None:
    # A stale plot of an earlier run in this directory must not survive as if it were this run's.
    (tmp_path / "speedup_per_task.png").write_bytes(PNG)
    rows = [cpu_row("a", True), cpu_row("b", True), cpu_row("c", False)]
    write_report(tmp_path, rows)
    m = json.loads((tmp_path / "metrics.json").read_text())
    assert m["overall"]["fast_p"]["vs_eager"]["0.0"] == pytest.approx(2 / 3)
    assert m["overall"]["fast_p"]["vs_compile"]["0.0"] == pytest.approx(2 / 3)
    assert m["overall"]["fast_p"]["vs_eager"]["1.0"] is None
    assert not (tmp_path / "speedup_per_task.png").exists()
    assert set(m["plots_not_drawn"]) == {
        "speedup_per_task.png", "fast_p.png", "roofline.png", "per_family.png", "stage_waterfall.png",
    }  # fmt: skip
    md = (tmp_path / "report.md").read_text()
    assert "| vs_eager | 66.7% | not measured |" in md
    assert "- measured on: CPU (Triton interpreter; no GPU timing) | float32 | torch 2.13.0" in md
    assert "- fast_p.png: not drawn (no verified task was timed (fast_0" in md
    assert "| tools | 150.0 | 50.0 | 3 |" in md and "Source: usage+log" in md
    # what the expert covers, per level: c failed without a reason, listed
    assert "| smoke | 3 | 2 (67%) | 0 (0%) | 0 (0%) | 1 (33%) |" in md and "- c: " in md


def test_unknown_gpu_gets_no_roofline_instead_of_another_gpus_peaks(tmp_path: Path) -> None:
    rows = [gpu_row("a", "level1", 2.0, 1.0, gpu="NVIDIA Z900"), gpu_row("b", "level1", 1.5, 1.0)]
    write_report(tmp_path, rows)
    m = json.loads((tmp_path / "metrics.json").read_text())
    assert m["plots"]["roofline.png"] == "roofline.png"  # drawn for the H200 row only
    assert m["measured_on"].startswith("NVIDIA Z900 / NVIDIA H200 |")
    write_report(tmp_path, rows[:1])
    m = json.loads((tmp_path / "metrics.json").read_text())
    assert "peak unknown for NVIDIA Z900" in m["plots_not_drawn"]["roofline.png"]
    assert not (tmp_path / "roofline.png").exists()


def test_caption_says_what_was_not_recorded() -> None:
    assert run_caption([{"device": "cuda"}]) == "GPU not recorded | dtype not recorded | shapes as-written"


def test_phases_from_the_report_win_over_the_logs() -> None:
    rep = {"phases": {"describe": 1.25, "check": "2", "bad": None}, "usage": {}}
    assert task_phases(rep, "") == ({"describe": 1.25, "check": 2.0}, "report")


def test_phases_from_usage_and_evaluate_lines() -> None:
    log = (
        "12:00:01 [info     ] prepare   device=cuda ops=3 task=t\n"
        "12:00:09 [info     ] tool.evaluate   check=2.5 check.trials=2.0 check.judge.reference=1.0 "
        "check.judge.reference.first=0.9 check.runner.build=0.25 check.runner.call=0.5 "
        "check.runner.record=9.0 check.judge.reference=0.25 compile.compile_specs=0.5 "
        "compile=1.0 cuda_init=0.5 "
        "imports=3.0 memory_units=4 peak_gib=1.5 startup_and_exit=0.5 task=t wait_exclusive=1.0 "
        "wait_memory=4.0 wall_s=12.5\n"
        "12:00:20 [info     ] tool.evaluate   compile=2.0 imports=3.0 load=0.5 compile.precompile=0.1 "
        "compile.precompile_runner=4.9 task=t wall_s=5.0\n"
    )
    assert job_phases(log) == {
        "check": 2.5,
        "check.reference": 1.25,
        "check.candidate": 0.75,
        "compile.sm90": 0.5,
        "compile.precompile": 0.1,
        "compile.precompile_runner": 4.9,  # the runner's, mostly while the judge waited
        "compile": 3.5,  # the candidate's import (load, sent ahead) is the compile step's
        "startup": 7.0,
        "wait_memory": 4.0,
        "wait_timing": 1.0,
    }
    rep = {"usage": {"by_stage_role": {
        "algorithm/code": {"seconds": 4.0}, "algorithm/tools": {"seconds": 20.0},
        "tiling/profiler": {"seconds": 1.0}, "tiling/tools": {"seconds": 10.0}}}}  # fmt: skip
    phases, source = task_phases(rep, log)
    assert source == "usage+log"
    assert phases == {
        "model": 5.0,
        "tools": 30.0,
        "check": 2.5,
        "check.reference": 1.25,
        "check.candidate": 0.75,
        "compile.sm90": 0.5,
        "compile.precompile": 0.1,
        "compile.precompile_runner": 4.9,  # the runner's, mostly while the judge waited
        "compile": 3.5,  # the candidate's import (load, sent ahead) is the compile step's
        "startup": 7.0,
        "wait_memory": 4.0,
        "wait_timing": 1.0,
    }
    assert task_phases(None, "") == ({}, None)


def test_level_from_header_kernelbench_directory_or_suite(tmp_path: Path) -> None:
    body = "import torch\nclass Model(torch.nn.Module):\n    pass\n"
    assert task_level(tmp_path / "level_2" / "x.py", body) == "level2"
    assert task_level(tmp_path / "KernelBench" / "level3" / "x.py", body) == "level3"
    assert task_level(tmp_path / "mine" / "x.py", "# level: 1\n" + body) == "level1"
    assert task_level(tmp_path / "mine" / "x.py", "# level: hard\n" + body) == "hard"
    assert task_level(tmp_path / "egg" / "x.py", body) == "egg"
    # A header below the first code line is not a header.
    assert task_level(tmp_path / "egg" / "x.py", body + "# level: 9\n") == "egg"
    d = tmp_path / "level_1"
    d.mkdir()
    (d / "1_matmul.py").write_text(body)
    (t,) = discover([str(d)])
    assert (t.id, t.level) == ("level_1__1_matmul", "level1")  # ids keep the directory as written


_LINK_RE = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")


def test_results_pages_contain_every_file_they_link() -> None:
    pages = sorted((REPO / "docs" / "results").rglob("*.md"))
    assert pages
    dead = []
    for page in pages:
        for target in _LINK_RE.findall(page.read_text()):
            if "://" in target or target.startswith("#"):
                continue
            if not (page.parent / target.split("#")[0]).exists():
                dead.append(f"{page.relative_to(REPO)} -> {target}")
    assert not dead, dead


def test_header_states_the_shapes_and_the_tasks_that_fell_back(tmp_path: Path) -> None:
    rows = [
        {"task": "l__a", "device": "cpu", "verified": True, "shapes": "ragged", "shapes_used": "ragged"},
        {"task": "l__b", "device": "cpu", "verified": True, "shapes": "ragged", "shapes_used": "as-written",
         "shapes_note": "ragged: the task runs with none of the 3 ragged size set(s); it ran as written"},
    ]  # fmt: skip
    write_report(tmp_path, rows)
    md = (tmp_path / "report.md").read_text()
    line = next(ln for ln in md.splitlines() if ln.startswith("- shapes:"))
    assert line.startswith("- shapes: ragged (int size constants >= 8") and line.endswith("not ragged: l__b")
    assert run_caption(rows).endswith("| shapes ragged")
