"""The runner's confinement and channel, and the warm worker pool, tested on their own."""

from __future__ import annotations

import json
import os
import struct
import time
from pathlib import Path

import pytest

from tools.protocol import Job
from tools.sandbox import WorkerPool, run_job, sweep_stale_dirs
from tools.worker import channel, confine


def test_channel_round_trip_and_limits() -> None:
    r, w = os.pipe()
    channel.send(w, {"op": "call", "x": [1, 2]})
    assert channel.recv(r, 1.0) == {"op": "call", "x": [1, 2]}
    os.write(w, struct.pack("<Q", channel.MAX_MESSAGE + 1))
    with pytest.raises(channel.ChannelError, match="limit"):
        channel.recv(r, 1.0)
    with pytest.raises(channel.ChannelTimeout):
        channel.recv(r, 0.2)
    body = b"[1, 2]"
    os.write(w, struct.pack("<Q", len(body)) + body)
    with pytest.raises(channel.ChannelError, match="not an object"):
        channel.recv(r, 1.0)
    os.close(w)
    with pytest.raises(channel.ChannelClosed):
        channel.recv(r, 1.0)
    os.close(r)


def test_slab_carries_raw_tensor_bytes_and_checks_descriptors() -> None:
    torch = pytest.importorskip("torch")
    fd = channel.new_slab(1024)
    x = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    descs = channel.write_tensors(fd, [x, 7, torch.ones(1000, dtype=torch.float64)])
    assert descs[0]["written"] and descs[0]["shape"] == [3, 4]
    assert descs[1] == {"type": "builtins.int"}
    assert descs[2]["written"] is False  # did not fit: the judge rejects on the descriptor
    assert torch.equal(channel.read_tensor(fd, descs[0], "cpu"), x)
    forged = {**descs[0], "offset": 1020}
    with pytest.raises(channel.ChannelError):
        channel.read_tensor(fd, forged, "cpu")
    os.close(fd)


def test_readable_by_others(tmp_path: Path) -> None:
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    (private / "f").write_text("x")
    assert not confine.readable_by_others([str(private / "f")])
    assert confine.readable_by_others(["/usr/bin", "/etc/hostname"])


def test_kill_uid_refuses_shared_ids() -> None:
    with pytest.raises(ValueError):
        confine.kill_uid(0)


def _probe(what: str) -> dict:
    res = run_job(Job(kind="selftest", task_path="", task_source="", options={"what": what}), timeout_s=120)
    assert res.ok, (res.error, res.stderr_tail[-2000:])
    return res.payload


def test_runner_confinement_on_this_machine() -> None:
    """What a confined runner sees: its own processes only, no network, a read-only repository,
    no capabilities, an empty environment. Where the kernel forbids namespaces the report must
    say so instead of pretending."""
    p = _probe("confinement")
    applied = p["isolation"]
    assert "death signal" in applied["mechanisms"]
    if any(m.startswith("pid, network") for m in applied["mechanisms"]):
        assert p["visible_pids"] <= 3, p["visible_pids"]
        assert p["network"] == "unreachable"
        assert p["repo_writable"] is False
        assert p["cap_eff"] == "0000000000000000"
    else:
        assert any("namespaces" in m for m in applied["missing"])
    assert not {"OPENAI_API_KEY", "EGG_GPU_LOCK", "EGG_RESULT_NONCE"} & set(p["env_keys"])


def test_a_runtime_under_tmp_stays_visible_but_the_working_directory_does_not(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A checkout or virtual environment in /tmp (under the tmpfs every job gets) is bound back
    into the job read-only; the rest of the import path is not (it holds the job's directory)."""
    import sys

    repo, venv, job = tmp_path / "repo", tmp_path / "venv", tmp_path / "egg-job-1"
    site = venv / "lib" / "python3" / "site-packages"
    for d in (repo / "tools", site, job):
        d.mkdir(parents=True)
    monkeypatch.setattr(confine, "_REPO", str(repo))
    monkeypatch.setattr(sys, "prefix", str(venv))
    monkeypatch.setattr(sys, "path", [str(job), "", str(site), str(repo / "tools")])
    scratch = str(tmp_path.parent)
    kept = confine._runtime_dirs(scratch)
    assert str(repo) in kept and str(venv) in kept and str(site) not in kept  # nested in venv
    assert str(job) not in kept and os.getcwd() not in kept
    assert confine._runtime_dirs("/nonexistent-scratch") == []


def test_warm_pool_forks_jobs_and_kills_a_hung_one() -> None:
    pool = WorkerPool.for_device("cpu")
    t0 = time.monotonic()
    res = run_job(Job(kind="selftest", task_path="", task_source="", options={"what": "env"}), timeout_s=120)
    assert res.ok and time.monotonic() - t0 < 60
    assert WorkerPool.for_device("cpu") is pool and pool.alive()
    res = run_job(
        Job(kind="selftest", task_path="", task_source="", options={"what": "fault", "fault": "loop"}),
        timeout_s=3,
    )
    assert res.error_kind == "timeout"
    assert pool.alive()


def test_sweep_removes_directories_of_dead_owners(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import tools.sandbox as sandbox

    monkeypatch.setattr(sandbox.tempfile, "gettempdir", lambda: str(tmp_path))
    monkeypatch.setattr(sandbox, "_SWEPT", [False])
    dead = tmp_path / "egg-job-dead"
    dead.mkdir()
    (dead / "owner.pid").write_text(json.dumps(2**22 + 12345))  # no such process
    alive = tmp_path / "egg-job-alive"
    alive.mkdir()
    (alive / "owner.pid").write_text(str(os.getpid()))
    assert sweep_stale_dirs() == 1
    assert not dead.exists() and alive.exists()
