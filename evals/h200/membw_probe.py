"""Which Triton kernel shapes and launch parameters reach the HBM roof (4300 GB/s on the H200) for
four memory-bound fp32 patterns, against eager PyTorch and torch.compile timed in the same run.

    python3 -m evals.h200.membw_probe [--sections floors,bn,outer,pool] [--scale 1.0] [--budget 220]

Sections (full size):
  floors  1<<30 fp32 (4 GiB): torch copy_, fill_, sum and a trivial Triton copy (BLOCK, num_warps)
  bn      eval batch norm folded to y = x * s[c] + t[c] on (64, 64, 512, 512): a 2-D grid per row,
          a looped grid (row, SPLIT), a flat 1-D grid; against F.batch_norm eager and compiled
  outer   A (32768, 32) @ B (32, 32768) -> C fp32 (store-bound): tiled kernels with tl.dot ieee,
          tl.dot tf32x3 or an explicit FMA outer product; several tiles per program; swapped
          program order; against torch.mm (TF32 off) eager and compiled
  pool    max_pool2d(k=4, s=1, p=1) on (32, 64, 512, 512): row-tile kernels (4 shifted loads per
          input row, a [BLOCK_W, 4] 2-D load, or one aligned load + tl.gather)
  lnrow   LayerNorm over (64, 256, 256) a sample, batch 16, weight and bias: chunk partials then
          an output pass in 2 launches, against one ticket-ordered launch (a row's output programs
          right after its partial programs: the re-read hits L2), CH elements a chunk
  smrow   softmax over rows of 393216, 4096 rows: one program a row (online), or ticket-ordered

GB/s = ideal bytes (every input read once, every output written once) / median time of
triton.testing.do_bench (which flushes L2 between reps). Every Triton variant is checked once
against the torch reference before it is timed; a wrong one is reported as WRONG, untimed. Each
section gets a fair share of --budget seconds (unused time rolls over); what does not fit is
printed as skipped. --scale (<= 1) shrinks the batch dimension (outer: M and N, at least 64).

CPU check of every variant under the Triton interpreter (tiny shapes, perf_counter timing, no
torch.compile; --device cpu implies --small, which shrinks C, H, W and sets no budget):
    TRITON_INTERPRET=1 .venv/bin/python -m evals.h200.membw_probe --scale 0.001 --device cpu
"""

from __future__ import annotations

import argparse
import gc
import math
import os
import time

import torch
import torch.nn.functional as F
import triton
import triton.language as tl
import triton.testing

ROOF_GBS = 4300.0
NAN = float("nan")
DEV = "cuda"  # set by main(); "cpu" runs the kernels under the Triton interpreter


# ----------------------------------------------------------------------------------------- kernels
@triton.jit
def copy_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=mask), mask=mask)


@triton.jit
def bn_rows_kernel(x_ptr, y_ptr, s_ptr, t_ptr, C, HW, BHW: tl.constexpr):
    # grid (N*C rows, cdiv(HW, BHW)): the channel's scale and shift are two scalar loads per program
    row = tl.program_id(0)
    s = tl.load(s_ptr + row % C)
    t = tl.load(t_ptr + row % C)
    base = row.to(tl.int64) * HW
    offs = tl.program_id(1) * BHW + tl.arange(0, BHW)
    mask = offs < HW
    x = tl.load(x_ptr + base + offs, mask=mask)
    tl.store(y_ptr + base + offs, x * s + t, mask=mask)


@triton.jit
def bn_loop_kernel(x_ptr, y_ptr, s_ptr, t_ptr, C, HW, PART, BHW: tl.constexpr):
    # grid (N*C rows, SPLIT): each program loops over PART (a multiple of BHW) elements of its row
    row = tl.program_id(0)
    s = tl.load(s_ptr + row % C)
    t = tl.load(t_ptr + row % C)
    base = row.to(tl.int64) * HW
    start = tl.program_id(1) * PART
    end = tl.minimum(start + PART, HW)
    for o in range(start, end, BHW):
        offs = o + tl.arange(0, BHW)
        mask = offs < end
        x = tl.load(x_ptr + base + offs, mask=mask)
        tl.store(y_ptr + base + offs, x * s + t, mask=mask)


