"""The `egg` CLI on real subprocess tools (CPU, Triton interpreter) and the expert model."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def egg(*args: str, home: Path, timeout: int = 600) -> subprocess.CompletedProcess:
    env = {**os.environ, "EGG_HOME": str(home)}
    return subprocess.run(
        [sys.executable, "-m", "graph.cli", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_missing_task_is_bad_input_without_traceback(tmp_path):
    r = egg("optimize", str(tmp_path / "nope.py"), "--device", "cpu", home=tmp_path)
    assert r.returncode == 2
    assert "task file not found" in r.stderr and "Traceback" not in r.stderr + r.stdout


def test_task_without_model_is_bad_input(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("import torch\nN = 4\ndef get_inputs():\n    return [torch.randn(N)]\n")
    r = egg("optimize", str(bad), "--device", "cpu", "--out", str(tmp_path / "o"), home=tmp_path)
    assert r.returncode == 2, r.stdout + r.stderr
    assert "Model" in r.stderr and "Traceback" not in r.stderr + r.stdout


def test_bad_option_values_are_bad_input(tmp_path):
    r = egg(
        "optimize",
        str(ROOT / "examples" / "softmax.py"),
        "--device",
        "cpu",
        "--stages",
        "algorithm,bogus",
        home=tmp_path,
    )
    assert r.returncode == 2 and "unknown stage" in r.stderr
    r = egg("optimize", str(ROOT / "examples" / "softmax.py"), "--device", "tpu", home=tmp_path)
    assert r.returncode == 2
    for flag, value, msg in (
        ("--tune-width", "0", "tune_width must be >= 1"),
        ("--tune-budget", "-1", "tune_budget must be >= 0"),
    ):
        r = egg(
            "optimize", str(ROOT / "examples" / "softmax.py"), "--device", "cpu", flag, value, home=tmp_path
        )
        assert r.returncode == 2 and msg in r.stderr and "Traceback" not in r.stderr, r.stderr


@pytest.fixture(scope="module")
def cpu_run(tmp_path_factory):
    home = tmp_path_factory.mktemp("egg")
    out = home / "out"
    r = egg(
        "optimize",
        str(ROOT / "examples" / "softmax.py"),
        "--device",
        "cpu",
        "--seeds",
        "2",
        "--thread-id",
        "sm-cli",
        "--out",
        str(out),
        home=home,
    )
    return home, out, r


def test_optimize_cpu_end_to_end(cpu_run):
    home, out, r = cpu_run
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    report = json.loads((out / "report.json").read_text())
    assert report["verified"] is True and report["thread_id"] == "sm-cli"
    assert report["timing"] is None and "not measured" in report["timing_note"]
    assert report["speedup_vs_eager"] is None  # nothing is claimed without a GPU
    assert [s["stage"] for s in report["stages"]] == ["algorithm", "mapping", "tiling", "memory"]
    assert {"task", "device", "model", "usage", "speedup_vs_compile"} <= set(report)
    src = (out / "model_new.py").read_text()
    assert "@triton.jit" in src and "class ModelNew" in src


def test_threads_show_and_replay(cpu_run):
    home, out, r = cpu_run
    assert r.returncode == 0
    t = egg("threads", home=home)
    assert t.returncode == 0 and "sm-cli" in t.stdout
    s = egg("show", "sm-cli", home=home)
    assert s.returncode == 0 and "tiling" in s.stdout and "checkpoint id" in s.stdout
    rp = egg("replay", "sm-cli", "--out", str(home / "replay"), home=home)
    assert rp.returncode == 0, rp.stdout[-2000:] + rp.stderr[-2000:]
    first = json.loads((out / "report.json").read_text())
    again = json.loads((home / "replay" / "report.json").read_text())
    strip = lambda st: [{k: v for k, v in d.items()} for d in st]
    assert strip(again["stages"]) == strip(first["stages"])
    assert again["candidate_id"] == first["candidate_id"]
    missing = egg("show", "no-such-thread", home=home)
    assert missing.returncode == 2


def test_optimize_refuses_an_existing_thread_id(cpu_run):
    home, out, r = cpu_run
    assert r.returncode == 0
    again = egg(
        "optimize",
        str(ROOT / "examples" / "softmax.py"),
        "--device",
        "cpu",
        "--thread-id",
        "sm-cli",
        "--out",
        str(home / "again"),
        home=home,
    )
    assert again.returncode == 2 and "already exists" in again.stderr and "Traceback" not in again.stderr


def _descendants(pid: int) -> set[tuple[int, str]]:
    """(pid, start time) of every live process below `pid` (start time tells a reused pid apart)."""
    parent: dict[int, int] = {}
    start: dict[int, str] = {}
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            fields = (d / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        parent[int(d.name)], start[int(d.name)] = int(fields[1]), fields[19]
    found, frontier = set(), [pid]
    while frontier:
        p = frontier.pop()
        for child, ppid in parent.items():
            if ppid == p:
                found.add((child, start[child]))
                frontier.append(child)
    return found


def _alive(procs: set[tuple[int, str]]) -> set[tuple[int, str]]:
    left = set()
    for pid, st in procs:
        try:
            now = (Path(f"/proc/{pid}") / "stat").read_text().rsplit(")", 1)[1].split()[19]
        except OSError:
            continue
        if now == st:
            left.add((pid, st))
    return left


def _start_softmax(home: Path, thread: str, out: Path) -> tuple[subprocess.Popen, dict]:
    """`egg optimize examples/softmax.py` on CPU (2 seeds) with its progress lines on a pipe."""
    env = {**os.environ, "EGG_HOME": str(home), "PYTHONUNBUFFERED": "1"}
    cmd = [sys.executable, "-m", "graph.cli", "optimize", str(ROOT / "examples" / "softmax.py"), "--device", "cpu",
           "--seeds", "2", "--thread-id", thread, "--out", str(out)]  # fmt: skip
    proc = subprocess.Popen(
        cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
    )
    return proc, env


def test_killed_run_resumes_inside_its_tuning_stage(cpu_run):
    """SIGKILL `egg optimize` in the middle of a tuning stage, then `egg resume`: the run goes on
    from its last checkpoint inside that stage, writes to its own --out, and ends with the same
    decisions as the uninterrupted run (cpu_run: the same task and settings)."""
    import re
    import signal
    import time

    home, base_out, base = cpu_run
    assert base.returncode == 0
    out = home / "killed-out"
    proc, env = _start_softmax(home, "sm-kill", out)
    seen, killed_at, workers = [], None, set()
    try:
        for line in proc.stdout:
            seen.append(line.rstrip())
            if re.match(r"^(mapping|tiling|memory)/\S*compile: ok", line):
                time.sleep(0.3)  # into the check job that follows the compile
                workers = _descendants(proc.pid)
                killed_at = line.split(":")[0]
                proc.send_signal(signal.SIGKILL)
                break
    finally:
        proc.kill()
        proc.wait(timeout=60)
    assert killed_at, "the run never reached a tuning stage's compile:\n" + "\n".join(seen[-20:])
    stage = killed_at.split("/")[0]
    assert proc.returncode == -signal.SIGKILL

    listed = json.loads(egg("threads", "--json", home=home).stdout)
    row = next(r for r in listed if r["thread"] == "sm-kill")
    assert row["status"] == "interrupted" and row["next"] == [stage], row
    assert "status interrupted" in egg("show", "sm-kill", home=home).stdout

    r = subprocess.run(
        [sys.executable, "-m", "graph.cli", "resume", "sm-kill"], cwd=ROOT, env=env, capture_output=True,
        text=True, timeout=900,
    )  # fmt: skip
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    lines = r.stdout.splitlines()
    assert lines[0].startswith("resuming sm-kill from checkpoint") and f"(before {stage})" in lines[0]
    progress = [ln for ln in lines[1:] if re.match(r"^\w+/", ln)]
    # it went on inside the stage: nothing before it ran again, and the candidate written and
    # compiled before the kill was not written again
    assert progress and progress[0].startswith(f"{stage}/"), progress[:5]
    assert not [ln for ln in progress if ln.startswith(("algorithm/", "prepare"))]
    assert not progress[0].startswith(f"{stage}/seed/code"), progress[:3]
    report = json.loads((out / "report.json").read_text())  # the run's own --out
    first = json.loads((base_out / "report.json").read_text())
    assert report["verified"] and report["resumed_from"]
    assert report["stages"] == first["stages"] and report["candidate_id"] == first["candidate_id"]
    assert (out / "model_new.py").read_text() == (base_out / "model_new.py").read_text()
    done = json.loads(egg("threads", "--json", home=home).stdout)
    assert next(r for r in done if r["thread"] == "sm-kill")["status"] == "verified"
    # nothing of the killed run is left (its sandbox workers included)
    assert workers, "the kill did not land during a sandbox job"
    assert not _alive(workers), f"processes of the killed run still alive: {_alive(workers)}"
    again = egg("resume", "sm-kill", home=home)
    assert again.returncode == 2 and "nothing to resume" in again.stderr


def test_sigterm_wraps_up_with_the_best_verified_kernel(cpu_run):
    """SIGTERM (an eval's time box ending) inside a tuning stage: the run stops there and writes
    the kernel its algorithm stage verified, with a report that says the final benchmark did not
    run; it exits 0 within seconds, not after the stage. The same run killed before any stage
    ended would have no kernel (covered by the eval runner's tests with a fake optimize)."""
    import re
    import signal
    import time

    from graph.cli import WRAP_UP_HALT

    home, base_out, _ = cpu_run
    out = home / "wrapped-out"
    proc, _ = _start_softmax(home, "sm-term", out)
    seen, sent = [], None
    try:
        for line in proc.stdout:
            seen.append(line.rstrip())
            if re.match(r"^(mapping|tiling|memory)/\S*compile: ok", line):
                sent = time.monotonic()
                proc.send_signal(signal.SIGTERM)
                break
        rc = proc.wait(timeout=60)
    finally:
        proc.kill()
    assert sent, "the run never reached a tuning stage's compile:\n" + "\n".join(seen[-20:])
    assert rc == 0 and time.monotonic() - sent < 30
    report = json.loads((out / "report.json").read_text())
    assert report["verified"] and report["status"] == "verified"
    assert report["halt"] == WRAP_UP_HALT
    # the algorithm stage's decision is kept; the stage it was stopped in is not in the report
    assert [d["stage"] for d in report["stages"]][:1] == ["algorithm"]
    first = json.loads((base_out / "report.json").read_text())
    assert report["stages"][0] == first["stages"][0]
    assert (out / "model_new.py").read_text().count("@triton.jit") >= 1


BODY = (
    "import torch\n"
    "class Model(torch.nn.Module):\n"
    "    def forward(self, x):\n"
    "        return torch.relu(x)\n"
    "def get_init_inputs():\n"
    "    return []\n"
)
BAD_TASKS = {
    "syntax": b"import torch\nclass Model(torch.nn.Module:\n    pass\n",
    "not_utf8": b"# caf\xe9 \xff\n" + BODY.encode() + b"def get_inputs():\n    return [torch.randn(4)]\n",
    "nul_bytes": b"import torch\n\x00\n" + BODY.encode(),
    "inputs_none": BODY.encode() + b"def get_inputs():\n    return None\n",
    "exit_at_import": b"import sys\nsys.exit(0)\n" + BODY.encode() + b"def get_inputs():\n    return []\n",
}


def _bad_task(tmp_path: Path, kind: str) -> Path:
    path = tmp_path / f"{kind}.py"
    if kind != "missing":
        path.write_bytes(BAD_TASKS[kind])
    return path


@pytest.mark.parametrize("kind", [*BAD_TASKS, "missing"])
def test_every_malformed_task_is_one_line_and_exit_2(tmp_path, kind):
    task = _bad_task(tmp_path, kind)
    out = tmp_path / "out"
    r = egg("optimize", str(task), "--device", "cpu", "--out", str(out), home=tmp_path / "home", timeout=300)
    assert r.returncode == 2, (r.returncode, r.stdout[-2000:], r.stderr[-2000:])
    assert r.stdout == "" and len(r.stderr.strip().splitlines()) == 1, (r.stdout, r.stderr)
    assert r.stderr.startswith("error: ") and "Traceback" not in r.stderr
    report = json.loads((out / "report.json").read_text())  # an eval quotes it
    assert report["status"] == "bad_input" and report["failure"] in r.stderr
    if kind == "missing":
        return
    c = egg(
        "check",
        str(task),
        str(ROOT / "examples" / "softmax.py"),
        "--device",
        "cpu",
        home=tmp_path,
        timeout=300,
    )
    assert c.returncode == 2 and len(c.stderr.strip().splitlines()) == 1, (c.stdout, c.stderr)
    assert "Traceback" not in c.stdout + c.stderr
    # the same words as optimize: the task's fault, never a "tool failure"
    assert c.stderr.startswith("error: bad task: ") and report["failure"] in c.stderr, c.stderr


def test_eval_records_each_malformed_task_as_a_bad_input_row(tmp_path):
    suite = tmp_path / "suite"
    suite.mkdir()
    for kind in BAD_TASKS:
        _bad_task(suite, kind)
    r = egg("eval", str(suite), "--out", str(tmp_path / "ev"), "--device", "cpu", "--workers", "2", "--json",
            home=tmp_path / "home", timeout=600)  # fmt: skip
    assert r.returncode == 0, r.stderr[-3000:]
    summary = json.loads(r.stdout)  # --json: only the summary on stdout
    rows = {row["task"].split("__")[-1]: row for row in summary["rows"]}
    assert set(rows) == set(BAD_TASKS) and summary["verified"] == 0
    for kind, row in rows.items():
        assert row["failure_kind"] == "bad_input", (kind, row)
        assert row["failure"] and "\n" not in row["failure"] and "Traceback" not in row["failure"], row
    assert "syntax error" in rows["syntax"]["failure"] and "UTF-8" in rows["not_utf8"]["failure"]
    assert "NUL" in rows["nul_bytes"]["failure"]


CORPUS = ROOT / "tests" / "corpus" / "tasks"


@pytest.mark.parametrize(
    "args, msg",
    [
        (["--size", "NOPE=3"], "--size NOPE=3: 'NOPE' is not a module-level int constant of the task"),
        (["--size", "DIM=1.5"], "--size DIM=1.5: the value must be a positive integer, not '1.5'"),
        (["--size", "DIM=0"], "--size DIM=0: the value must be a positive integer, not 0"),
        (["--size", "DIM=-4"], "the value must be a positive integer, not -4"),
        (["--size", "DIM"], "--size must be NAME=VALUE"),
        (["--size", "=7"], "--size must be NAME=VALUE"),
        (["--shapes", "square"], "--shapes must be as-written or ragged, not 'square'"),
    ],
)
def test_bad_sizes_are_bad_input(tmp_path, args, msg):
    r = egg(
        "optimize",
        str(CORPUS / "relu.py"),
        "--device",
        "cpu",
        *args,
        "--out",
        str(tmp_path / "o"),
        home=tmp_path,
    )
    assert r.returncode == 2 and msg in r.stderr, r.stdout[-2000:] + r.stderr[-2000:]
    assert "Traceback" not in r.stderr + r.stdout and len(r.stderr.strip().splitlines()) == 1


def test_sizes_the_task_fails_at_are_bad_input_with_its_error(tmp_path):
    task = tmp_path / "mult4.py"
    task.write_text(
        "import torch\nN = 16\n\n\nclass Model(torch.nn.Module):\n    def forward(self, x):\n"
        "        assert x.shape[0] % 4 == 0, 'N must be a multiple of 4'\n        return x + 1\n\n\n"
        "def get_inputs():\n    return [torch.randn(N)]\n\n\ndef get_init_inputs():\n    return []\n"
    )
    r = egg(
        "optimize",
        str(task),
        "--device",
        "cpu",
        "--size",
        "N=13",
        "--out",
        str(tmp_path / "o"),
        home=tmp_path,
    )
    assert r.returncode == 2, r.stdout[-2000:] + r.stderr[-2000:]
    assert "N must be a multiple of 4" in r.stderr and "(with sizes N=13)" in r.stderr
    assert json.loads((tmp_path / "o" / "report.json").read_text())["status"] == "bad_input"


def test_optimize_at_the_users_sizes_cpu(tmp_path):
    out = tmp_path / "o"
    r = egg(
        "optimize", str(CORPUS / "relu.py"), "--device", "cpu", "--size", "DIM=100", "--size", "BATCH=7",
        "--stages", "algorithm", "--seeds", "1", "--out", str(out), home=tmp_path,
    )  # fmt: skip
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "sizes {'BATCH': 7, 'DIM': 100}" in r.stdout
    rep = json.loads((out / "report.json").read_text())
    assert rep["verified"] and rep["sizes_used"] == {"BATCH": 7, "DIM": 100}
    assert rep["size_overrides"] == {"BATCH": 7, "DIM": 100} and rep["shapes"] == "as-written"
    # every trial of the check ran at those sizes (and its second shape below them)
    trials = rep["check"]["shapes_checked"]
    assert [t["inputs"] for t in trials if t["trial"] != "second-shape"] == [[[7, 100]]] * 4
    assert [t["inputs"] for t in trials if t["trial"] == "second-shape"] == [[[7, 74]]]
