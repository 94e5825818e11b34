"""Padding (F.pad, nn.ZeroPad/ConstantPad/ReflectionPad/ReplicationPad/CircularPad): one gather
pass over the output. Each output element reads the input element its index maps to (shifted by
the left pad; reflected, clamped or wrapped for the other modes), or the fill value outside the
input in constant mode. Negative pads crop. Any input strides; the output is contiguous, or, for
an input dense in another dim order (channels-last), laid out in that order as PyTorch's own pads
do, so that the gather streams both tensors and a channels-last consumer needs no copy."""

import torch
import triton
import triton.language as tl


@triton.jit
def _pad_src(j, size, MODE: tl.constexpr):
    # j: an index along one dim of the input, possibly outside [0, size)
    if MODE == 1:  # reflect (the edge element is not repeated)
        j = tl.where(j < 0, -j, j)
        j = tl.where(j >= size, 2 * (size - 1) - j, j)
    elif MODE == 2:  # replicate
        j = tl.minimum(tl.maximum(j, 0), size - 1)
    elif MODE == 3:  # circular
        j = ((j % size) + size) % size
    return j


@triton.jit
def pad_kernel(
    x_ptr, out_ptr, n,
    O1, O2, O3, O4,
    I0, I1, I2, I3, I4,
    P0, P1, P2, P3, P4,
    S0, S1, S2, S3, S4,
    value,
    MODE: tl.constexpr,
    BLOCK: tl.constexpr,
):  # fmt: skip
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    c4 = offs % O4
    t = offs // O4
    c3 = t % O3
    t = t // O3
    c2 = t % O2
    t = t // O2
    c1 = t % O1
    c0 = t // O1
    j0 = _pad_src(c0 - P0, I0, MODE)
    j1 = _pad_src(c1 - P1, I1, MODE)
    j2 = _pad_src(c2 - P2, I2, MODE)
    j3 = _pad_src(c3 - P3, I3, MODE)
    j4 = _pad_src(c4 - P4, I4, MODE)
    inside = (j0 >= 0) & (j0 < I0) & (j1 >= 0) & (j1 < I1) & (j2 >= 0) & (j2 < I2)
    inside = inside & (j3 >= 0) & (j3 < I3) & (j4 >= 0) & (j4 < I4)
    src = j0 * S0 + j1 * S1 + j2 * S2 + j3 * S3 + j4 * S4
    v = tl.load(x_ptr + src, mask=mask & inside, other=0)
    fill = tl.full(v.shape, value, v.dtype)
    tl.store(out_ptr + offs, tl.where(inside, v, fill), mask=mask)


def launch_pad(x, pad, mode="constant", value=0.0):
    pad = [int(p) for p in pad]
    k = len(pad) // 2
    if len(pad) % 2 or k > x.dim():
        raise ValueError(f"pad of length {len(pad)} for a {x.dim()}-d tensor")
    modes = {"constant": 0, "reflect": 1, "replicate": 2, "circular": 3}
    if mode not in modes:
        raise ValueError(f"pad mode {mode!r}")
    order = _memory_order(x)  # noqa: F821 (layout.py's, pasted beside it in a candidate)
    if order is not None:
        # pad the dense permuted view (its borders per dim moved along) and view the result back
        border = [(0, 0)] * x.dim()
        for i in range(k):
            border[x.dim() - 1 - i] = (pad[2 * i], pad[2 * i + 1])
        moved = [border[d] for d in order]
        while moved and moved[0] == (0, 0):
            moved.pop(0)
        inner = [p for lr in reversed(moved) for p in lr]
        out = launch_pad(x.permute(order), inner, mode, value)
        return out.permute([order.index(d) for d in range(x.dim())])
    shape, strides = list(x.shape), list(x.stride())
    left = [0] * x.dim()
    out_shape = list(shape)
    for i in range(k):  # pad[2i], pad[2i+1] pad dim -1-i
        d = x.dim() - 1 - i
        left[d] = pad[2 * i]
        out_shape[d] = shape[d] + pad[2 * i] + pad[2 * i + 1]
        if mode == "reflect" and (pad[2 * i] >= shape[d] or pad[2 * i + 1] >= shape[d]):
            raise ValueError("reflect padding must be smaller than the padded dim")
    if x.dim() > 5:
        # dims before the padded ones are plain copies: one dim when they merge as a view
        lead = x.dim() - 5 + 1
        x = x.flatten(0, lead - 1)
        shape, strides = list(x.shape), list(x.stride())
        left = [0] + left[lead:]
        keep = out_shape[lead:]
        out_full = list(out_shape)
        out_shape = [shape[0], *keep]
    else:
        out_full = list(out_shape)
    pre = 5 - len(shape)
    shape, strides = [1] * pre + shape, [0] * pre + strides
    left, out5 = [0] * pre + left, [1] * pre + out_shape
    out = torch.empty(out_full, device=x.device, dtype=x.dtype)
    n = out.numel()
    if n:
        pad_kernel[(triton.cdiv(n, 1024),)](
            x, out, n,
            out5[1], out5[2], out5[3], out5[4],
            shape[0], shape[1], shape[2], shape[3], shape[4],
            left[0], left[1], left[2], left[3], left[4],
            strides[0], strides[1], strides[2], strides[3], strides[4],
            float(value),
            MODE=modes[mode],
            BLOCK=1024,
        )  # fmt: skip
    return out