@triton.jit
def bn_flat_kernel(x_ptr, y_ptr, s_ptr, t_ptr, C, HW, n, BLOCK: tl.constexpr):
    # 1-D grid over all elements; the channel is computed (and s, t gathered) per element
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    c = (offs // HW) % C
    x = tl.load(x_ptr + offs, mask=mask)
    y = x * tl.load(s_ptr + c, mask=mask) + tl.load(t_ptr + c, mask=mask)
    tl.store(y_ptr + offs, y, mask=mask)


@triton.jit
def outer_kernel(
    a_ptr, b_ptr, c_ptr, M, N, sam, sak, sbk, sbn,
    K: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr, TILES: tl.constexpr, SWAP: tl.constexpr, PREC: tl.constexpr,
):  # fmt: skip
    # One program writes TILES consecutive (BM, BN) tiles of one row of tiles; K is done in one step.
    # PREC: "ieee" / "tf32x3" (tl.dot) or "fma" (explicit outer-product FMAs over k).
    # SWAP: consecutive program ids walk down M instead of along N.
    pid = tl.program_id(0)
    m_tiles = tl.cdiv(M, BM)
    groups = tl.cdiv(tl.cdiv(N, BN), TILES)
    if SWAP:
        pid_m = pid % m_tiles
        pid_g = pid // m_tiles
    else:
        pid_m = pid // groups
        pid_g = pid % groups
    rm = pid_m * BM + tl.arange(0, BM)
    m_ok = rm < M
    rk = tl.arange(0, K)
    c_tile = c_ptr + (pid_m * BM).to(tl.int64) * N  # int64 tile base, int32 offsets inside it
    if PREC != "fma":  # the A tile is loaded once for all TILES tiles
        a = tl.load(a_ptr + rm[:, None] * sam + rk[None, :] * sak, mask=m_ok[:, None], other=0.0)
    for t in range(TILES):
        rn = (pid_g * TILES + t) * BN + tl.arange(0, BN)
        n_ok = rn < N
        if PREC == "fma":
            acc = tl.zeros([BM, BN], dtype=tl.float32)
            for k in tl.static_range(K):
                ak = tl.load(a_ptr + rm * sam + k * sak, mask=m_ok, other=0.0)
                bk = tl.load(b_ptr + k * sbk + rn * sbn, mask=n_ok, other=0.0)
                ak2, bk2 = tl.broadcast(ak[:, None], bk[None, :])  # tl.fma does not broadcast
                acc = tl.fma(ak2, bk2, acc)
        else:
            b = tl.load(b_ptr + rk[:, None] * sbk + rn[None, :] * sbn, mask=n_ok[None, :], other=0.0)
            acc = tl.dot(a, b, input_precision=PREC)
        offs = tl.arange(0, BM)[:, None] * N + rn[None, :]
        tl.store(c_tile + offs, acc, mask=m_ok[:, None] & n_ok[None, :])


@triton.jit
def _row_max4(row_ptr, ow, col0, W, row_ok, BLOCK_W: tl.constexpr, LOAD: tl.constexpr, SEG: tl.constexpr):
    # Max of one input row over the 4-wide windows starting at columns ow - 1 (padding = -inf).
    if LOAD == "shift":  # 4 shifted masked loads (L1 serves the overlap)
        m = tl.full([BLOCK_W], float("-inf"), tl.float32)
        for kw in tl.static_range(4):
            iw = ow - 1 + kw
            v = tl.load(row_ptr + iw, mask=row_ok & (iw >= 0) & (iw < W), other=float("-inf"))
            m = tl.maximum(m, v)
    elif LOAD == "2d":  # one [BLOCK_W, 4] load of all windows, reduced along the window
        iw = ow[:, None] - 1 + tl.arange(0, 4)[None, :]
        v = tl.load(row_ptr + iw, mask=row_ok & (iw >= 0) & (iw < W), other=float("-inf"))
        m = tl.max(v, axis=1)
    else:  # "gather": one aligned load of columns [col0 - 4, col0 + BLOCK_W + 2), windows by tl.gather
        j = tl.arange(0, SEG)
        iw = col0 - 4 + j
        mask = row_ok & (j < BLOCK_W + 6) & (iw >= 0) & (iw < W)
        seg = tl.load(row_ptr + iw, mask=mask, other=float("-inf"))
        jw = tl.arange(0, BLOCK_W) + 3  # segment index of column ow - 1
        m01 = tl.maximum(tl.gather(seg, jw, 0), tl.gather(seg, jw + 1, 0))
        m = tl.maximum(m01, tl.maximum(tl.gather(seg, jw + 2, 0), tl.gather(seg, jw + 3, 0)))
    return m


@triton.jit
def pool_kernel(
    x_ptr, y_ptr, H, W, OH, OW, ROWS: tl.constexpr, BLOCK_W: tl.constexpr, LOAD: tl.constexpr, SEG: tl.constexpr
):  # fmt: skip
    # grid (planes, cdiv(OH, ROWS), cdiv(OW, BLOCK_W)); kernel 4, stride 1, padding 1.
    # Streams ROWS + 3 input rows, each loaded once per program; keeps the last 3 row maxima.
    plane = tl.program_id(0).to(tl.int64)
    oh0 = tl.program_id(1) * ROWS
    col0 = tl.program_id(2) * BLOCK_W
    ow = col0 + tl.arange(0, BLOCK_W)
    x_plane = x_ptr + plane * H * W
    y_plane = y_ptr + plane * OH * OW
    r0 = tl.full([BLOCK_W], float("-inf"), tl.float32)
    r1 = r0
    r2 = r0
    for i in tl.static_range(ROWS + 3):
        ih = oh0 - 1 + i
        cur = _row_max4(x_plane + ih * W, ow, col0, W, (ih >= 0) & (ih < H), BLOCK_W, LOAD, SEG)
        if i >= 3:  # output row oh0 + i - 3 covers input rows ih - 3 .. ih
            oh = oh0 + i - 3
            out = tl.maximum(tl.maximum(r0, r1), tl.maximum(r2, cur))
            tl.store(y_plane + oh * OW + ow, out, mask=(ow < OW) & (oh < OH))
        r0 = r1
        r1 = r2
        r2 = cur


# Long rows (a LayerNorm over 4M elements a row, a softmax over 393216): the row split over many
# programs. "2 launches": chunk partials, then every chunk re-reads the row from HBM to write it.
# "ordered": one launch whose programs take tickets from a counter (so a program only ever waits
# for programs that already run: no deadlock whatever the hardware's dispatch order) and map them
# row by row, the row's partial programs first, then its output programs, which wait until the
# row's partial count is complete; the output pass's re-read of a chunk then finds it in L2.
@triton.jit
def _chunk_moments(xp, lo, hi, BLOCK: tl.constexpr):
    # sum and sum of squared deviations of xp[lo:hi], shifted by the first tile's mean
    cols = lo + tl.arange(0, BLOCK)
    m = cols < hi
    x = tl.load(xp + cols, mask=m, other=0.0)
    c = tl.sum(x, 0) / tl.minimum(hi - lo, BLOCK).to(tl.float32)
    a1 = tl.zeros([BLOCK], dtype=tl.float32)
    a2 = tl.zeros([BLOCK], dtype=tl.float32)
    for o in range(lo, hi, BLOCK):
        cols = o + tl.arange(0, BLOCK)
        m = cols < hi
        d = tl.where(m, tl.load(xp + cols, mask=m, other=0.0) - c, 0.0)
        a1 += d
        a2 += d * d
    n = (hi - lo).to(tl.float32)
    s1 = tl.sum(a1, 0)
    s2 = tl.sum(a2, 0)
    return s1 + n * c, tl.maximum(s2 - s1 * s1 / n, 0.0)


@triton.jit
def _row_mean_rstd(ws_ptr, row, R, NSPLIT, CH, eps, SPLIT_BLOCK: tl.constexpr):
    # Chan et al.: the chunks' (sum, M2) pairs folded into the row's mean and 1/std
    kk = tl.arange(0, SPLIT_BLOCK)
    km = kk < NSPLIT
    s = tl.load(ws_ptr + (row * NSPLIT + kk) * 2, mask=km, other=0.0, cache_modifier=".cg")
    m2 = tl.load(ws_ptr + (row * NSPLIT + kk) * 2 + 1, mask=km, other=0.0, cache_modifier=".cg")
    n_k = tl.where(km, tl.minimum(CH, R - kk * CH), 1).to(tl.float32)
    mean = tl.sum(s, 0) / R
    dm = s / n_k - mean
    var = tl.sum(tl.where(km, m2 + n_k * dm * dm, 0.0), 0) / R
    return mean, 1.0 / tl.sqrt(var + eps)


@triton.jit
def _ln_write(xp, wp, bp, yp, lo, hi, mean, rstd, BLOCK: tl.constexpr):
    for o in range(lo, hi, BLOCK):
        cols = o + tl.arange(0, BLOCK)
        m = cols < hi
        x = tl.load(xp + cols, mask=m, other=0.0)
        w = tl.load(wp + cols, mask=m, other=0.0)
        b = tl.load(bp + cols, mask=m, other=0.0)
        tl.store(yp + cols, (x - mean) * rstd * w + b, mask=m)


@triton.jit
def ln_part_kernel(x_ptr, ws_ptr, R, NSPLIT, CH, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    lo = tl.program_id(1) * CH
    s, m2 = _chunk_moments(x_ptr + row.to(tl.int64) * R, lo, tl.minimum(R, lo + CH), BLOCK)
    tl.store(ws_ptr + (row * NSPLIT + tl.program_id(1)) * 2, s)
    tl.store(ws_ptr + (row * NSPLIT + tl.program_id(1)) * 2 + 1, m2)


@triton.jit
def ln_out_kernel(
    x_ptr, w_ptr, b_ptr, y_ptr, ws_ptr, R, NSPLIT, CH, eps, SPLIT_BLOCK: tl.constexpr, BLOCK: tl.constexpr
):
    row = tl.program_id(0)
    mean, rstd = _row_mean_rstd(ws_ptr, row, R, NSPLIT, CH, eps, SPLIT_BLOCK)
    base = row.to(tl.int64) * R
    lo = tl.program_id(1) * CH
    _ln_write(x_ptr + base, w_ptr, b_ptr, y_ptr + base, lo, tl.minimum(R, lo + CH), mean, rstd, BLOCK)


@triton.jit
def _ticket(cnt_ptr, R, NSPLIT, CH, LAG: tl.constexpr = 0):
    """This program's (row, k, row offset, chunk lo, hi) from the ticket cnt_ptr[0]: k < NSPLIT a
    partial program, else an output program (chunk k - NSPLIT). LAG > 0: a block of tickets holds
    row b's partial programs and row b - LAG's output programs, so a row's output programs start
    LAG rows after its partials (less waiting); rows outside [0, n_rows) are the caller's to skip."""
    t = tl.atomic_add(cnt_ptr, 1)
    k = t % (2 * NSPLIT)
    row = t // (2 * NSPLIT) - tl.where(k < NSPLIT, 0, LAG)
    lo = (k % NSPLIT) * CH
    return row, k, row.to(tl.int64) * R, lo, tl.minimum(R, lo + CH)


@triton.jit
def _publish(ws_ptr, cnt_ptr, row, k, NSPLIT, a, b):
    """Store a chunk's two partials and count it in cnt_ptr[1 + row] (release)."""
    tl.store(ws_ptr + (row * NSPLIT + k) * 2, a)
    tl.store(ws_ptr + (row * NSPLIT + k) * 2 + 1, b)
    tl.debug_barrier()  # every thread's store before the release below
    tl.atomic_add(cnt_ptr + 1 + row, 1, sem="release")


@triton.jit
def _wait_count(cnt_ptr, n):
    c = tl.atomic_add(cnt_ptr, 0, sem="acquire")
    while c < n:
        c = tl.atomic_add(cnt_ptr, 0, sem="acquire")


@triton.jit
def ln_ordered_kernel(
    x_ptr,
    w_ptr,
    b_ptr,
    y_ptr,
    ws_ptr,
    cnt_ptr,
    R,
    NSPLIT,
    CH,
    eps,
    SPLIT_BLOCK: tl.constexpr,
    BLOCK: tl.constexpr,
):
    row, k, base, lo, hi = _ticket(cnt_ptr, R, NSPLIT, CH)
    if k < NSPLIT:
        s, m2 = _chunk_moments(x_ptr + base, lo, hi, BLOCK)
        _publish(ws_ptr, cnt_ptr, row, k, NSPLIT, s, m2)
    else:
        _wait_count(cnt_ptr + 1 + row, NSPLIT)
        mean, rstd = _row_mean_rstd(ws_ptr, row, R, NSPLIT, CH, eps, SPLIT_BLOCK)
        _ln_write(x_ptr + base, w_ptr, b_ptr, y_ptr + base, lo, hi, mean, rstd, BLOCK)


@triton.jit
def _chunk_maxsum(xp, lo, hi, BLOCK: tl.constexpr):
    # online max and sum of exp(x - max) over xp[lo:hi]
    mx = tl.full([BLOCK], float("-inf"), tl.float32)
    sm = tl.zeros([BLOCK], dtype=tl.float32)
    for o in range(lo, hi, BLOCK):
        cols = o + tl.arange(0, BLOCK)
        x = tl.load(xp + cols, mask=cols < hi, other=float("-inf"))
        nm = tl.maximum(mx, x)
        sm = sm * tl.exp(mx - nm) + tl.where(x == float("-inf"), 0.0, tl.exp(x - nm))
        sm = tl.where(nm == float("-inf"), 0.0, sm)
        mx = nm
    m = tl.max(mx, 0)
    return m, tl.sum(tl.where(mx == float("-inf"), 0.0, sm * tl.exp(mx - m)), 0)


@triton.jit
def _sm_write(xp, yp, lo, hi, m, inv, BLOCK: tl.constexpr):
    for o in range(lo, hi, BLOCK):
        cols = o + tl.arange(0, BLOCK)
        msk = cols < hi
        x = tl.load(xp + cols, mask=msk, other=0.0)
        tl.store(yp + cols, tl.exp(x - m) * inv, mask=msk)


@triton.jit
def _row_max_inv(ws_ptr, row, NSPLIT, SPLIT_BLOCK: tl.constexpr):
    kk = tl.arange(0, SPLIT_BLOCK)
    km = kk < NSPLIT
    pm = tl.load(ws_ptr + (row * NSPLIT + kk) * 2, mask=km, other=float("-inf"), cache_modifier=".cg")
    ps = tl.load(ws_ptr + (row * NSPLIT + kk) * 2 + 1, mask=km, other=0.0, cache_modifier=".cg")
    m = tl.max(pm, 0)
    return m, 1.0 / tl.sum(tl.where(km, ps * tl.exp(pm - m), 0.0), 0)


@triton.jit
def sm_online_row_kernel(x_ptr, y_ptr, R, BLOCK: tl.constexpr):
    # one program a row: online max/sum, then the write pass (the row re-read from HBM)
    base = tl.program_id(0).to(tl.int64) * R
    m, s = _chunk_maxsum(x_ptr + base, 0, R, BLOCK)
    _sm_write(x_ptr + base, y_ptr + base, 0, R, m, 1.0 / s, BLOCK)


@triton.jit
def sm_ordered_kernel(
    x_ptr,
    y_ptr,
    ws_ptr,
    cnt_ptr,
    n_rows,
    R,
    NSPLIT,
    CH,
    SPLIT_BLOCK: tl.constexpr,
    BLOCK: tl.constexpr,
    LAG: tl.constexpr,
):
    row, k, base, lo, hi = _ticket(cnt_ptr, R, NSPLIT, CH, LAG)
    if (row >= 0) & (row < n_rows):
        if k < NSPLIT:
            m, s = _chunk_maxsum(x_ptr + base, lo, hi, BLOCK)
            _publish(ws_ptr, cnt_ptr, row, k, NSPLIT, m, s)
        else:
            _wait_count(cnt_ptr + 1 + row, NSPLIT)
            m, inv = _row_max_inv(ws_ptr, row, NSPLIT, SPLIT_BLOCK)
            _sm_write(x_ptr + base, y_ptr + base, lo, hi, m, inv, BLOCK)


# Register-resident rows: one program a chunk of BLOCK elements, which it loads once, keeps in
# registers across the wait for its row's partials, and writes: one HBM read and one write. A
# program waits for the other chunks of its own row only; with at most one SM's worth of programs
# a row (NSPLIT <= the SM count) and tickets handed out in order, the row's programs are always
# resident together. The Triton interpreter runs programs one after another, so these cannot run
# on the CPU (the first program would wait for ever): GPU only.
@triton.jit
def _resident_chunk(cnt_ptr, R, NSPLIT, BLOCK: tl.constexpr):
    """(row, k, row offset, columns, mask) of this program's chunk, from its ticket."""
    t = tl.atomic_add(cnt_ptr, 1)
    row = t // NSPLIT
    k = t % NSPLIT
    cols = k * BLOCK + tl.arange(0, BLOCK)
    return row, k, row.to(tl.int64) * R, cols, cols < R


@triton.jit
def sm_resident_kernel(
    x_ptr, y_ptr, ws_ptr, cnt_ptr, R, NSPLIT, SPLIT_BLOCK: tl.constexpr, BLOCK: tl.constexpr
):
    row, k, base, cols, mask = _resident_chunk(cnt_ptr, R, NSPLIT, BLOCK)
    x = tl.load(x_ptr + base + cols, mask=mask, other=float("-inf"))
    m = tl.max(x, 0)
    _publish(ws_ptr, cnt_ptr, row, k, NSPLIT, m, tl.sum(tl.where(mask, tl.exp(x - m), 0.0), 0))
    _wait_count(cnt_ptr + 1 + row, NSPLIT)
    mx, inv = _row_max_inv(ws_ptr, row, NSPLIT, SPLIT_BLOCK)
    tl.store(y_ptr + base + cols, tl.exp(x - mx) * inv, mask=mask)


@triton.jit
def ln_resident_kernel(
    x_ptr,
    w_ptr,
    b_ptr,
    y_ptr,
    ws_ptr,
    cnt_ptr,
    R,
    NSPLIT,
    eps,
    SPLIT_BLOCK: tl.constexpr,
    BLOCK: tl.constexpr,
):
    row, k, base, cols, mask = _resident_chunk(cnt_ptr, R, NSPLIT, BLOCK)
    x = tl.load(x_ptr + base + cols, mask=mask, other=0.0)
    n = tl.minimum(R - k * BLOCK, BLOCK).to(tl.float32)
    s = tl.sum(x, 0)
    d = tl.where(mask, x - s / n, 0.0)
    _publish(ws_ptr, cnt_ptr, row, k, NSPLIT, s, tl.sum(d * d, 0))
    _wait_count(cnt_ptr + 1 + row, NSPLIT)
    mean, rstd = _row_mean_rstd(ws_ptr, row, R, NSPLIT, BLOCK, eps, SPLIT_BLOCK)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0)
    b = tl.load(b_ptr + cols, mask=mask, other=0.0)
    tl.store(y_ptr + base + cols, (x - mean) * rstd * w + b, mask=mask)


# ----------------------------------------------------------------------------------------- harness
def sync():
    if DEV == "cuda":
        torch.cuda.synchronize()


def bench_ms(fn) -> float:
    if DEV == "cpu":  # interpreter: one call (the check already warmed it)
        t0 = time.perf_counter()
        fn()
        return (time.perf_counter() - t0) * 1e3
    return triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median")


def max_err(out: torch.Tensor, ref: torch.Tensor) -> float:
    return (out - ref).abs_().max().item()  # NaN (an unwritten element) propagates


def make_check(ref, tol: float, out: torch.Tensor | None = None):
    """A check: poison `out` with NaN (if given), run once, compare `out` (else the returned tensor)
    with ref (a tensor, or a function giving the error of an output)."""
    err_fn = ref if callable(ref) else (lambda o: max_err(o, ref))

    def check(fn):
        if out is not None:
            out.fill_(NAN)
        res = fn()
        sync()
        err = err_fn(out if out is not None else res)
        return err, err <= tol  # False for NaN

    return check


def launcher(kernel, grid, args, **meta):
    return lambda: kernel[grid](*args, **meta)


class Section:
    def __init__(self, name: str, deadline: float):
        self.name, self.deadline, self.rows = name, deadline, []

    def run(self, variant: str, params: str, fn, nbytes: int, check=None):
        """Check (if given) then time one variant; never raises."""
        row = dict(variant=variant, params=params, ms=None, err=None, status="", nbytes=nbytes)
        self.rows.append(row)
        if time.monotonic() > self.deadline:
            row["status"] = "skipped"
        else:
            try:
                t0 = time.monotonic()
                if check is None:
                    fn()
                    sync()
                else:
                    row["err"], ok = check(fn)
                    row["status"] = "" if ok else "WRONG"
                if variant.startswith("torch.compile"):
                    row["params"] += f" (first call {time.monotonic() - t0:.1f}s)"
                if not row["status"]:
                    row["ms"] = bench_ms(fn)
            except Exception as e:  # record it and move on
                msg = (str(e).strip().splitlines() or [""])[0][:120]
                row["status"] = f"ERROR {type(e).__name__}: {msg}"
        print(f"[{self.name}] {' | '.join(cells(row))}", flush=True)


def cells(row) -> list[str]:
    ms, err = row["ms"], row["err"]
    gbs = row["nbytes"] / (ms * 1e-3) / 1e9 if ms else None
    return [
        row["variant"],
        row["params"],
        f"{ms:.3f}" if ms else row["status"].replace("|", "/"),
        f"{gbs:.0f}" if gbs else "-",
        f"{gbs / ROOF_GBS:.3f}" if gbs else "-",
        "-" if err is None else f"{err:.1e}",
    ]


def compiled(f):
    return torch.compile(f) if DEV == "cuda" else None


# ---------------------------------------------------------------------------------------- sections
def sec_floors(sec: Section, a):
    n = max(4096, int((1 << 30) * a.scale))
    x = torch.rand(n, device=DEV)
    y = torch.empty_like(x)
    sec.run("torch copy_", f"n={n}", lambda: y.copy_(x), 8 * n)
    sec.run("torch fill_", "1.0", lambda: y.fill_(1.0), 4 * n)
    sec.run("torch sum", "", lambda: x.sum(), 4 * n)
    for block in (1024, 4096, 8192):
        for w in (4, 8):
            fn = launcher(copy_kernel, (triton.cdiv(n, block),), (x, y, n), BLOCK=block, num_warps=w)
            sec.run("triton copy", f"BLOCK={block} w={w}", fn, 8 * n, make_check(x, 0.0, y))


def sec_bn(sec: Section, a):
    n_b = max(2 if a.small else 1, round(64 * a.scale))
    C, H, W = (3, 37, 37) if a.small else (64, 512, 512)
    HW, eps = H * W, 1e-5
    x = torch.randn(n_b, C, H, W, device=DEV)
    mean, var = 0.1 * torch.randn(C, device=DEV), torch.rand(C, device=DEV) + 0.5
    wgt, bias = 1 + 0.1 * torch.randn(C, device=DEV), 0.1 * torch.randn(C, device=DEV)
    s64 = wgt.double() / torch.sqrt(var.double() + eps)  # fold the running stats into one affine
    s, t = s64.float(), (bias.double() - mean.double() * s64).float()

    def bn(inp):
        return F.batch_norm(inp, mean, var, wgt, bias, training=False, eps=eps)

    ref = bn(x)
    y = torch.empty_like(x)
    nbytes = 2 * x.numel() * 4
    check, check_ret = make_check(ref, 1e-4, y), make_check(ref, 1e-4)
    shape = f"x={tuple(x.shape)}"
    sec.run("torch F.batch_norm", shape, lambda: bn(x), nbytes, check_ret)
    cbn = compiled(bn)
    if cbn is not None:
        sec.run("torch.compile batch_norm", shape, lambda: cbn(x), nbytes, check_ret)
    rows = n_b * C
    for bhw in (1024, 2048, 4096, 8192):  # (a) 2-D grid
        for w in (4, 8, 16):
            fn = launcher(
                bn_rows_kernel, (rows, triton.cdiv(HW, bhw)), (x, y, s, t, C, HW), BHW=bhw, num_warps=w
            )
            sec.run("2d grid", f"BHW={bhw} w={w}", fn, nbytes, check)
    for split in (1, 4, 16, 64):  # (b) looped
        for bhw in (2048, 4096):
            part = triton.cdiv(triton.cdiv(HW, split), bhw) * bhw
            grid = (rows, triton.cdiv(HW, part))
            fn = launcher(bn_loop_kernel, grid, (x, y, s, t, C, HW, part), BHW=bhw, num_warps=8)
            sec.run("looped", f"SPLIT={split} BHW={bhw} w=8", fn, nbytes, check)
    n = x.numel()
    for block in (1024, 4096):  # (c) flat 1-D
        for w in (4, 8):
            fn = launcher(
                bn_flat_kernel, (triton.cdiv(n, block),), (x, y, s, t, C, HW, n), BLOCK=block, num_warps=w
            )
            sec.run("flat 1-D", f"BLOCK={block} w={w}", fn, nbytes, check)


def sec_outer(sec: Section, a):
    M = N = max(200 if a.small else 64, round(32768 * a.scale))
    K = 32
    A = torch.rand(M, K, device=DEV)
    B = torch.rand(K, N, device=DEV)
    At = A.t().contiguous().t()  # (M, K) with stride (1, M): the FMA path's column loads coalesce
    Cm = torch.empty(M, N, device=DEV)
    nbytes = (M * N + M * K + K * N) * 4
    sl = min(512, M, N)  # compare the 4 corner slices in float64; any NaN left = unwritten tile
    corners = [(i, j) for i in (0, M - sl) for j in (0, N - sl)]
    refs = [A[i : i + sl].double() @ B[:, j : j + sl].double() for i, j in corners]

    def err(o):
        if torch.isnan(o).any():
            return NAN
        return max(
            max_err(o[i : i + sl, j : j + sl].double(), r) for (i, j), r in zip(corners, refs, strict=True)
        )

    torch.backends.cuda.matmul.allow_tf32 = False
    shape = f"({M}x{K})@({K}x{N})"
    sec.run("torch.mm", shape + " tf32 off", lambda: torch.mm(A, B), nbytes, make_check(err, 1e-4))
    cmm = compiled(lambda p, q: torch.mm(p, q))
    if cmm is not None:
        sec.run("torch.compile mm", shape, lambda: cmm(A, B), nbytes, make_check(err, 1e-4))
    check = make_check(err, 1e-4, Cm)

    def variant(name, bm, bn, w, prec, tiles=1, swap=False, stages=1):
        grid = (triton.cdiv(M, bm) * triton.cdiv(triton.cdiv(N, bn), tiles),)
        a_op = At if prec == "fma" else A
        args = (a_op, B, Cm, M, N, a_op.stride(0), a_op.stride(1), B.stride(0), B.stride(1))
        meta = dict(K=K, BM=bm, BN=bn, TILES=tiles, SWAP=swap, PREC=prec, num_warps=w, num_stages=stages)
        params = f"{prec} BM={bm} BN={bn} w={w}" + (f" T={tiles} st={stages}" if tiles > 1 else "")
        sec.run(name, params, launcher(outer_kernel, grid, args, **meta), nbytes, check)

    tiles = ((64, 64), (128, 128), (64, 256), (128, 256), (256, 128), (32, 512))
    for bm, bn in tiles:
        for prec in ("ieee", "tf32x3", "fma"):
            variant("tile", bm, bn, 8, prec)
    for prec in ("ieee", "tf32x3"):  # several BN tiles per program, A tile loaded once
        for n_tiles in (2, 4):
            for stages in (1, 2):
                variant("tiles/program", 128, 128, 8, prec, tiles=n_tiles, stages=stages)
    for prec in ("ieee", "tf32x3", "fma"):
        variant("tile, M-major pid", 128, 128, 8, prec, swap=True)
    # w=4 last and FMA last of all: 128-256 accumulators a thread take 5-20 s each to compile
    for prec in ("ieee", "tf32x3", "fma"):
        for bm, bn in tiles:
            variant("tile", bm, bn, 4, prec)


def sec_pool(sec: Section, a):
    n_b = max(1, round(32 * a.scale))
    C, H, W = (2, 21, 37) if a.small else (64, 512, 512)  # small: H sets the interpreter's cost
    x = torch.randn(n_b, C, H, W, device=DEV)
    ref = F.max_pool2d(x, 4, 1, 1)
    OH, OW = ref.shape[-2:]
    y = torch.empty_like(ref)
    nbytes = (x.numel() + ref.numel()) * 4
    check, check_ret = make_check(ref, 0.0, y), make_check(ref, 0.0)
    shape = f"x={tuple(x.shape)}"
    sec.run("torch F.max_pool2d", shape, lambda: F.max_pool2d(x, 4, 1, 1), nbytes, check_ret)
    cpool = compiled(lambda inp: F.max_pool2d(inp, 4, 1, 1))
    if cpool is not None:
        sec.run("torch.compile max_pool2d", shape, lambda: cpool(x), nbytes, check_ret)
    planes = n_b * C

    def variant(name, load, rows, bw, w):
        grid = (planes, triton.cdiv(OH, rows), triton.cdiv(OW, bw))
        seg = triton.next_power_of_2(bw + 6)
        meta = dict(ROWS=rows, BLOCK_W=bw, LOAD=load, SEG=seg, num_warps=w)
        fn = launcher(pool_kernel, grid, (x, y, H, W, OH, OW), **meta)
        sec.run(name, f"ROWS={rows} BLOCK_W={bw} w={w}", fn, nbytes, check)

    def shift_grid(warps):
        for w in warps:
            for rows in (1, 4, 8, 16):
                for bw in (128, 256, 512):
                    variant("row-tile 4 shifted loads", "shift", rows, bw, w)

    # run order = priority under the budget: w=4, 8, the one-load-per-row variants, then w=2, 1
    shift_grid((4, 8))
    for load, name in (("2d", "[BW,4] 2-D load"), ("gather", "aligned load+gather")):
        for rows in (4, 8):
            for bw in (128, 256):
                variant(f"row-tile {name}", load, rows, bw, 4)
    shift_grid((2, 1))


def _row_variants(sec: Section, n_rows: int, R: int, small: bool, nbytes: int, check, two, ordered):
    """The long-row variants: `two(split, ch, block, w)` and `ordered(...)` give launch functions."""
    sms = torch.cuda.get_device_properties(0).multi_processor_count if DEV == "cuda" else 4
    tiles = ((64, 2), (128, 4)) if small else ((2048, 8), (4096, 8), (1024, 4))
    # the rownorm family's rule today: 8 programs per SM over all rows, whole tiles per chunk
    block, w = (4096, 8) if not small else tiles[-1]
    split = max(1, min(triton.cdiv(sms * 8, n_rows), triton.cdiv(R, block), 4096))
    ch = triton.cdiv(triton.cdiv(R, split), block) * block
    sec.run(
        "2 launches, 8 per SM",
        f"CH={ch} BLOCK={block} w={w}",
        two(triton.cdiv(R, ch), ch, block, w),
        nbytes,
        check,
    )
    for ch in (256, 1024) if small else (16384, 8192, 32768, 4096, 65536):
        split = triton.cdiv(R, ch)
        for block, w in tiles:
            if block > ch:
                continue
            sec.run(
                "ordered 1 launch",
                f"CH={ch} BLOCK={block} w={w}",
                ordered(split, ch, block, w),
                nbytes,
                check,
            )
            sec.run("2 launches", f"CH={ch} BLOCK={block} w={w}", two(split, ch, block, w), nbytes, check)


def sec_lnrow(sec: Section, a):
    n_b = max(2, round(16 * a.scale))
    shape = (3, 37, 53) if a.small else (64, 256, 256)
    R, eps = math.prod(shape), 1e-5
    x = torch.randn(n_b, *shape, device=DEV)
    wgt, bias = 1 + 0.1 * torch.randn(shape, device=DEV), 0.1 * torch.randn(shape, device=DEV)

    def ln(inp):
        return F.layer_norm(inp, shape, wgt, bias, eps)

    ref = ln(x)
    y = torch.empty_like(x)
    nbytes = (2 * x.numel() + 2 * R) * 4
    check, check_ret = make_check(ref, 1e-4, y), make_check(ref, 1e-4)
    desc = f"x={tuple(x.shape)}"
    sec.run("torch F.layer_norm", desc, lambda: ln(x), nbytes, check_ret)
    cln = compiled(ln)
    if cln is not None:
        sec.run("torch.compile layer_norm", desc, lambda: cln(x), nbytes, check_ret)

    def two(split, ch, block, w):
        ws = torch.empty(n_b * split * 2, device=DEV)
        sb = triton.next_power_of_2(split)

        def fn():
            ln_part_kernel[(n_b, split)](x, ws, R, split, ch, BLOCK=block, num_warps=w)
            ln_out_kernel[(n_b, split)](
                x, wgt, bias, y, ws, R, split, ch, eps, SPLIT_BLOCK=sb, BLOCK=block, num_warps=w
            )

        return fn

    def ordered(split, ch, block, w):
        ws = torch.empty(n_b * split * 2, device=DEV)
        sb = triton.next_power_of_2(split)

        def fn():
            cnt = torch.zeros(1 + n_b, device=DEV, dtype=torch.int32)
            ln_ordered_kernel[(n_b * 2 * split,)](
                x, wgt, bias, y, ws, cnt, R, split, ch, eps, SPLIT_BLOCK=sb, BLOCK=block, num_warps=w
            )

        return fn

    sms = torch.cuda.get_device_properties(0).multi_processor_count if DEV == "cuda" else 0
    for block, w in ((32768, 32), (65536, 32), (32768, 16)):
        split = triton.cdiv(R, block)
        if split > sms:  # on the CPU always: the interpreter would wait for ever
            continue
        ws = torch.empty(n_b * split * 2, device=DEV)

        def resident(ws=ws, split=split, block=block, w=w):
            cnt = torch.zeros(1 + n_b, device=DEV, dtype=torch.int32)
            ln_resident_kernel[(n_b * split,)](
                x,
                wgt,
                bias,
                y,
                ws,
                cnt,
                R,
                split,
                eps,
                SPLIT_BLOCK=triton.next_power_of_2(split),
                BLOCK=block,
                num_warps=w,
            )

        sec.run("resident, a chunk a program", f"BLOCK={block} w={w}", resident, nbytes, check)
    _row_variants(sec, n_b, R, a.small, nbytes, check, two, ordered)


def sec_smrow(sec: Section, a):
    n_r = max(2, round(4096 * a.scale))
    R = 5000 if a.small else 393216
    x = torch.randn(n_r, R, device=DEV)
    ref = torch.softmax(x, dim=1)
    y = torch.empty_like(x)
    nbytes = 2 * x.numel() * 4
    tol = 1e-5 * ref.abs().max().item()
    check, check_ret = make_check(ref, tol, y), make_check(ref, tol)
    desc = f"x={tuple(x.shape)}"
    sec.run("torch softmax", desc, lambda: torch.softmax(x, dim=1), nbytes, check_ret)
    csm = compiled(lambda inp: torch.softmax(inp, dim=1))
    if csm is not None:
        sec.run("torch.compile softmax", desc, lambda: csm(x), nbytes, check_ret)
    sms = torch.cuda.get_device_properties(0).multi_processor_count if DEV == "cuda" else 0
    for block, w in ((4096, 8), (8192, 16), (4096, 4), (16384, 16)):
        split = triton.cdiv(R, block)
        if split > sms:  # on the CPU always: the interpreter would wait for ever
            continue
        ws = torch.empty(n_r * split * 2, device=DEV)

        def resident(ws=ws, split=split, block=block, w=w):
            cnt = torch.zeros(1 + n_r, device=DEV, dtype=torch.int32)
            sm_resident_kernel[(n_r * split,)](
                x, y, ws, cnt, R, split, SPLIT_BLOCK=triton.next_power_of_2(split), BLOCK=block, num_warps=w
            )

        sec.run("resident, a chunk a program", f"BLOCK={block} w={w}", resident, nbytes, check)
    for block, w in ((64, 2), (128, 4)) if a.small else ((1024, 4), (2048, 8), (4096, 8), (4096, 16)):
        fn = launcher(sm_online_row_kernel, (n_r,), (x, y, R), BLOCK=block, num_warps=w)
        sec.run("online, 1 program a row", f"BLOCK={block} w={w}", fn, nbytes, check)

    def ordered(split, ch, block, w, lag=0):
        ws = torch.empty(n_r * split * 2, device=DEV)
        sb = triton.next_power_of_2(split)

        def fn():
            cnt = torch.zeros(1 + n_r, device=DEV, dtype=torch.int32)
            sm_ordered_kernel[((n_r + lag) * 2 * split,)](
                x, y, ws, cnt, n_r, R, split, ch, SPLIT_BLOCK=sb, BLOCK=block, LAG=lag, num_warps=w
            )

        return fn

    # output programs a row or two behind their partials: they should seldom wait
    for lag in (1, 2):
        for ch, block, w in (
            ((256, 64, 2), (1024, 128, 4)) if a.small else ((8192, 2048, 8), (16384, 4096, 8))
        ):
            fn = ordered(triton.cdiv(R, ch), ch, block, w, lag)
            sec.run(
                f"ordered, outputs {lag} row(s) behind", f"CH={ch} BLOCK={block} w={w}", fn, nbytes, check
            )

    for ch in (256, 1024) if a.small else (16384, 8192, 32768, 4096, 65536):
        split = triton.cdiv(R, ch)
        for block, w in ((64, 2), (128, 4)) if a.small else ((2048, 8), (4096, 8), (1024, 4)):
            if block <= ch:
                sec.run(
                    "ordered 1 launch",
                    f"CH={ch} BLOCK={block} w={w}",
                    ordered(split, ch, block, w),
                    nbytes,
                    check,
                )


SECTIONS = {
    "floors": sec_floors,
    "bn": sec_bn,
    "outer": sec_outer,
    "pool": sec_pool,
    "lnrow": sec_lnrow,
    "smrow": sec_smrow,
}


# -------------------------------------------------------------------------------------------- main
def main(argv: list[str] | None = None) -> int:
    global DEV
    ap = argparse.ArgumentParser(prog="python3 -m evals.h200.membw_probe", description=__doc__.split("\n")[0])
    ap.add_argument("--sections", default=",".join(SECTIONS), help="comma-separated subset")
    ap.add_argument("--scale", type=float, default=1.0, help="shrink the batch dimension (0 < scale <= 1)")
    ap.add_argument("--budget", type=float, default=None, help="seconds in all (default 220 on GPU)")
    ap.add_argument("--small", action="store_true", help="tiny C, H, W (for the CPU interpreter)")
    ap.add_argument("--device", default="cuda", choices=("cuda", "cpu"), help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    names = [s.strip() for s in a.sections.split(",") if s.strip()]
    if not all(s in SECTIONS for s in names) or not 0 < a.scale <= 1:
        ap.error(f"sections must be among {list(SECTIONS)} and 0 < scale <= 1")
    DEV = a.device
    if DEV == "cpu":
        if os.environ.get("TRITON_INTERPRET") != "1":
            ap.error("--device cpu needs TRITON_INTERPRET=1 in the environment (read at import)")
        a.small = True
    elif not torch.cuda.is_available():
        ap.error("no CUDA device (use --device cpu with TRITON_INTERPRET=1 to test)")
    budget = a.budget if a.budget is not None else (220.0 if DEV == "cuda" else math.inf)
    gpu = torch.cuda.get_device_name() if DEV == "cuda" else "cpu (Triton interpreter)"
    print(f"# membw_probe: {gpu} | torch {torch.__version__} | triton {triton.__version__}")
    print(f"# roof {ROOF_GBS:.0f} GB/s | scale {a.scale} | small {a.small} | budget {budget}s | {names}")
    start = time.monotonic()
    end = start + budget
    done = []
    for k, name in enumerate(names):
        now = time.monotonic()
        sec = Section(name, now + max(0.0, end - now) / (len(names) - k))  # fair share, rolls over
        t0 = time.monotonic()
        try:
            SECTIONS[name](sec, a)
        except Exception as e:  # setup failed (e.g. out of memory): record it
            sec.rows.append(dict(variant="(setup)", params="", ms=None, err=None, nbytes=1, status=repr(e)))
        done.append((sec, time.monotonic() - t0))
        gc.collect()
        if DEV == "cuda":
            torch._dynamo.reset()
            torch.cuda.empty_cache()

    for sec, took in done:
        print(f"\n## {sec.name} ({took:.0f}s)\n")
        print("| variant | params | median ms | GB/s | of 4300 | max abs err |")
        print("|---|---|---|---|---|---|")
        for row in sec.rows:
            print("| " + " | ".join(cells(row)) + " |")
        timed = [r for r in sec.rows if r["ms"] and not r["variant"].startswith("torch")]
        best = max(timed, key=lambda r: r["nbytes"] / r["ms"], default=None)
        if best:
            print(f"\nbest Triton: {best['variant']} {best['params']}: {' / '.join(cells(best)[2:5])}")
    print(f"\n# total {time.monotonic() - start:.0f}s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
