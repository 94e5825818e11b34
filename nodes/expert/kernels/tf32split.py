"""3xTF32 with operands split once, before the GEMM: each fp32 operand becomes a TF32 "high" part
(rounded to TF32's 10-bit mantissa) and the fp32 remainder ("low"), both written K-major and
zero-padded along K. The GEMM then runs three plain TF32 dots (lo*hi, hi*lo, hi*hi) whose
operands stream straight from memory into the tensor cores' shared-memory layout, instead of
splitting every loaded tile in registers and writing it back to shared memory in the K loop."""

import torch
import triton
import triton.language as tl


@triton.jit
def tf32_round(x):
    # fp32 x rounded to nearest on the 13 mantissa bits TF32 drops (ties away from zero, as
    # cvt.rna does; inf stays inf, NaN stays NaN). Tensor cores fed fp32 truncate instead: a bias
    # towards zero of about 2**-11 per operand, that the reference's round-to-nearest TF32 has not.
    r = ((x.to(tl.int32, bitcast=True) + 0x1000) & -8192).to(tl.float32, bitcast=True)
    return tl.where(x == x, r, x)


@triton.jit
def tf32_split_kernel(
    src_ptr, hi_ptr, lo_ptr, rows, K, kp, s_b, s_r, s_k, BLOCK_R: tl.constexpr, BLOCK_K: tl.constexpr
):
    # src is (batch, rows, K) through its strides; hi/lo are contiguous (batch, rows, kp)
    rr = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    rk = tl.program_id(1) * BLOCK_K + tl.arange(0, BLOCK_K)
    b = tl.program_id(2).to(tl.int64)
    m = (rr < rows)[:, None] & (rk < K)[None, :]
    x = tl.load(src_ptr + b * s_b + rr[:, None].to(tl.int64) * s_r + rk[None, :] * s_k, mask=m, other=0.0)
    x = x.to(tl.float32)
    # round to nearest on the 13 mantissa bits TF32 drops (ties away from zero, as cvt.rna does)
    bits = x.to(tl.int32, bitcast=True)
    hi = ((bits + 0x1000) & -8192).to(tl.float32, bitcast=True)
    hi = tl.where(x == x, hi, x)  # NaN stays NaN
    lo = tl.where(tl.abs(hi) < float("inf"), x - hi, 0.0)  # inf and NaN: all in hi
    out = b * rows * kp + rr[:, None].to(tl.int64) * kp + rk[None, :]
    om = (rr < rows)[:, None] & (rk < kp)[None, :]
    tl.store(hi_ptr + out, hi, mask=om)
    tl.store(lo_ptr + out, lo, mask=om)


def _tf32_split(t, kd, K, kp):
    """3-D fp32 operand `t` with K along dim `kd` (1 or 2): (hi, lo) views of the same shape as
    `t` over K-major buffers of K padded to kp. A broadcast batch (stride 0) is split once."""
    ld = 3 - kd
    bcast = t.shape[0] > 1 and t.stride(0) == 0
    src = t[:1] if bcast else t
    nb, rows = src.shape[0], t.shape[ld]
    hi = torch.empty((nb, rows, kp), device=t.device, dtype=torch.float32)
    lo = torch.empty_like(hi)
    grid = (triton.cdiv(rows, 64), triton.cdiv(kp, 64), nb)
    tf32_split_kernel[grid](
        src, hi, lo, rows, K, kp, src.stride(0), src.stride(ld), src.stride(kd), BLOCK_R=64, BLOCK_K=64
    )
    if kd == 1:
        hi, lo = hi.transpose(1, 2), lo.transpose(1, 2)
    if bcast:
        hi = hi.expand(t.shape[0], hi.shape[1], hi.shape[2])
        lo = lo.expand(t.shape[0], lo.shape[1], lo.shape[2])
    return hi, lo
