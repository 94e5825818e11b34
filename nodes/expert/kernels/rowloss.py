"""The ordered sum that reduces per-row losses to one value (deterministic: one program)."""

import triton
import triton.language as tl


@triton.jit
def rl_sum_kernel(v_ptr, out_ptr, n, scale, BLOCK: tl.constexpr):
    offs0 = tl.arange(0, BLOCK)
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for start in range(0, n, BLOCK):
        offs = start + offs0
        acc += tl.load(v_ptr + offs, mask=offs < n, other=0.0)
    tl.store(out_ptr, tl.sum(acc, 0) * scale)
