"""A per-GPU reader/writer file lock shared by every worker process on the machine.

Timing must not overlap with any other GPU work (it would distort clocks and memory traffic);
compiling and checking may overlap with each other. Workers hold the lock shared while they
compile or check and exclusively while they time. A file lock (not a lock in the agent process)
also covers several `egg` processes sharing one GPU.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator

LOCK_ENV = "EGG_GPU_LOCK"


@contextlib.contextmanager
def gpu_lock(exclusive: bool) -> Iterator[None]:
    path = os.environ.get(LOCK_ENV)
    if not path:
        yield
        return
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        yield
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)
