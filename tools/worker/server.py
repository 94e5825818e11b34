"""A warm worker: imports torch, triton and the worker once, then forks one judge per job.

Started by the agent's sandbox (tools/sandbox.py, `WorkerPool`) with the same clean environment
as a cold worker. Requests arrive as JSON lines on stdin ({id, workdir, job, result, nonce});
for each, a child is forked that starts its own session, dies with this server, writes its
output to files in its work directory and runs the job exactly as a cold worker would
(tools/worker/__main__.py `run`). This process never touches CUDA (so its forks can) and never
runs task or candidate code itself. Replies go out as JSON lines on the pipe named by argv[1]: {id, pid} when a
job's process exists, {id, rc} when it ended. When the agent goes away (stdin closes) every job
process is killed and the server exits.
"""

from __future__ import annotations

import json
import os
import select
import signal
import sys
import tempfile
import time

_OUT = [3]


def _send(obj: dict) -> None:
    data = (json.dumps(obj) + "\n").encode()
    while data:
        data = data[os.write(_OUT[0], data) :]


def _preload() -> None:
    # torch._dynamo: the first op run under any TorchDispatchMode (the op recorders of the judge
    # and the runner, the flop counter) imports it, 3-5 s; imported here once, not in every job's
    # judge and again in its runner. It touches no CUDA.
    import torch  # noqa: F401
    import torch._dynamo  # noqa: F401
    import triton  # noqa: F401
    import triton.language  # noqa: F401

    import tools.worker.__main__  # noqa: F401
    import tools.worker.check  # noqa: F401
    import tools.worker.compile_job  # noqa: F401
    import tools.worker.describe  # noqa: F401
    import tools.worker.evaluate  # noqa: F401
    import tools.worker.runner  # noqa: F401
    import tools.worker.timing  # noqa: F401

    try:
        import tools.worker.opgraph  # noqa: F401
    except ImportError:
        pass


def _spawn(req: dict) -> int:
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid:
        return pid
    try:
        from pathlib import Path

        from tools.worker.__main__ import run
        from tools.worker.confine import set_death_signal

        os.setsid()
        set_death_signal()
        work = req["workdir"]
        for fd, name in ((1, "stdout.log"), (2, "stderr.log")):
            f = os.open(os.path.join(work, name), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            os.dup2(f, fd)
            os.close(f)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.close(null)
        os.close(_OUT[0])
        os.chdir(work)
        os.environ["HOME"] = os.environ["TMPDIR"] = work
        tempfile.tempdir = None  # the module caches the first TMPDIR it saw
        run(Path(req["job"]), Path(req["result"]), str(req["nonce"]))
    except BaseException:  # noqa: BLE001 - never return into the server's loop
        import traceback

        traceback.print_exc()
    os._exit(1)


def main() -> int:
    _OUT[0] = int(sys.argv[1])
    _preload()
    _send({"ready": True, "pid": os.getpid()})
    children: dict[int, str] = {}
    buf = b""
    while True:
        ready, _, _ = select.select([0], [], [], 0.05)
        if ready:
            data = os.read(0, 1 << 16)
            if not data:
                break
            buf += data
            while b"\n" in buf:
                line, buf = buf.split(b"\n", 1)
                try:
                    req = json.loads(line)
                except ValueError:
                    continue
                pid = _spawn(req)
                children[pid] = str(req["id"])
                _send({"id": req["id"], "pid": pid})
        while children:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if not pid:
                break
            job = children.pop(pid, None)
            if job is not None:
                _send({"id": job, "rc": os.waitstatus_to_exitcode(status)})
    for pid in children:
        for kill in (os.killpg, os.kill):
            try:
                kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
    time.sleep(0.05)
    return 0


if __name__ == "__main__":
    sys.exit(main())
