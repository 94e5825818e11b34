"""The adversarial corpus: hostile candidates that attack the verdict, the machine and the secrets.

Each file in tests/corpus/hostile names the static rule that rejects it (`# expect:`), and what
happens when the static rules are switched off so that it really runs (`# runtime:`): the rule
the judge rejects it for, `any` rejection, or `contained` (the attack ran and changed nothing,
so the verdict stands on the candidate's real outputs). With the rules off, every attack runs
in the confined runner, and the tests assert what the run left behind: no accepted forgery, no
secret in anything the run returned or wrote, no process still alive, no connection made, no
file of the repository changed, and a bounded time per candidate."""

from __future__ import annotations

import hashlib
import os
import re
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tools.protocol import Job, JobResult
from tools.sandbox import run_job
from tools.worker.static_rules import static_findings

CORPUS = Path(__file__).resolve().parents[1] / "corpus"
HOSTILE = sorted((CORPUS / "hostile").glob("*.py"))
CHEATS = sorted((CORPUS / "cheats").glob("*.py"))
REPO = Path(__file__).resolve().parents[2]
CANARY = "sk-egg-canary-7f3a9c1e55d04b2b"
MARKER = "egg-hostile-sleeper"
RUNNER_TIMEOUT_S = 30
BOUND_S = 90


def header(path: Path, key: str) -> str:
    m = re.search(rf"^# {key}: (.+)$", path.read_text(), re.MULTILINE)
    assert m, f"{path.name} has no `# {key}:` line"
    return m.group(1).strip()


def repo_digest() -> str:
    h = hashlib.sha256()
    for p in sorted((REPO / "tools").rglob("*.py")):
        h.update(p.read_bytes())
    return h.hexdigest()


class Listener:
    """A TCP listener on the loopback that records every connection a candidate makes."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.connections = 0
        self.stop = False
        self.t = threading.Thread(target=self._run, daemon=True)
        self.t.start()

    def _run(self) -> None:
        while not self.stop:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            self.connections += 1
            conn.close()

    def close(self) -> None:
        self.stop = True
        self.t.join(2)
        self.sock.close()


def live_marked_processes() -> list[str]:
    found = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            cmd = (d / "cmdline").read_bytes()
            state = (d / "stat").read_text().split()[2]
        except OSError:
            continue
        if MARKER.encode() in cmd and state != "Z":
            found.append(f"{d.name}: {cmd[:120]!r}")
    return found


def run_corpus(device: str, egg_home: Path, workers: int) -> dict:
    """Every hostile candidate checked once on `device` with the static rules off."""
    old_key = os.environ.get("OPENAI_API_KEY")
    os.environ["OPENAI_API_KEY"] = CANARY  # the agent process holds a key, as with an LLM
    listener = Listener()
    before = repo_digest()
    host_tmp_before = set(os.listdir("/tmp"))
    task = CORPUS / "tasks" / "relu.py"

    def one(path: Path) -> tuple[str, JobResult, float]:
        job = Job(
            kind="check",
            task_path=str(task),
            task_source=task.read_text(),
            device=device,
            candidate_source=path.read_text().replace("EGG_TEST_PORT", str(listener.port)),
            options={"static_rules": False, "runner_timeout_s": RUNNER_TIMEOUT_S, "egg_home": str(egg_home)},
        )
        t0 = time.monotonic()
        res = run_job(job, timeout_s=BOUND_S + 60)
        return path.name, res, time.monotonic() - t0

    try:
        with ThreadPoolExecutor(workers) as ex:
            results = {name: (res, s) for name, res, s in ex.map(one, HOSTILE)}
        time.sleep(1.0)
        leftovers = live_marked_processes()
    finally:
        listener.close()
        if old_key is None:
            os.environ.pop("OPENAI_API_KEY", None)
        else:
            os.environ["OPENAI_API_KEY"] = old_key
    table = os.environ.get("EGG_HOSTILE_TABLE")
    if table:
        write_table(Path(table), device, results)
    return {
        "results": results,
        "leftovers": leftovers,
        "connections": listener.connections,
        "repo_changed": repo_digest() != before,
        "new_tmp": sorted(set(os.listdir("/tmp")) - host_tmp_before),
        "egg_home": egg_home,
    }


def write_table(path: Path, device: str, results: dict) -> None:
    """The closing note's table: each attack, what the judge said, and the seconds it cost."""
    lines = [f"| attack ({device}) | verdict | first reason | seconds |", "|---|---|---|---|"]
    for p in HOSTILE:
        res, seconds = results[p.name]
        reasons = res.payload.get("reasons") or [res.error or ""]
        verdict = "accepted" if res.payload.get("accepted") else "rejected"
        first = str(reasons[0]).replace("|", "/")[:110] if reasons else ""
        lines.append(f"| {p.stem}: {header(p, 'attack')} | {verdict} | {first} | {seconds:.1f} |")
    path.write_text("\n".join(lines) + "\n")


