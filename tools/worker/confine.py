"""Confine the candidate's process: what Linux gives, applied before any candidate code runs.

The judge (tools/worker/judge.py) forks the runner and the runner calls `confine()` first. What
it applies, in order, and what it falls back to when a mechanism is missing:

- a death signal (`prctl(PR_SET_PDEATHSIG, SIGKILL)`): the runner dies with the judge, so no job
  outlives its parent, whoever kills the parent and however;
- new namespaces (`unshare(2)`): PID (the runner becomes PID 1 of its own namespace: when it
  exits, the kernel kills every descendant, `setsid` or not), network (no interface but a down
  loopback: no network), mount (a fresh /proc that shows only the namespace's own processes, so
  no other process's environment or memory is reachable; fresh tmpfs on /tmp, /var/tmp and
  /dev/shm, removed with the namespace (a Python installation or repository under one of them is
  bound back read-only); the user's home and the EGG home hidden under empty
  tmpfs; the repository read-only), IPC and UTS. As root these need no user namespace; as any
  other user a user namespace is created first. Missing (a container that forbids unshare):
  no PID, network or mount isolation; the fallbacks below still hold, and `mechanisms` says so;
- as root, a user id of its own per job (`setuid`): nothing of root's is writable or readable, a
  per-user process limit applies to this job alone, and every process of that id is killed when
  the job ends (which catches `setsid` escapees when there is no PID namespace);
- no capabilities, `PR_SET_NO_NEW_PRIVS`;
- resource limits (`setrlimit`): processes, open files, CPU seconds, core dumps, file size, and
  on CPU the address space (on a GPU CUDA reserves terabytes of address space, so the limit is
  the data segment instead when the GPU still initialises under it: see `memory_limit`).

Nothing here imports torch. The functions raise nothing on a missing mechanism: they report it.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import errno
import os
import pwd
import re
import resource
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path

CLONE_NEWNS = 0x00020000
CLONE_NEWUTS = 0x04000000
CLONE_NEWIPC = 0x08000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000

MS_RDONLY = 1
MS_NOSUID = 2
MS_NODEV = 4
MS_NOEXEC = 8
MS_REMOUNT = 32
MS_BIND = 4096
MS_REC = 16384
MS_PRIVATE = 1 << 18

PR_SET_PDEATHSIG = 1
PR_SET_DUMPABLE = 4
PR_SET_NO_NEW_PRIVS = 38
_CAP_VERSION_3 = 0x20080522
_SYS_CAPSET = 126  # x86_64
# First user id of the per-job range (root only): far above any account's id.
UID_BASE = 200_000
UID_SPAN = 60_000

_libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)


def _call(fn, *args) -> int:
    r = fn(*args)
    return 0 if r == 0 else ctypes.get_errno() or errno.EPERM


def set_death_signal(sig: int = signal.SIGKILL) -> bool:
    return _call(_libc.prctl, PR_SET_PDEATHSIG, sig, 0, 0, 0) == 0


def make_undumpable() -> bool:
    """Other processes of the same user can no longer read this one's /proc files (environ,
    mem): used by the agent process, which may hold an API key in its environment."""
    return _call(_libc.prctl, PR_SET_DUMPABLE, 0, 0, 0, 0) == 0


def job_uid(judge_pid: int) -> int:
    """A user id for one job's runner, unique among live jobs (judge pids are unique)."""
    return UID_BASE + judge_pid % UID_SPAN


def readable_by_others(paths: list[str]) -> bool:
    """Whether a user with no rights of its own can reach every path (each directory on the way
    searchable, each file readable). Python installed under root's private home is not: a
    runner under its own user id could not import the standard library there."""
    for p in paths:
        path = os.path.abspath(p)
        parts = path.split(os.sep)
        for i in range(1, len(parts) + 1):
            sub = os.sep.join(parts[:i]) or os.sep
            try:
                st = os.stat(sub)
            except OSError:
                return False
            need = 0o001 if os.path.isdir(sub) else 0o004
            if not st.st_mode & need:
                return False
        if os.path.isdir(path) and not os.stat(path).st_mode & 0o004:
            return False
    return True


