"""EGG expert: 2 kernel groups.

g0: batchnorm/library-conv+bn-stats+fused-epilogue (conv2d, batch_norm, relu)
g1: batchnorm/library-conv+bn-stats+fused-epilogue (conv2d, batch_norm, relu)
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def g0_bn_partial_kernel(x_ptr, part_ptr, C, HW, total, chunk, SPLIT: tl.constexpr, BLOCK: tl.constexpr):
    c = tl.program_id(0).to(tl.int64)
    s = tl.program_id(1)
    shift = tl.load(x_ptr + c * HW).to(tl.float32)
    acc1 = tl.zeros([BLOCK], dtype=tl.float32)
    acc2 = tl.zeros([BLOCK], dtype=tl.float32)
    lo = s * chunk
    hi = tl.minimum(total, lo + chunk)
    for start in range(lo, hi, BLOCK):
        j = start + tl.arange(0, BLOCK)
        mask = j < hi
        n = j // HW
        addr = n.to(tl.int64) * C * HW + c * HW + (j - n * HW)
        d = tl.where(mask, tl.load(x_ptr + addr, mask=mask, other=0.0).to(tl.float32) - shift, 0.0)
        acc1 += d
        acc2 += d * d
    tl.store(part_ptr + (c * SPLIT + s) * 2, tl.sum(acc1, 0))
    tl.store(part_ptr + (c * SPLIT + s) * 2 + 1, tl.sum(acc2, 0))


@triton.jit
def g0_bn_finalize_kernel(x_ptr, part_ptr, mean_ptr, rstd_ptr, HW, total, eps, SPLIT: tl.constexpr):
    c = tl.program_id(0).to(tl.int64)
    k = tl.arange(0, SPLIT)
    s1 = tl.sum(tl.load(part_ptr + (c * SPLIT + k) * 2), 0)
    s2 = tl.sum(tl.load(part_ptr + (c * SPLIT + k) * 2 + 1), 0)
    shift = tl.load(x_ptr + c * HW).to(tl.float32)
    m = s1 / total
    var = tl.maximum(s2 / total - m * m, 0.0)
    tl.store(mean_ptr + c, shift + m)
    tl.store(rstd_ptr + c, 1.0 / tl.sqrt(var + eps))


@triton.jit
def g0_bn_running_kernel(rm_ptr, rv_ptr, cb_ptr, mean_ptr, rstd_ptr, C, eps, HAS_CB: tl.constexpr,
                      BLOCK: tl.constexpr):
    c = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = c < C
    rm = tl.load(rm_ptr + c, mask=mask, other=0.0).to(tl.float32)
    if HAS_CB:  # the input came without the conv's bias: (x + b) - rm == x - (rm - b)
        rm = rm - tl.load(cb_ptr + c, mask=mask, other=0.0).to(tl.float32)
    rv = tl.load(rv_ptr + c, mask=mask, other=1.0).to(tl.float32)
    tl.store(mean_ptr + c, rm, mask=mask)
    tl.store(rstd_ptr + c, 1.0 / tl.sqrt(rv + eps), mask=mask)


@triton.jit
def g0_bn_apply_kernel(out_ptr, l_bn_x_ptr, l_bn_x_inner, l_bn_x_size, l_bn_mean_ptr, l_bn_mean_inner, l_bn_mean_size, l_bn_rstd_ptr, l_bn_rstd_inner, l_bn_rstd_size, l_bn_w_ptr, l_bn_w_inner, l_bn_w_size, l_bn_b_ptr, l_bn_b_inner, l_bn_b_size, n_elements, l_bn_x_MODE: tl.constexpr, l_bn_mean_MODE: tl.constexpr, l_bn_rstd_MODE: tl.constexpr, l_bn_w_MODE: tl.constexpr, l_bn_b_MODE: tl.constexpr, BLOCK: tl.constexpr):
    start = tl.program_id(0).to(tl.int64) * BLOCK
    offs = start + tl.arange(0, BLOCK)
    if start + BLOCK <= n_elements:
        if l_bn_x_MODE == 1:
            x_bn_x = tl.load(l_bn_x_ptr).to(tl.float32)
        elif l_bn_x_MODE == 2:
            x_bn_x = tl.load(l_bn_x_ptr + (offs // l_bn_x_inner) % l_bn_x_size).to(tl.float32)
        elif l_bn_x_MODE == 3:
            x_bn_x = tl.load(l_bn_x_ptr + (offs // l_bn_x_inner) * l_bn_x_size + offs % l_bn_x_inner).to(tl.float32)
        else:
            x_bn_x = tl.load(l_bn_x_ptr + offs).to(tl.float32)
        if l_bn_mean_MODE == 1:
            x_bn_mean = tl.load(l_bn_mean_ptr).to(tl.float32)
        elif l_bn_mean_MODE == 2:
            x_bn_mean = tl.load(l_bn_mean_ptr + (offs // l_bn_mean_inner) % l_bn_mean_size).to(tl.float32)
        elif l_bn_mean_MODE == 3:
            x_bn_mean = tl.load(l_bn_mean_ptr + (offs // l_bn_mean_inner) * l_bn_mean_size + offs % l_bn_mean_inner).to(tl.float32)
        else:
            x_bn_mean = tl.load(l_bn_mean_ptr + offs).to(tl.float32)
        if l_bn_rstd_MODE == 1:
            x_bn_rstd = tl.load(l_bn_rstd_ptr).to(tl.float32)
        elif l_bn_rstd_MODE == 2:
            x_bn_rstd = tl.load(l_bn_rstd_ptr + (offs // l_bn_rstd_inner) % l_bn_rstd_size).to(tl.float32)
        elif l_bn_rstd_MODE == 3:
            x_bn_rstd = tl.load(l_bn_rstd_ptr + (offs // l_bn_rstd_inner) * l_bn_rstd_size + offs % l_bn_rstd_inner).to(tl.float32)
        else:
            x_bn_rstd = tl.load(l_bn_rstd_ptr + offs).to(tl.float32)
        if l_bn_w_MODE == 1:
            x_bn_w = tl.load(l_bn_w_ptr).to(tl.float32)
        elif l_bn_w_MODE == 2:
            x_bn_w = tl.load(l_bn_w_ptr + (offs // l_bn_w_inner) % l_bn_w_size).to(tl.float32)
        elif l_bn_w_MODE == 3:
            x_bn_w = tl.load(l_bn_w_ptr + (offs // l_bn_w_inner) * l_bn_w_size + offs % l_bn_w_inner).to(tl.float32)
        else:
            x_bn_w = tl.load(l_bn_w_ptr + offs).to(tl.float32)
        if l_bn_b_MODE == 1:
            x_bn_b = tl.load(l_bn_b_ptr).to(tl.float32)
        elif l_bn_b_MODE == 2:
            x_bn_b = tl.load(l_bn_b_ptr + (offs // l_bn_b_inner) % l_bn_b_size).to(tl.float32)
        elif l_bn_b_MODE == 3:
            x_bn_b = tl.load(l_bn_b_ptr + (offs // l_bn_b_inner) * l_bn_b_size + offs % l_bn_b_inner).to(tl.float32)
        else:
            x_bn_b = tl.load(l_bn_b_ptr + offs).to(tl.float32)
        v_n1_c = x_bn_x - x_bn_mean
        v_n1_n = v_n1_c * x_bn_rstd
        v_n1_w = v_n1_n * x_bn_w
        v_n1 = v_n1_w + x_bn_b
        v_n2 = tl.maximum(v_n1, 0.0)
        tl.store(out_ptr + offs, v_n2.to(out_ptr.dtype.element_ty))
    else:
        mask = offs < n_elements
        if l_bn_x_MODE == 1:
            x_bn_x = tl.load(l_bn_x_ptr).to(tl.float32)
        elif l_bn_x_MODE == 2:
            x_bn_x = tl.load(l_bn_x_ptr + (offs // l_bn_x_inner) % l_bn_x_size, mask=mask, other=0.0).to(tl.float32)
        elif l_bn_x_MODE == 3:
            x_bn_x = tl.load(l_bn_x_ptr + (offs // l_bn_x_inner) * l_bn_x_size + offs % l_bn_x_inner, mask=mask, other=0.0).to(tl.float32)
        else:
            x_bn_x = tl.load(l_bn_x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
        if l_bn_mean_MODE == 1:
            x_bn_mean = tl.load(l_bn_mean_ptr).to(tl.float32)
        elif l_bn_mean_MODE == 2:
            x_bn_mean = tl.load(l_bn_mean_ptr + (offs // l_bn_mean_inner) % l_bn_mean_size, mask=mask, other=0.0).to(tl.float32)
        elif l_bn_mean_MODE == 3:
            x_bn_mean = tl.load(l_bn_mean_ptr + (offs // l_bn_mean_inner) * l_bn_mean_size + offs % l_bn_mean_inner, mask=mask, other=0.0).to(tl.float32)
        else:
            x_bn_mean = tl.load(l_bn_mean_ptr + offs, mask=mask, other=0.0).to(tl.float32)
        if l_bn_rstd_MODE == 1:
            x_bn_rstd = tl.load(l_bn_rstd_ptr).to(tl.float32)
        elif l_bn_rstd_MODE == 2:
            x_bn_rstd = tl.load(l_bn_rstd_ptr + (offs // l_bn_rstd_inner) % l_bn_rstd_size, mask=mask, other=0.0).to(tl.float32)
        elif l_bn_rstd_MODE == 3:
            x_bn_rstd = tl.load(l_bn_rstd_ptr + (offs // l_bn_rstd_inner) * l_bn_rstd_size + offs % l_bn_rstd_inner, mask=mask, other=0.0).to(tl.float32)
        else:
            x_bn_rstd = tl.load(l_bn_rstd_ptr + offs, mask=mask, other=0.0).to(tl.float32)
        if l_bn_w_MODE == 1:
            x_bn_w = tl.load(l_bn_w_ptr).to(tl.float32)
        elif l_bn_w_MODE == 2:
            x_bn_w = tl.load(l_bn_w_ptr + (offs // l_bn_w_inner) % l_bn_w_size, mask=mask, other=0.0).to(tl.float32)
        elif l_bn_w_MODE == 3:
            x_bn_w = tl.load(l_bn_w_ptr + (offs // l_bn_w_inner) * l_bn_w_size + offs % l_bn_w_inner, mask=mask, other=0.0).to(tl.float32)
        else:
            x_bn_w = tl.load(l_bn_w_ptr + offs, mask=mask, other=0.0).to(tl.float32)
        if l_bn_b_MODE == 1:
            x_bn_b = tl.load(l_bn_b_ptr).to(tl.float32)
        elif l_bn_b_MODE == 2:
            x_bn_b = tl.load(l_bn_b_ptr + (offs // l_bn_b_inner) % l_bn_b_size, mask=mask, other=0.0).to(tl.float32)
        elif l_bn_b_MODE == 3:
            x_bn_b = tl.load(l_bn_b_ptr + (offs // l_bn_b_inner) * l_bn_b_size + offs % l_bn_b_inner, mask=mask, other=0.0).to(tl.float32)
        else:
            x_bn_b = tl.load(l_bn_b_ptr + offs, mask=mask, other=0.0).to(tl.float32)
        v_n1_c = x_bn_x - x_bn_mean
        v_n1_n = v_n1_c * x_bn_rstd
        v_n1_w = v_n1_n * x_bn_w
        v_n1 = v_n1_w + x_bn_b
        v_n2 = tl.maximum(v_n1, 0.0)
        tl.store(out_ptr + offs, v_n2.to(out_ptr.dtype.element_ty), mask=mask)


def _host_cdiv(x, div):
    """triton.cdiv: the same formula, (x + div - 1) // div."""
    return (x + div - 1) // div