@pytest.fixture(scope="module")
def runtime(tmp_path_factory: pytest.TempPathFactory) -> dict:
    return run_corpus("cpu", prepare_home(tmp_path_factory.mktemp("egg-home")), workers=2)


def prepare_home(egg_home: Path) -> Path:
    (egg_home / "threads" / "t1").mkdir(parents=True)
    (egg_home / "threads" / "t1" / "llm.jsonl").write_text(f'{{"api_key": "{CANARY}"}}\n')
    return egg_home


def test_corpus_is_large_enough() -> None:
    assert len(HOSTILE) >= 30
    assert len(HOSTILE) + len(CHEATS) >= 50


@pytest.mark.parametrize("path", HOSTILE, ids=lambda p: p.stem)
def test_static_rules_reject_it_before_it_runs(path: Path) -> None:
    rules = [f.split(":", 1)[0] for f in static_findings(path.read_text())]
    assert header(path, "expect") in rules, rules


@pytest.mark.parametrize("path", HOSTILE, ids=lambda p: p.stem)
def test_running_it_is_rejected_or_contained(path: Path, runtime: dict) -> None:
    res, seconds = runtime["results"][path.name]
    want = header(path, "runtime")
    assert res.ok, (res.error_kind, res.error, res.stderr_tail[-1500:])
    accepted = res.payload.get("accepted")
    reasons = res.payload.get("reasons", [])
    if want == "contained":
        # the attack ran and changed nothing: the verdict is the candidate's real outputs'
        assert accepted in (True, False)
    else:
        assert accepted is False, reasons
        if want != "any":
            assert any(r.startswith(want) for r in reasons), reasons
    assert seconds < BOUND_S, f"{path.name} took {seconds:.0f}s"
    # the judge says how the runner was confined on this machine
    assert "death signal" in res.payload["isolation"]["mechanisms"]


def test_no_secret_reaches_anything_the_run_returned_or_wrote(runtime: dict) -> None:
    for name, (res, _) in runtime["results"].items():
        assert CANARY not in res.model_dump_json(), name
    # the EGG home was hidden from the candidates: nothing new was written there either
    written = [p for p in runtime["egg_home"].rglob("*") if p.is_file() and p.name != "llm.jsonl"]
    assert written == []


def test_nothing_is_left_running(runtime: dict) -> None:
    assert runtime["leftovers"] == []


def test_no_connection_was_made(runtime: dict) -> None:
    assert runtime["connections"] == 0


def test_the_repository_and_host_tmp_are_untouched(runtime: dict) -> None:
    assert not runtime["repo_changed"]
    assert "egg-hostile-cache.pt" not in runtime["new_tmp"]
    # every job directory of this process was removed (other processes may have their own)
    mine = []
    for d in runtime["new_tmp"]:
        owner = Path("/tmp", d, "owner.pid")
        if d.startswith("egg-job-") and owner.exists() and owner.read_text().strip() == str(os.getpid()):
            mine.append(d)
    assert mine == []


def test_the_forged_results_were_not_taken(runtime: dict) -> None:
    for name in ("h01_forge_nonce_environ.py", "h02_forge_and_exit.py", "h03_forge_stdout.py"):
        res, _ = runtime["results"][name]
        assert res.payload.get("accepted") is False


@pytest.mark.gpu
def test_hostile_corpus_on_cuda(tmp_path: Path) -> None:
    """The same corpus on the GPU host, static rules off: every file rejected or contained,
    nothing left running, no secret out, each within the bound."""
    probe = run_job(
        Job(kind="selftest", task_path="", task_source="", device="cuda", options={"what": "env"}),
        timeout_s=120,
    )
    if not (probe.ok and probe.payload.get("cuda")):
        pytest.skip("needs a CUDA GPU")
    out = run_corpus("cuda", prepare_home(tmp_path / "egg-home"), workers=4)
    for p in HOSTILE:
        res, seconds = out["results"][p.name]
        want = header(p, "runtime")
        assert res.ok, (p.name, res.error)
        if want != "contained":
            assert res.payload.get("accepted") is False, (p.name, res.payload.get("reasons"))
        assert seconds < BOUND_S, (p.name, seconds)
        assert CANARY not in res.model_dump_json()
    assert out["leftovers"] == [] and out["connections"] == 0 and not out["repo_changed"]