@dataclass
class Confinement:
    """What to apply. `hide` are directories replaced by empty tmpfs (credentials, the EGG home)."""

    device: str = "cpu"
    cpu_seconds: int = 600
    max_procs: int = 512
    max_files: int = 4096
    file_bytes: int = 1 << 30
    memory_bytes: int | None = None
    hide: list[str] = field(default_factory=list)
    uid: int | None = None  # root only: the per-job user id


@dataclass
class Applied:
    """What was applied (reported with every check) and what was missing."""

    mechanisms: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    workdir: str = ""

    def as_dict(self) -> dict[str, object]:
        return {"mechanisms": list(self.mechanisms), "missing": list(self.missing)}


def _write(path: str, text: str) -> None:
    with open(path, "w") as f:
        f.write(text)


def _mount(src: str, target: str, fstype: str | None, flags: int, data: str | None = None) -> int:
    return _call(
        _libc.mount,
        src.encode(),
        target.encode(),
        fstype.encode() if fstype else None,
        ctypes.c_ulong(flags),
        data.encode() if data else None,
    )


def _mount_flags(path: str) -> int:
    """The flags a bind remount must keep (the kernel refuses to drop locked ones)."""
    st = os.statvfs(path)
    keep = 0
    for flag, bit in (
        (os.ST_NOSUID, MS_NOSUID),
        (os.ST_NODEV, MS_NODEV),
        (os.ST_NOEXEC, MS_NOEXEC),
        (os.ST_NOATIME, 1024),
        (os.ST_NODIRATIME, 2048),
        (os.ST_RELATIME, 1 << 21),
    ):
        if st.f_flag & flag:
            keep |= bit
    return keep


def _mountpoints() -> list[str]:
    out = []
    with contextlib.suppress(OSError), open("/proc/self/mountinfo") as f:
        for line in f:
            parts = line.split()
            if len(parts) > 4:
                # octal escapes (\040 for a space) as the kernel writes them
                out.append(re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), parts[4]))
    return out


def _drop_capabilities() -> bool:
    class Header(ctypes.Structure):
        _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]

    class Data(ctypes.Structure):
        _fields_ = [
            ("effective", ctypes.c_uint32),
            ("permitted", ctypes.c_uint32),
            ("inheritable", ctypes.c_uint32),
        ]

    hdr = Header(_CAP_VERSION_3, 0)
    data = (Data * 2)()
    return _call(_libc.syscall, _SYS_CAPSET, ctypes.byref(hdr), data) == 0


def _namespaces(applied: Applied) -> bool:
    """unshare() the namespaces; True when this process must fork to enter the PID namespace."""
    root = os.geteuid() == 0
    flags = CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS
    uid, gid = os.getuid(), os.getgid()
    if not root:
        flags |= CLONE_NEWUSER
    err = _call(_libc.unshare, flags)
    if err:
        applied.missing.append(f"namespaces (unshare: {os.strerror(err)})")
        return False
    if not root:
        with contextlib.suppress(OSError):
            _write("/proc/self/setgroups", "deny")
        _write("/proc/self/uid_map", f"0 {uid} 1")
        _write("/proc/self/gid_map", f"0 {gid} 1")
        applied.mechanisms.append("user namespace")
    applied.mechanisms.append("pid, network, mount, ipc and uts namespaces")
    return True


# Replaced by empty tmpfs inside the job's mount namespace.
SCRATCH = ("/tmp", "/var/tmp", "/dev/shm")
# The repository root (tools/worker/ is two levels below it).
_REPO = str(Path(__file__).resolve().parents[2])