def _host_broadcast(*shapes):
    """torch.broadcast_shapes over shapes (tuples of ints): NumPy's rule in plain Python."""
    first = shapes[0]
    if all(s == first for s in shapes[1:]):
        return torch.Size(first)
    nd = max(len(s) for s in shapes)
    out = [1] * nd
    for s in shapes:
        for i, d in enumerate(s, nd - len(s)):
            if d != 1:
                if out[i] != 1 and out[i] != d:
                    raise RuntimeError(f"shapes {[tuple(x) for x in shapes]} do not broadcast")
                out[i] = d
    return torch.Size(out)



def g0_launch_bn_running(x, rm, rv, eps, cb=None):
    """Per-channel running mean (less the conv bias `cb` left out of x) and
    1/sqrt(running_var + eps), shaped (C, 1, ..., 1)."""
    C = x.shape[1]
    if rm.numel() != C or rv.numel() != C:
        raise ValueError("running statistics do not match the channel count")
    mean = torch.empty((C,), device=x.device, dtype=torch.float32)
    rstd = torch.empty((C,), device=x.device, dtype=torch.float32)
    g0_bn_running_kernel[(_host_cdiv(C, 256),)](rm.contiguous(), rv.contiguous(),
                                               rm if cb is None else cb.contiguous(), mean, rstd, C, eps,
                                               HAS_CB=cb is not None, BLOCK=256, num_warps=4)
    view_shape = (C,) + (1,) * (x.dim() - 2)
    return mean.view(view_shape), rstd.view(view_shape)


