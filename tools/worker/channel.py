"""The judge <-> runner channel: framed JSON messages over pipes, tensors through a shared memfd.

Messages are length-prefixed JSON objects, capped in size; the judge reads the runner's with a
deadline, so a runner that stalls, floods or dies is a value (`ChannelTimeout`, `ChannelClosed`,
`ChannelError`), never a hang. Tensors never travel as pickles: the runner writes raw bytes into
a memfd the judge created and sized for the outputs it expects, and the judge rebuilds each
tensor from the bytes with a dtype and shape it checks against its own reference first. Nothing
the runner sends is ever executed or unpickled.
"""

from __future__ import annotations

import json
import mmap
import os
import select
import struct
import time
from typing import Any

MAX_MESSAGE = 4 << 20
_HEADER = struct.Struct("<Q")

# dtype names both sides accept, with their item sizes
DTYPES = {
    "float64": 8,
    "float32": 4,
    "float16": 2,
    "bfloat16": 2,
    "int64": 8,
    "int32": 4,
    "int16": 2,
    "int8": 1,
    "uint8": 1,
    "bool": 1,
    "complex64": 8,
}


class ChannelError(Exception):
    """The peer broke the protocol (oversized or malformed message)."""


class ChannelClosed(ChannelError):
    """The peer's end is closed: the process exited or was killed."""


class ChannelTimeout(ChannelError):
    """No complete message before the deadline."""


def send(fd: int, obj: dict[str, Any]) -> None:
    data = json.dumps(obj, default=str, allow_nan=True).encode()
    if len(data) > MAX_MESSAGE:
        raise ChannelError(f"message of {len(data)} bytes exceeds {MAX_MESSAGE}")
    buf = memoryview(_HEADER.pack(len(data)) + data)
    while buf:
        n = os.write(fd, buf)
        buf = buf[n:]


def _read_exact(fd: int, n: int, deadline: float | None) -> bytes:
    chunks: list[bytes] = []
    while n > 0:
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0:
                raise ChannelTimeout("timed out waiting for the peer")
            ready, _, _ = select.select([fd], [], [], left)
            if not ready:
                raise ChannelTimeout("timed out waiting for the peer")
        chunk = os.read(fd, min(n, 1 << 20))
        if not chunk:
            raise ChannelClosed("the peer closed the channel")
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)


def recv(fd: int, timeout_s: float | None = None) -> dict[str, Any]:
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    (n,) = _HEADER.unpack(_read_exact(fd, _HEADER.size, deadline))
    if n > MAX_MESSAGE:
        raise ChannelError(f"peer sent a message of {n} bytes (limit {MAX_MESSAGE})")
    try:
        obj = json.loads(_read_exact(fd, n, deadline))
    except (ValueError, UnicodeDecodeError) as e:
        raise ChannelError(f"peer sent malformed JSON: {e}") from None
    if not isinstance(obj, dict):
        raise ChannelError("peer sent a message that is not an object")
    return obj


def new_slab(nbytes: int = 0) -> int:
    fd = os.memfd_create("egg-slab", os.MFD_CLOEXEC)
    if nbytes:
        os.ftruncate(fd, nbytes)
    return fd


def slab_size(fd: int) -> int:
    return os.fstat(fd).st_size


def reserve(fd: int, nbytes: int) -> None:
    """Judge side: make the slab hold at least `nbytes` (grown by half again, to remap rarely)."""
    size = slab_size(fd)
    if size < nbytes:
        os.ftruncate(fd, max(nbytes, size + size // 2))


# One mapping per slab and process, page-locked for the GPU where CUDA is up: copies between
# the GPU and the slab then run at DMA speed instead of through the driver's bounce buffers.
_MAPS: dict[int, tuple[int, mmap.mmap, Any, bool]] = {}


def _view(fd: int) -> Any:
    """A uint8 tensor over the whole slab (None when it is empty)."""
    import torch

    size = slab_size(fd)
    held = _MAPS.get(fd)
    if held is not None and held[0] == size:
        return held[2]
    if held is not None:
        _unmap(fd)
    if size == 0:
        return None
    mm = mmap.mmap(fd, size, flags=mmap.MAP_SHARED | getattr(mmap, "MAP_POPULATE", 0))
    view = torch.frombuffer(mm, dtype=torch.uint8, count=size)
    pinned = False
    if torch.cuda.is_available() and torch.cuda.is_initialized() and size >= 1 << 20:
        pinned = torch.cuda.cudart().cudaHostRegister(view.data_ptr(), size, 0) == 0
    _MAPS[fd] = (size, mm, view, pinned)
    return view


def _unmap(fd: int) -> None:
    size, mm, view, pinned = _MAPS.pop(fd)
    if pinned:
        import torch

        torch.cuda.cudart().cudaHostUnregister(view.data_ptr())
    del view
    try:
        mm.close()
    except BufferError:
        pass  # a tensor still views it: the mapping goes when that tensor does


def release(fd: int) -> None:
    if fd in _MAPS:
        _unmap(fd)


def nbytes_of(shape: list[int], dtype: str) -> int:
    n = DTYPES[dtype]
    for d in shape:
        n *= int(d)
    return n


def write_tensors(fd: int, tensors: list[Any]) -> list[dict[str, Any]]:
    """Runner side: each tensor's bytes into the slab, in order, while they fit. Returns one
    descriptor per value: its type, and for tensors shape, dtype, offset and whether it was written."""
    import torch

    view = _view(fd)
    size = 0 if view is None else view.numel()
    out: list[dict[str, Any]] = []
    offset = 0
    for t in tensors:
        kind = f"{type(t).__module__}.{type(t).__qualname__}"
        if not isinstance(t, torch.Tensor):
            out.append({"type": kind})
            continue
        dt = str(t.dtype).replace("torch.", "")
        desc = {"type": kind, "shape": list(t.shape), "dtype": dt, "device": t.device.type}
        n = t.numel() * t.element_size()
        if dt in DTYPES and view is not None and offset + n <= size:
            if n:
                src = t.detach().contiguous().reshape(-1).view(torch.uint8)
                view[offset : offset + n].copy_(src)
            desc.update(offset=offset, nbytes=n, written=True)
            offset += n
        else:
            desc["written"] = False
        out.append(desc)
    if _any_cuda(tensors):
        torch.cuda.synchronize()
    return out


def _any_cuda(tensors: list[Any]) -> bool:
    return any(getattr(t, "is_cuda", False) for t in tensors)


def read_tensor(fd: int, desc: dict[str, Any], device: str) -> Any:
    """Judge side: rebuild one tensor the runner wrote, after the caller checked shape/dtype."""
    import torch

    dt, shape = desc["dtype"], [int(d) for d in desc["shape"]]
    n = nbytes_of(shape, dt)
    off = int(desc["offset"])
    if desc.get("nbytes") != n or off < 0 or off + n > slab_size(fd):
        raise ChannelError("tensor descriptor does not match the slab")
    dtype = getattr(torch, dt)
    if n == 0:
        return torch.empty(shape, dtype=dtype, device=device)
    raw = _view(fd)[off : off + n]
    t = raw.to(device, copy=True) if device != "cpu" else raw.clone()
    return t.view(dtype).reshape(shape)
