"""Fault containment: the sandbox turns every way a worker can die into a clear JobResult."""

from __future__ import annotations

import os
import stat
import time
from pathlib import Path

import pytest

from graph.records import TaskSpec
from tools.protocol import Job
from tools.sandbox import run_job, sandbox_env
from tools.toolbox import Toolbox

CORPUS = Path(__file__).resolve().parents[1] / "corpus"


def fault(kind: str) -> Job:
    return Job(kind="selftest", task_path="", task_source="", options={"what": "fault", "fault": kind})


def test_infinite_loop_times_out_and_is_killed() -> None:
    t0 = time.monotonic()
    res = run_job(fault("loop"), timeout_s=4)
    assert not res.ok and res.error_kind == "timeout"
    assert "exceeded 4s" in res.error
    assert time.monotonic() - t0 < 15


def test_segfault_is_a_crash() -> None:
    res = run_job(fault("segfault"), timeout_s=60)
    assert not res.ok and res.error_kind == "crash"
    assert "SIGSEGV" in res.error


def test_os_exit_without_result_is_a_crash() -> None:
    res = run_job(fault("exit"), timeout_s=60)
    assert not res.ok and res.error_kind == "crash" and res.exit_code == 3
    assert "without a result" in res.error


def test_huge_stdout_is_bounded_and_job_still_succeeds() -> None:
    res = run_job(fault("stdout"), timeout_s=120)
    assert res.ok, res.error
    assert len(res.stdout_tail) < 20_000
    assert "bytes dropped" in res.stdout_tail


def test_worker_sees_no_secrets(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-fake-secret")
    monkeypatch.setenv("GITHUB_TOKEN", "ghp-fake")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "fake")
    res = run_job(Job(kind="selftest", task_path="", task_source="", options={"what": "env"}), timeout_s=120)
    assert res.ok, res.error
    keys = set(res.payload["env_keys"])
    assert not {"OPENAI_API_KEY", "GITHUB_TOKEN", "AWS_SECRET_ACCESS_KEY", "EGG_RESULT_NONCE"} & keys
    assert "TRITON_INTERPRET" in keys and "PYTHONPATH" in keys


def test_env_allowlist_sets_home_and_interpreter(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SOME_TOKEN", "x")
    env = sandbox_env(str(tmp_path), "cpu")
    assert env["HOME"] == str(tmp_path) and env["TRITON_INTERPRET"] == "1"
    assert "SOME_TOKEN" not in env
    assert "TRITON_INTERPRET" not in sandbox_env(str(tmp_path), "cuda")


def test_forged_result_without_nonce_is_refused(tmp_path: Path) -> None:
    # A fake "python" that writes a plausible success result without knowing the nonce.
    fake = tmp_path / "fakepy"
    fake.write_text(
        '#!/bin/sh\necho \'{"nonce": "guess", "result": {"kind": "check", "ok": true, '
        '"payload": {"accepted": true}}}\' > "$4"\n'
    )
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    res = run_job(Job(kind="check", task_path="", task_source=""), timeout_s=30, python=str(fake))
    assert not res.ok and res.error_kind == "no_result" and "nonce" in res.error


def test_candidate_infinite_loop_is_a_rejection_not_an_exception() -> None:
    tp = CORPUS / "tasks" / "relu.py"
    task = TaskSpec(path=str(tp), name="relu", source=tp.read_text())
    r = Toolbox(timeout_s=10).check(task, (CORPUS / "broken" / "infinite_loop.py").read_text())
    assert not r.accepted and r.reasons[0].startswith("sandbox.timeout:")


def test_no_stray_processes_after_timeout() -> None:
    res = run_job(fault("loop"), timeout_s=3)
    assert res.error_kind == "timeout"
    # The job's process is gone: no python child of ours (or of our warm server) still runs a
    # job. The warm server itself stays, by design, until this process ends.
    me = os.getpid()
    procs = {}
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            st = (d / "stat").read_text().split()
            cmd = (d / "cmdline").read_bytes()
        except OSError:
            continue
        procs[int(d.name)] = (int(st[3]), cmd, st[2])
    servers = {pid for pid, (ppid, cmd, _) in procs.items() if ppid == me and b"tools.worker.server" in cmd}
    for pid, (ppid, cmd, state) in procs.items():
        if state == "Z" or pid in servers:
            continue
        if (ppid == me and b"tools.worker" in cmd) or ppid in servers:
            raise AssertionError(f"worker process {pid} still alive")