def g0_launch_bn_stats(x, eps):
    """Per-channel mean and 1/sqrt(var + eps) over (N, *spatial), shaped (C, 1, ..., 1)."""
    N, C = x.shape[0], x.shape[1]
    HW = x.numel() // (N * C) if N * C else 0
    total = N * HW
    if total == 0:
        raise ValueError("batch_norm over an empty batch")
    split = 1
    while split < 64 and split * 2 * C <= 1024 and total // (split * 2) >= 4096:
        split *= 2
    chunk = _host_cdiv(_host_cdiv(total, split), 1024) * 1024
    part = torch.empty((C, split, 2), device=x.device, dtype=torch.float32)
    g0_bn_partial_kernel[(C, split)](x, part, C, HW, total, chunk, SPLIT=split, BLOCK=1024, num_warps=4)
    mean = torch.empty((C,), device=x.device, dtype=torch.float32)
    rstd = torch.empty((C,), device=x.device, dtype=torch.float32)
    g0_bn_finalize_kernel[(C,)](x, part, mean, rstd, HW, total, eps, SPLIT=split, num_warps=1)
    view_shape = (C,) + (1,) * (x.dim() - 2)
    return mean.view(view_shape), rstd.view(view_shape)


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


def g0_launch_bn_apply_kernel(l_bn_x, l_bn_mean, l_bn_rstd, l_bn_w, l_bn_b):
    shape = _host_broadcast(l_bn_x.shape, l_bn_mean.shape, l_bn_rstd.shape, l_bn_w.shape, l_bn_b.shape,)
    out = torch.empty(shape, device=l_bn_x.device, dtype=l_bn_x.dtype)
    n = out.numel()
    if n == 0:
        return out
    l_bn_x_c, l_bn_x_mode, l_bn_x_inner, l_bn_x_size = _bcast(l_bn_x, shape)
    l_bn_mean_c, l_bn_mean_mode, l_bn_mean_inner, l_bn_mean_size = _bcast(l_bn_mean, shape)
    l_bn_rstd_c, l_bn_rstd_mode, l_bn_rstd_inner, l_bn_rstd_size = _bcast(l_bn_rstd, shape)
    l_bn_w_c, l_bn_w_mode, l_bn_w_inner, l_bn_w_size = _bcast(l_bn_w, shape)
    l_bn_b_c, l_bn_b_mode, l_bn_b_inner, l_bn_b_size = _bcast(l_bn_b, shape)
    grid = (_host_cdiv(n, 2048),)
    g0_bn_apply_kernel[grid](out, l_bn_x_c, l_bn_x_inner, l_bn_x_size, l_bn_mean_c, l_bn_mean_inner, l_bn_mean_size, l_bn_rstd_c, l_bn_rstd_inner, l_bn_rstd_size, l_bn_w_c, l_bn_w_inner, l_bn_w_size, l_bn_b_c, l_bn_b_inner, l_bn_b_size, n, l_bn_x_MODE=l_bn_x_mode, l_bn_mean_MODE=l_bn_mean_mode, l_bn_rstd_MODE=l_bn_rstd_mode, l_bn_w_MODE=l_bn_w_mode, l_bn_b_MODE=l_bn_b_mode, BLOCK=2048, num_warps=8)
    return out