def _runtime_dirs(scratch: str) -> list[str]:
    """The directories the job's Python needs that live under `scratch`: its installation
    (prefixes and site-packages) and the repository, outermost first, none nested in another.
    Never the rest of the import path: it holds the working directory, which for a job is its
    own directory on the host's /tmp (with the judge's files)."""
    import sys

    site = [p for p in sys.path if os.path.basename(p) in ("site-packages", "dist-packages")]
    found = sorted(
        {
            os.path.realpath(p)
            for p in (sys.prefix, sys.base_prefix, sys.exec_prefix, _REPO, *site)
            if p and os.path.isdir(p)
        }
    )
    out: list[str] = []
    for p in found:
        if p.startswith(scratch.rstrip("/") + "/") and not any(p.startswith(q + "/") for q in out):
            out.append(p)
    return out


def _mounts(cfg: Confinement, applied: Applied) -> str:
    """Inside the new mount namespace: private propagation, a fresh /proc, tmpfs scratch, hidden
    and read-only paths. Returns the work directory (on the private /tmp)."""
    if _mount("none", "/", None, MS_REC | MS_PRIVATE):
        applied.missing.append("private mounts")
        return ""
    if _mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC) == 0:
        applied.mechanisms.append("private /proc")
    else:
        applied.missing.append("private /proc")
    for d in SCRATCH:
        # The Python installation or the repository may live under a scratch directory (a
        # checkout in /tmp): held by a descriptor across the tmpfs mount, then bound back at the
        # same path (read-only below, like every other path the job may read).
        keep = [(k, os.open(k, os.O_PATH | os.O_DIRECTORY)) for k in _runtime_dirs(d)]
        try:
            if os.path.isdir(d) and _mount("tmpfs", d, "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777") == 0:
                applied.mechanisms.append(f"private {d}")
                for k, fd in keep:
                    os.makedirs(k, exist_ok=True)
                    if _mount(f"/proc/self/fd/{fd}", k, None, MS_BIND | MS_REC):
                        applied.missing.append(f"{k} (under {d}) not visible")
        finally:
            for _, fd in keep:
                os.close(fd)
    for p in cfg.hide:
        if (
            p
            and os.path.isdir(p)
            and _mount("tmpfs", p, "tmpfs", MS_NOSUID | MS_NODEV, "mode=755,size=1m") == 0
        ):
            applied.mechanisms.append(f"hidden {p}")
    # Everything else read-only: the repository, the user's files, the Python installation.
    scratch = {"/proc", *SCRATCH, *cfg.hide}
    failed = []
    for mp in _mountpoints():
        if mp in scratch or mp == "/dev" or mp.startswith(("/dev/", "/proc/")) or not os.path.isdir(mp):
            continue
        if _mount("none", mp, None, MS_REMOUNT | MS_BIND | MS_RDONLY | _mount_flags(mp)):
            # not yet a bind mount of its own (the root file system in some containers)
            if _mount(mp, mp, None, MS_BIND) or _mount(
                "none", mp, None, MS_REMOUNT | MS_BIND | MS_RDONLY | _mount_flags(mp)
            ):
                failed.append(mp)
    if failed:
        applied.missing.append("read-only " + ", ".join(failed[:5]))
    else:
        applied.mechanisms.append("read-only file systems")
    work = "/tmp/egg-run"
    os.makedirs(work, mode=0o700, exist_ok=True)
    return work


def _limits(cfg: Confinement, applied: Applied) -> None:
    def cap(which: int, value: int, name: str) -> None:
        try:
            soft, hard = resource.getrlimit(which)
            v = value if hard == resource.RLIM_INFINITY else min(value, hard)
            resource.setrlimit(which, (v, v))
            applied.mechanisms.append(f"{name} limit")
        except (ValueError, OSError):
            applied.missing.append(f"{name} limit")

    cap(resource.RLIMIT_CORE, 0, "core")
    cap(resource.RLIMIT_CPU, cfg.cpu_seconds, "cpu-seconds")
    cap(resource.RLIMIT_NOFILE, cfg.max_files, "open-files")
    cap(resource.RLIMIT_FSIZE, cfg.file_bytes, "file-size")
    if cfg.memory_bytes:
        # CUDA reserves far more address space than it uses: on a GPU limit the data segment.
        which = resource.RLIMIT_AS if cfg.device == "cpu" else resource.RLIMIT_DATA
        cap(which, cfg.memory_bytes, "memory")
    if cfg.uid is not None:
        cap(resource.RLIMIT_NPROC, cfg.max_procs, "process")
    else:
        # Counted per real user across the machine: allow what the user already runs, plus ours.
        try:
            mine = sum(
                1 for d in Path("/proc").iterdir() if d.name.isdigit() and d.stat().st_uid == os.getuid()
            )
        except OSError:
            mine = 0
        cap(resource.RLIMIT_NPROC, mine + cfg.max_procs, "process")


