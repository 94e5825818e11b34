"""Do Triton's sm_90 compiles overlap in threads? Four tf32x3 GEMM tiles compiled for
GPUTarget("cuda", 90, 32) one after another and in a four-thread pool, each in a fresh cache,
two rounds of each (no GPU needed: the figure behind tools/worker/common.py PRECOMPILE_THREADS).

    python -m evals.h200.compile_threads_probe
"""

from __future__ import annotations

import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

import triton
import triton.knobs as knobs
import triton.language as tl
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource


@triton.jit
def _mm(a_ptr, b_ptr, c_ptr, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    pid = tl.program_id(0)
    rm = (pid // tl.cdiv(N, BN)) * BM + tl.arange(0, BM)
    rn = (pid % tl.cdiv(N, BN)) * BN + tl.arange(0, BN)
    acc = tl.zeros([BM, BN], dtype=tl.float32)
    for k in range(0, K, BK):
        rk = k + tl.arange(0, BK)
        a = tl.load(a_ptr + rm[:, None] * K + rk[None, :])
        b = tl.load(b_ptr + rk[:, None] * N + rn[None, :])
        acc = tl.dot(a, b, acc, input_precision="tf32x3")
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], acc)


SIG = {"a_ptr": "*fp32", "b_ptr": "*fp32", "c_ptr": "*fp32", "M": "i32", "N": "i32", "K": "i32"}
SIG.update(BM="constexpr", BN="constexpr", BK="constexpr")
TILES = [(64, 64, 32, 4), (128, 128, 32, 8), (64, 128, 16, 4), (128, 64, 32, 8)]  # BM, BN, BK, warps


def _compile(tile: tuple[int, int, int, int]) -> float:
    bm, bn, bk, warps = tile
    t = time.perf_counter()
    src = ASTSource(fn=_mm, signature=SIG, constexprs={"BM": bm, "BN": bn, "BK": bk})
    triton.compile(src, target=GPUTarget("cuda", 90, 32), options={"num_warps": warps, "num_stages": 3})
    return time.perf_counter() - t


def main() -> None:
    for mode in ("one after another", "four threads") * 2:
        knobs.cache.dir = tempfile.mkdtemp(prefix="egg-compile-probe-")
        t0 = time.perf_counter()
        if mode == "four threads":
            with ThreadPoolExecutor(len(TILES)) as pool:
                each = list(pool.map(_compile, TILES))
        else:
            each = [_compile(t) for t in TILES]
        print(f"{mode}: {time.perf_counter() - t0:.2f} s ({', '.join(f'{x:.2f}' for x in each)})", flush=True)


if __name__ == "__main__":
    main()
