"""The `evaluate` job (compile -> check -> time in one process) and the GPU file lock."""

import fcntl
import os
import threading
import time
from pathlib import Path

from graph.records import TaskSpec
from tools.protocol import Job
from tools.sandbox import run_job, sandbox_env
from tools.worker.gpulock import LOCK_ENV, gpu_lock

CORPUS = Path(__file__).resolve().parents[1] / "corpus"


def _job(task: str, cand: str) -> Job:
    p = CORPUS / "tasks" / f"{task}.py"
    return Job(
        kind="evaluate",
        task_path=str(p),
        task_source=p.read_text(),
        device="cpu",
        candidate_source=(CORPUS / cand).read_text(),
        size_overrides={},
    )


def test_evaluate_runs_compile_then_check_in_one_process():
    res = run_job(_job("relu", "good/relu_good.py"), timeout_s=240)
    assert res.ok, res.error
    assert res.payload["compile"]["ok"] is True
    assert res.payload["check"]["accepted"] is True
    assert "time" not in res.payload  # nothing is timed on CPU


def test_evaluate_stops_at_the_first_failure():
    res = run_job(_job("relu", "cheats/returns_torch.py"), timeout_s=240)
    assert res.ok
    c = res.payload["compile"]
    if c["ok"]:
        assert res.payload["check"]["accepted"] is False
    else:
        assert "check" not in res.payload


def test_sandbox_names_a_per_gpu_lock_only_for_gpu_jobs(tmp_path):
    assert LOCK_ENV not in sandbox_env(str(tmp_path), "cpu")
    env = sandbox_env(str(tmp_path), "cuda")
    assert env[LOCK_ENV].endswith(".lock")


def test_gpu_lock_excludes_shared_holders_while_exclusive(tmp_path, monkeypatch):
    path = tmp_path / "gpu.lock"
    monkeypatch.setenv(LOCK_ENV, str(path))
    events: list[str] = []
    with gpu_lock(exclusive=False):

        def timer():
            with gpu_lock(exclusive=True):
                events.append("timing")

        t = threading.Thread(target=timer)
        t.start()
        time.sleep(0.3)
        events.append("check done")
    t.join(5)
    assert events == ["check done", "timing"]
    fd = os.open(path, os.O_RDWR)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # released afterwards
    os.close(fd)


def test_toolbox_compile_on_cpu_does_not_prefetch():
    from tools.toolbox import Toolbox

    tb = Toolbox()
    p = CORPUS / "tasks" / "relu.py"
    task = TaskSpec(path=str(p), name="relu", source=p.read_text(), device="cpu")
    assert tb.compile(task, (CORPUS / "good" / "relu_good.py").read_text()).ok
    assert not tb._pending
