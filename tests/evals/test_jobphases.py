"""evals.h200.jobphases: per-job medians and sums of the tool.evaluate lines of runs, side by side."""

import json

from evals.h200 import jobphases


def _run(tmp_path, name, walls, row_wall):
    d = tmp_path / name
    (d / "tasks" / "t1").mkdir(parents=True)
    lines = [
        f"12:00:0{i} [info   ] tool.evaluate task=t1 wall_s={w} lock_waits={w / 2} check=1.5"
        for i, w in enumerate(walls)
    ]
    tail = ["12:00:40 [info   ] stage.decision stage=memory", "12:01:05 [info   ] finalize status=verified"]
    (d / "tasks" / "t1" / "optimize.log").write_text(
        "\n".join(["12:00:00 [info   ] prepare task=t1", *lines, *tail]) + "\n"
    )
    row = {
        "name": "t1",
        "wall_s": row_wall,
        "stages": [{"attempts": 2}, {"attempts": 3}],
        "speedup_vs_eager": 1.5,
    }
    (d / "results.jsonl").write_text(json.dumps(row) + "\n")
    return d


def test_medians_sums_and_shared_tasks(tmp_path, capsys):
    a = _run(tmp_path, "a", [10.0, 30.0, 20.0], 100.0)
    b = _run(tmp_path, "b", [4.0, 6.0], 50.0)
    assert [j["wall_s"] for j in jobphases.jobs(a)] == [10.0, 30.0, 20.0]
    assert jobphases.main([str(a), str(b)]) == 0
    out = capsys.readouterr().out
    wall = next(line for line in out.splitlines() if line.startswith("wall_s"))
    assert wall.split()[1:] == ["20.00", "60", "5.00", "10"]
    lock = next(line for line in out.splitlines() if line.startswith("lock_waits"))
    assert lock.split()[1:] == ["10.00", "30", "2.50", "5"]
    assert "tasks in every run: 1" in out and "[2, 3]" in out
    assert f"median wall of these tasks in {b}: 50.0 s" in out
    # the final benchmark: from the last stage decision (12:00:40) to finalize (12:01:05)
    assert jobphases.final_seconds(a) == {"t1": 25}
    assert f"final benchmark after the last stage, {a}: median 25 s, sum 25 s over 1 tasks" in out


def test_no_runs_prints_usage():
    assert jobphases.main([]) == 2


def test_memory_per_task(tmp_path, capsys):
    d = tmp_path / "m"
    (d / "tasks" / "big").mkdir(parents=True)
    (d / "tasks" / "big" / "optimize.log").write_text(
        "12:00:01 [info   ] tool.evaluate task=big wall_s=50 wait_memory=40 memory_units=25 peak_gib=48.1 "
        "judge_peak_gib=24.0 runner_peak_gib=24.1\n"
        "12:00:02 [info   ] tool.evaluate task=big wall_s=20 wait_memory=10 memory_units=33 peak_gib=32.0 "
        "judge_peak_gib=24.0 runner_peak_gib=8.0\n"
        "12:00:03 [info   ] tool.evaluate task=big wall_s=20 wait_memory=20 memory_units=33\n"
    )
    m = jobphases.memory_by_task(d)["big"]
    assert (m["jobs"], m["wait_memory"], m["units_median"], m["units_max"]) == (3, 20.0, 33.0, 33.0)
    assert (m["peak_gib"], m["judge_peak_gib"], m["runner_peak_gib"]) == (48.1, 24.0, 24.1)
    assert jobphases.main([str(d)]) == 0
    out = capsys.readouterr().out
    assert "shares 33.0/33  peak 48.1 (judge 24.0 + runner 24.1)" in out


def test_a_window_picks_one_calls_jobs(tmp_path, capsys):
    a = _run(tmp_path, "a", [10.0, 30.0, 20.0], 100.0)  # jobs at 12:00:00, 12:00:01, 12:00:02
    assert jobphases.split_window(f"{a}@12:00:01-12:00:02") == (a, ("12:00:01", "12:00:02"))
    assert jobphases.split_window(str(a)) == (a, None)
    assert [j["wall_s"] for j in jobphases.jobs(a, ("12:00:01", "12:00:02"))] == [30.0, 20.0]
    assert jobphases.main([f"{a}@12:00:01-12:00:01"]) == 0
    assert f"jobs: {a}: 1" in capsys.readouterr().out