class ModelNew(nn.Module):
    def __init__(self, c_in: int, c_out: int):
        super().__init__()
        self.dw = nn.Conv2d(c_in, c_in, 3, padding=1, groups=c_in, bias=False)
        self.bn1 = nn.BatchNorm2d(c_in)
        self.pw = nn.Conv2d(c_in, c_out, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(c_out)

    def forward(self, x):
        x_bn = self.dw(x).contiguous()
        if self.bn1.training or self.bn1.running_mean is None:
            mean_v, rstd_v = g0_launch_bn_stats(x_bn, float(self.bn1.eps))
        else:
            mean_v, rstd_v = g0_launch_bn_running(x_bn, self.bn1.running_mean, self.bn1.running_var, float(self.bn1.eps), None)
        w_v = self.bn1.weight.view(mean_v.shape)
        b_v = self.bn1.bias.view(mean_v.shape)
        v_relu = g0_launch_bn_apply_kernel(x_bn, mean_v, rstd_v, w_v, b_v)
        x_bn = self.pw(v_relu).contiguous()
        if self.bn2.training or self.bn2.running_mean is None:
            mean_v, rstd_v = g0_launch_bn_stats(x_bn, float(self.bn2.eps))
        else:
            mean_v, rstd_v = g0_launch_bn_running(x_bn, self.bn2.running_mean, self.bn2.running_var, float(self.bn2.eps), None)
        w_v = self.bn2.weight.view(mean_v.shape)
        b_v = self.bn2.bias.view(mean_v.shape)
        v_relu_1 = g0_launch_bn_apply_kernel(x_bn, mean_v, rstd_v, w_v, b_v)
        return v_relu_1
