"""torch.tril / torch.triu: keep one triangle of the last two dims, zeros elsewhere."""

import torch
import triton
import triton.language as tl


@triton.jit
def tri_kernel(x_ptr, out_ptr, n, rows, cols, diagonal, UPPER: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    col = offs % cols
    row = (offs // cols) % rows
    if UPPER:
        keep = col - row >= diagonal
    else:
        keep = col - row <= diagonal
    x = tl.load(x_ptr + offs, mask=mask, other=0)
    tl.store(out_ptr + offs, tl.where(keep, x, tl.zeros_like(x)), mask=mask)


def launch_tri(x, diagonal, upper):
    if x.dim() < 2:
        raise ValueError("tril/triu needs at least 2 dims")
    x = x.contiguous()
    out = torch.empty_like(x)
    n = x.numel()
    if n:
        tri_kernel[(triton.cdiv(n, 1024),)](
            x, out, n, x.shape[-2], x.shape[-1], int(diagonal), UPPER=upper, BLOCK=1024
        )
    return out
