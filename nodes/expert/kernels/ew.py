"""Elementwise helpers shared by every fused chain (fp32 math on loaded values), and the host
helper that reads broadcast operands of an elementwise kernel in place."""

import triton
import triton.language as tl


@triton.jit
def _ew_tanh(x):
    # tanh through exp: Triton has no tl.tanh on every backend (the interpreter included).
    # t = exp(-2|x|) keeps the exponent non-positive, so nothing overflows.
    t = tl.exp(-2.0 * tl.abs(x))
    y = (1.0 - t) / (1.0 + t)
    return tl.where(x < 0.0, -y, y)


@triton.jit
def _ew_softplus(x, beta, threshold):
    bx = x * beta
    # log(1 + e^bx) written as max(bx, 0) + log(1 + e^-|bx|): exact for both tails.
    sp = (tl.maximum(bx, 0.0) + tl.log(1.0 + tl.exp(-tl.abs(bx)))) / beta
    return tl.where(bx > threshold, x, sp)


def _bcast(t, shape):
    """(tensor, mode, inner, size): mode 0 = same shape, contiguous; 1 = one element; 2 = block
    (the operand's varying dims are one contiguous block of the output's dims); 3 = same shape
    in rows: contiguous rows of `inner` elements, `size` elements apart (a chunk or slice along
    the last dim, as an LSTM's gates.chunk(4, 1)), read in place instead of copied first."""
    n = 1
    for s in shape:
        n *= s
    if t.numel() == 1:
        return t.reshape(1), 1, 1, 1
    if tuple(t.shape) == tuple(shape):
        if t.is_contiguous():
            return t, 0, 1, n
        st, sh = t.stride(), t.shape
        rows = t.dim() >= 2 and st[-1] == 1 and sh[-1] > 1
        for i in range(t.dim() - 2):
            # the leading dims fold into one row index (size-1 dims have any stride)
            rows = rows and (sh[i] == 1 or st[i] == st[i + 1] * sh[i + 1])
        if rows:
            return t, 3, sh[-1], st[-2]
        return t.contiguous(), 0, 1, n
    dims = [1] * (len(shape) - t.dim()) + list(t.shape)
    if len(dims) != len(shape):
        raise ValueError(f"operand of shape {tuple(t.shape)} does not broadcast to {tuple(shape)}")
    nz = [i for i, d in enumerate(dims) if d != 1]
    lo, hi = nz[0], nz[-1]
    for i in range(lo, hi + 1):
        if dims[i] != shape[i]:
            # Broadcast over dims between the varying ones (e.g. (B, 1, K) to (B, D, K)): a
            # materialised copy read like a same-shape operand.
            return t.expand(tuple(shape)).contiguous(), 0, 1, n
    inner = 1
    for s in shape[hi + 1 :]:
        inner *= s
    size = 1
    for s in shape[lo : hi + 1]:
        size *= s
    return t.contiguous(), 2, inner, size
