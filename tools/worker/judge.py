"""The judge's side of a candidate job: start a confined runner, talk to it, never import the candidate.

`RunnerProcess` forks the runner (tools/worker/runner.py) from this process before this process
touches CUDA (a forked CUDA context is unusable), so the runner inherits the imported torch and
triton and starts in milliseconds. The runner confines itself (tools/worker/confine.py) before it
reads the candidate. Every request has a deadline: a runner that hangs is killed and the request
fails as `RunnerTimeout`; one that dies fails as `RunnerDied`, with its exit status and the tail of
what it printed. Both are the candidate's fault, reported as such by the callers.
"""

from __future__ import annotations

import os
import re
import signal
import sys
import time
from typing import Any

from tools.sandbox import TAIL_BYTES, Tail
from tools.worker import channel, confine, gpulock

# What the runner's environment holds: nothing of the judge's but these.
_RUNNER_ENV_PASS = ("PATH", "LANG", "CUDA_VISIBLE_DEVICES", "CUDA_HOME", "CUDA_PATH", "TZ", "PYTHONHASHSEED")
# The judge's own stdio and the channel are all the runner keeps.
_KEEP_STDIO = (0, 1, 2)


class RunnerFailure(Exception):
    def __init__(self, rule: str, message: str) -> None:
        super().__init__(message)
        self.rule = rule
        self.message = message

    @property
    def reason(self) -> str:
        return f"{self.rule}: {self.message}"


class RunnerTimeout(RunnerFailure):
    pass


class RunnerDied(RunnerFailure):
    pass


def _repo_root() -> str:
    return os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def confinement_for(job: Any, timeout_s: float) -> confine.Confinement:
    opts = job.options
    root = os.geteuid() == 0
    mem = opts.get("runner_memory_bytes")
    if mem is None and job.device == "cpu":
        # CPU checks run shrunk tasks under the interpreter: half the machine is far more than enough.
        try:
            mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 2
        except (ValueError, OSError):
            mem = None
    return confine.Confinement(
        device=job.device,
        cpu_seconds=int(max(60, timeout_s) * max(4, os.cpu_count() or 4)),
        memory_bytes=int(mem) if mem else None,
        hide=confine.secret_dirs([opts["egg_home"]] if opts.get("egg_home") else []),
        uid=confine.job_uid(os.getpid()) if root and _runtime_readable() else None,
    )


# the names a runner may give the parts of a request's seconds (RunnerProcess.finish)
_PART_NAME = re.compile(r"[a-z][a-z_]{0,23}")


