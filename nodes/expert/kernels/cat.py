"""Concatenation (torch.cat / torch.stack) as copies: each input is one contiguous block per
outer index, written at its offset inside the output's rows. Inputs all dense in another dim
order (channels-last branches of a network) are joined in that order, and the output keeps it:
no input is copied into the contiguous layout first (a Fire module's two 2 GiB channels-last
branches were each copied once more than the join itself needs)."""

import torch
import triton
import triton.language as tl


@triton.jit
def cat_copy_kernel(src_ptr, dst_ptr, n, src_row, dst_row, offset, BLOCK: tl.constexpr):
    # src is (outer, src_row) contiguous; row o lands at dst[o * dst_row + offset : ... + src_row]
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    o = offs // src_row
    v = tl.load(src_ptr + offs, mask=mask)
    tl.store(dst_ptr + o * dst_row + offset + (offs - o * src_row), v, mask=mask)


def launch_cat(xs, dim):
    d = dim % xs[0].dim()
    order = _memory_order(xs[0])  # noqa: F821 (layout.py's, pasted beside it in a candidate)
    if order is not None and all(x.dim() == len(order) and x.permute(order).is_contiguous() for x in xs):
        out = launch_cat([x.permute(order) for x in xs], order.index(d))
        return out.permute([order.index(i) for i in range(len(order))])
    xs = [x.contiguous() for x in xs]
    shape = list(xs[0].shape)
    shape[d] = sum(x.shape[d] for x in xs)
    out = torch.empty(shape, device=xs[0].device, dtype=xs[0].dtype)
    inner = 1
    for s in shape[d + 1 :]:
        inner *= s
    dst_row = shape[d] * inner
    offset = 0
    for x in xs:
        if list(x.shape[:d]) != shape[:d] or list(x.shape[d + 1 :]) != shape[d + 1 :]:
            raise ValueError(f"cat of {tuple(x.shape)} into {tuple(shape)} along dim {d}")
        n = x.numel()
        if n:
            cat_copy_kernel[(triton.cdiv(n, 1024),)](
                x, out, n, x.shape[d] * inner, dst_row, offset, BLOCK=1024
            )
        offset += x.shape[d] * inner
    return out


def cat_buffer(xs, dim):
    """An empty tensor for the concatenation of tensors shaped like `xs` along `dim`, laid out
    like the first (channels-last stays channels-last): producers of the inputs write their own
    ranges of it (assemble.cat_in_place), so the join is never a copy."""
    d = dim % xs[0].dim()
    shape = list(xs[0].shape)
    for x in xs[1:]:
        if (
            x.dim() != len(shape)
            or list(x.shape[:d]) != shape[:d]
            or list(x.shape[d + 1 :]) != shape[d + 1 :]
        ):
            raise ValueError(f"cat of {tuple(x.shape)} with {tuple(xs[0].shape)} along dim {d}")
    shape[d] = sum(x.shape[d] for x in xs)
    order = _memory_order(xs[0])  # noqa: F821 (layout.py's, pasted beside it in a candidate)
    if order is None:
        return torch.empty(shape, device=xs[0].device, dtype=xs[0].dtype)
    out = torch.empty([shape[i] for i in order], device=xs[0].device, dtype=xs[0].dtype)
    return out.permute([order.index(i) for i in range(len(order))])
