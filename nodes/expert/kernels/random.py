"""Fresh random tensors drawn in forward (torch.randn / torch.rand): Philox numbers from Triton's
own generator. The reference draws new values on every call, so no particular values are right:
the distribution is (the checker compares against the spread of two reference draws)."""

import torch
import triton
import triton.language as tl


@triton.jit
def random_kernel(out_ptr, n, seed, NORMAL: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    if NORMAL:
        v = tl.randn(seed, offs)
    else:
        v = tl.rand(seed, offs)
    tl.store(out_ptr + offs, v.to(out_ptr.dtype.element_ty), mask=mask)


def launch_random(shape, device, dtype, normal, seed):
    out = torch.empty(tuple(int(s) for s in shape), device=device, dtype=dtype or torch.float32)
    n = out.numel()
    if n >= 2**31:
        raise ValueError("random tensor too large for 32-bit offsets")
    if n:
        random_kernel[(triton.cdiv(n, 1024),)](out, n, seed, NORMAL=normal, BLOCK=1024)
    return out