class RunnerProcess:
    """One confined runner for one job (compile, check and time may share it)."""

    def __init__(self, job: Any, *, timeout_s: float) -> None:
        self.job = job
        self.timeout_s = timeout_s
        self.deadline = time.monotonic() + timeout_s
        # the judge's waits for the GPU (memory shares, the lock) do not use up the runner's time
        self._waited0 = gpulock.total_waited()
        self.cfg = confinement_for(job, timeout_s)
        self.slab = channel.new_slab()
        self.isolation: dict[str, Any] = {}
        self.loaded = False
        self.load_failure: dict[str, Any] | None = None
        self.pending: str | None = None  # a request sent by `start` whose reply is not read yet
        # the runner holds a built model and its inputs, already called once (the recording
        # call's, kept for a screening timing: compile_job.run_compile); a build or a release
        # replaces them
        self.ready_to_time = False
        self.dead: RunnerFailure | None = None
        self.seconds: dict[str, float] = {}
        self.peak_bytes = 0
        req_r, req_w = os.pipe()
        rep_r, rep_w = os.pipe()
        out_r, out_w = os.pipe()
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:  # the runner
            code = 1
            try:
                os.dup2(out_w, 1)
                os.dup2(out_w, 2)
                keep = {req_r, rep_w, self.slab, *_KEEP_STDIO}
                for fd in _open_fds():
                    if fd not in keep:
                        try:
                            os.close(fd)
                        except OSError:
                            pass
                applied = confine.confine(self.cfg)
                work = applied.workdir
                env = {k: v for k, v in os.environ.items() if k in _RUNNER_ENV_PASS or k.startswith("LC_")}
                env.update(
                    HOME=work,
                    TMPDIR=work,
                    TRITON_CACHE_DIR=os.path.join(work, "triton-cache"),
                    PYTHONPATH=_repo_root(),
                    PYTHONDONTWRITEBYTECODE="1",
                    # getpass.getuser() (Triton's cache) asks the user database when these are
                    # unset, and a per-job user id has no entry there
                    USER="egg-runner",
                    LOGNAME="egg-runner",
                )
                if job.device == "cpu":
                    env["TRITON_INTERPRET"] = "1"
                    env["CUDA_VISIBLE_DEVICES"] = ""
                os.environ.clear()
                os.environ.update(env)
                os.chdir(work)
                from tools.worker.runner import serve

                serve(req_r, rep_w, self.slab, job.device, applied.as_dict())
                code = 0
            except BaseException:  # noqa: BLE001 - whatever happens, never return into the judge
                import traceback

                traceback.print_exc()
            finally:
                os._exit(code)
        self.pid = pid
        for fd in (req_r, rep_w, out_w):
            os.close(fd)
        self.req, self.rep = req_w, rep_r
        self.out = Tail(os.fdopen(out_r, "rb", buffering=0), TAIL_BYTES)
        hello = self._recv(min(120.0, timeout_s), "start")
        self.isolation = dict(hello.get("isolation") or {})

    # -- requests ------------------------------------------------------------------------------

    def left(self) -> float:
        waited = gpulock.total_waited() - self._waited0
        return max(0.5, self.deadline + waited - time.monotonic())

    def request(self, op: str, timeout_s: float | None = None, **kw: Any) -> dict[str, Any]:
        """Send one request and wait for its reply (a `phase` message first for `wall`)."""
        self.start(op, **kw)
        return self.finish(op, timeout_s)

    def start(self, op: str, **kw: Any) -> None:
        """Send one request without waiting for its reply: the runner works on it while the
        judge does something else (waits for memory shares, makes its own CUDA context);
        `finish` reads the reply. One request at a time."""
        if self.dead is not None:
            raise self.dead
        if self.pending is not None:
            raise RuntimeError(f"`{op}` sent while the reply to `{self.pending}` is unread")
        if op in ("build", "release"):
            self.ready_to_time = False
        try:
            channel.send(self.req, {"op": op, **kw})
        except OSError:
            self._died(op)
        self.pending = op

    def finish(self, op: str, timeout_s: float | None = None) -> dict[str, Any]:
        """The reply to `op`, sent by `start`."""
        if self.pending != op:
            raise RuntimeError(f"no `{op}` request is waiting for its reply (pending: {self.pending})")
        self.pending = None
        reply = self._recv(min(timeout_s or self.left(), self.left()), op)
        self.seconds[op] = round(self.seconds.get(op, 0.0) + float(reply.get("seconds") or 0.0), 3)
        phases = reply.get("phases")
        if isinstance(phases, dict):
            # The runner's own parts of the request, as "<op>.<part>": its claim, a diagnostic
            # only (like peak_bytes), so a few plain names and finite numbers are all it keeps.
            for k, v in list(phases.items())[:8]:
                if (
                    isinstance(k, str)
                    and _PART_NAME.fullmatch(k)
                    and isinstance(v, (int, float))
                    and not isinstance(v, bool)
                    and 0 <= v < 1e6
                ):
                    key = f"{op}.{k}"
                    self.seconds[key] = round(self.seconds.get(key, 0.0) + float(v), 4)
        if isinstance(reply.get("peak_bytes"), int):
            # the runner's claim, used only to size memory admission for later jobs
            self.peak_bytes = max(self.peak_bytes, reply["peak_bytes"])
        return reply

    def load(self, job: Any) -> dict[str, Any] | None:
        """Import the task and the candidate in the runner (once): None, or the failure as
        {rule, error, kind, line}, the same one when asked again. A task that fails to load
        raises BadTask."""
        if self.loaded:
            return None
        if self.load_failure is not None:
            return self.load_failure
        try:
            r = self.request(
                "load",
                task_source=job.task_source,
                overrides=dict(job.size_overrides),
                candidate_source=job.candidate_source or "",
            )
        except RunnerFailure as f:
            self.load_failure = {"rule": f.rule, "error": f.message, "kind": "crash"}
            return self.load_failure
        if r.get("ok"):
            self.loaded = True
            return None
        if r.get("rule") == "bad_task":
            from tools.worker.common import BadTask

            raise BadTask(str(r.get("error"))[:400])
        self.load_failure = {
            "rule": str(r.get("rule") or "load.error"),
            "error": str(r.get("error"))[:600],
            "kind": str(r.get("kind") or "import"),
            "line": r.get("line") if isinstance(r.get("line"), int) else None,
        }
        return self.load_failure

    def recv_more(self, op: str, timeout_s: float | None = None) -> dict[str, Any]:
        return self._recv(min(timeout_s or self.left(), self.left()), op)

    def _recv(self, timeout_s: float, op: str) -> dict[str, Any]:
        try:
            return channel.recv(self.rep, timeout_s)
        except channel.ChannelTimeout:
            self.kill()
            self.dead = RunnerTimeout(
                "sandbox.timeout", f"the candidate's process did not answer `{op}` within {timeout_s:.0f}s"
            )
            raise self.dead from None
        except channel.ChannelClosed:
            self._died(op)
        except channel.ChannelError as e:
            self.kill()
            self.dead = RunnerDied("sandbox.protocol", f"the candidate's process broke the protocol: {e}")
            raise self.dead from None
        raise AssertionError("unreachable")

    def _died(self, op: str) -> None:
        status = self._reap(timeout_s=5)
        tail = [ln for ln in self.out.text().strip().splitlines() if ln.strip()]
        last = f" [output: {tail[-1][:300]}]" if tail else ""
        if status is None:
            what = "closed the channel"
        elif status < 0:
            sig = -status
            name = signal.Signals(sig).name if sig in signal.Signals._value2member_map_ else str(sig)
            what = f"was killed by {name}"
        else:
            what = f"exited with code {status}"
        self.kill()
        self.dead = RunnerDied("sandbox.crash", f"the candidate's process {what} during `{op}`{last}")
        raise self.dead

    # -- lifetime ------------------------------------------------------------------------------

    def _reap(self, timeout_s: float) -> int | None:
        end = time.monotonic() + timeout_s
        while True:
            try:
                pid, status = os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:
                return None
            if pid:
                self.pid = 0
                return os.waitstatus_to_exitcode(status)
            if time.monotonic() >= end:
                return None
            time.sleep(0.02)

    def kill(self) -> None:
        if self.pid:
            for target in (
                lambda: os.killpg(self.pid, signal.SIGKILL),
                lambda: os.kill(self.pid, signal.SIGKILL),
            ):
                try:
                    target()
                except (ProcessLookupError, PermissionError):
                    pass
            self._reap(timeout_s=5)
        if self.cfg.uid is not None:
            confine.kill_uid(self.cfg.uid)

    def output_tail(self) -> str:
        return self.out.text()

    def close(self) -> None:
        if self.pid and self.dead is None:
            try:
                channel.send(self.req, {"op": "exit"})
            except OSError:
                pass
            self._reap(timeout_s=2)
        self.kill()
        channel.release(self.slab)
        for fd in (self.req, self.rep, self.slab):
            try:
                os.close(fd)
            except OSError:
                pass

    def __enter__(self) -> RunnerProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _runtime_readable() -> bool:
    """Whether Python, torch, triton and this repository are readable by an unprivileged user id."""
    import sysconfig

    import torch
    import triton

    paths = [
        sysconfig.get_paths()["stdlib"],
        os.path.dirname(torch.__file__),
        os.path.dirname(triton.__file__),
    ]
    return confine.readable_by_others([*paths, _repo_root()])


def _open_fds() -> list[int]:
    try:
        return [int(x) for x in os.listdir("/proc/self/fd")]
    except OSError:
        return list(range(3, 1024))