def confine(cfg: Confinement) -> Applied:
    """Apply everything; runs in the freshly forked runner before any candidate code.

    With a PID namespace this forks once more: the calling process only waits for the new PID 1
    and exits with its status (it never returns), and the PID 1 continues here."""
    applied = Applied()
    parent = os.getppid()
    set_death_signal()
    if os.getppid() != parent:  # the judge died before the death signal was armed
        os._exit(1)
    applied.mechanisms.append("death signal")
    with contextlib.suppress(OSError):
        os.setsid()
    root = os.geteuid() == 0
    work = ""
    if _namespaces(applied):
        pid = os.fork()
        if pid:
            # Outside the namespace: wait for its PID 1 and die with it. (A SIGKILL here, from
            # the judge's death signal, takes PID 1 down through its own death signal.)
            _, status = os.waitpid(pid, 0)
            os._exit(os.waitstatus_to_exitcode(status) & 0xFF if os.WIFEXITED(status) else 1)
        set_death_signal()
        work = _mounts(cfg, applied)
    if not work:
        work = os.path.join(os.environ.get("TMPDIR") or "/tmp", f"egg-run-{os.getpid()}")
        os.makedirs(work, mode=0o700, exist_ok=True)
    _limits(cfg, applied)
    if root and cfg.uid is not None:
        try:
            os.chown(work, cfg.uid, cfg.uid)
            os.setgroups([])
            os.setgid(cfg.uid)
            os.setuid(cfg.uid)
            applied.mechanisms.append("own user id")
        except OSError as e:
            applied.missing.append(f"own user id ({e.strerror})")
    elif root:
        applied.missing.append("own user id")
    if _drop_capabilities():
        applied.mechanisms.append("no capabilities")
    if _call(_libc.prctl, PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0:
        applied.mechanisms.append("no new privileges")
    applied.workdir = work
    return applied


def kill_uid(uid: int, *, rounds: int = 5) -> int:
    """SIGKILL every process running as `uid` (a finished job's id): catches descendants that
    left the process group when no PID namespace was available. Returns how many were killed."""
    if uid < UID_BASE:
        raise ValueError("refusing to kill processes of a shared user id")
    killed = 0
    for _ in range(rounds):
        found = 0
        for d in Path("/proc").iterdir():
            if not d.name.isdigit():
                continue
            try:
                if d.stat().st_uid != uid:
                    continue
                os.kill(int(d.name), signal.SIGKILL)
                found += 1
            except (OSError, ValueError):
                continue
        killed += found
        if not found:
            break
        time.sleep(0.05)
    return killed


# Where credentials live in a home directory (directories only: they are hidden under tmpfs).
CREDENTIAL_DIRS = (".ssh", ".aws", ".azure", ".config", ".gnupg", ".docker", ".kube", ".local/share/keyrings")


def secret_dirs(extra: list[str] | None = None) -> list[str]:
    """Directories to hide from the candidate: credential folders of the invoking user's home
    and `extra` (the EGG home: checkpoints and LLM transcripts)."""
    homes = set()
    with contextlib.suppress(KeyError):
        homes.add(pwd.getpwuid(os.getuid()).pw_dir)
    out = [os.path.join(h, d) for h in homes if h and h != "/" for d in CREDENTIAL_DIRS]
    out += [os.path.abspath(p) for p in extra or [] if p]
    return sorted({p for p in out if os.path.isdir(p)})
