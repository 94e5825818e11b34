"""The fused attention kernel's tile configurations against SDPA, eager and torch.compile, on
the GPU, at fp32 (3xTF32) and the head dim given: the sweep behind the expert's per-head-dim
defaults (nodes/expert/families/attention.py `defaults`).

    python -m evals.h200.attn_tiles [--b 8] [--h 16] [--s 1024] [--d 128]

Prints, per (BLOCK_M, BLOCK_N, num_warps, num_stages): the do_bench median (ms), the largest
error relative to the float64 reference's largest value, and the spills ptxas reports for the
kernel the GPU ran. The kernel is the expert's own (nodes/expert/families/attention.py). Each
configuration runs in a child process of its own: a kernel that faults (64 x 16 tiles hit an
illegal memory access on an H100) poisons only its own CUDA context, not the rows after it.
"""

from __future__ import annotations

import argparse
import importlib.util
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

CONFIGS = [
    (64, 64, 4, 2),  # the expert's default at every head dim before 2026-12-07 (now up to 64)
    (64, 32, 4, 1),
    (64, 32, 4, 2),
    (64, 32, 8, 1),
    (32, 32, 4, 1),
    (32, 64, 4, 1),
    (128, 32, 8, 1),
    (128, 32, 8, 2),
    (128, 32, 8, 3),
    (128, 64, 8, 1),  # the default at head dims 65-128 (32 x 32, 4, 1 above it)
    (64, 16, 8, 1),  # faulted on an H100 (illegal memory access)
]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--b", type=int, default=8)
    ap.add_argument("--h", type=int, default=16)
    ap.add_argument("--s", type=int, default=1024)
    ap.add_argument("--d", type=int, default=128)
    ap.add_argument(
        "--one", type=int, nargs=4, metavar=("BM", "BN", "WARPS", "STAGES"), help=argparse.SUPPRESS
    )
    a = ap.parse_args()
    sys.path.insert(0, str(ROOT))
    import torch
    import torch.nn.functional as F
    import triton
    from triton.testing import do_bench

    torch.manual_seed(0)
    q, k, v = (torch.randn(a.b, a.h, a.s, a.d, device="cuda") for _ in range(3))
    ref = F.scaled_dot_product_attention(q.double(), k.double(), v.double())
    big = ref.abs().max().item()
    if a.one:
        return one(a, q, k, v, ref, big, *a.one)
    print(f"# {torch.cuda.get_device_name()} torch {torch.__version__} triton {triton.__version__}")
    print(f"# q, k, v ({a.b}, {a.h}, {a.s}, {a.d}) fp32, non-causal; each row in a child process")
    eager = do_bench(lambda: F.scaled_dot_product_attention(q, k, v))
    comp = torch.compile(lambda q, k, v: F.scaled_dot_product_attention(q, k, v))
    comp(q, k, v)
    compiled = do_bench(lambda: comp(q, k, v))
    e_err = (F.scaled_dot_product_attention(q, k, v).double() - ref).abs().max().item() / big
    print(f"eager {eager:.3f} ms (err {e_err:.2e}), torch.compile {compiled:.3f} ms", flush=True)
    sizes = ["--b", str(a.b), "--h", str(a.h), "--s", str(a.s), "--d", str(a.d)]
    for cfg in CONFIGS:
        cmd = [sys.executable, "-m", "evals.h200.attn_tiles", *sizes, "--one", *map(str, cfg)]
        try:
            r = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=120)
            line = (r.stdout.strip().splitlines() or [""])[-1]
            if r.returncode or not line.startswith("ms "):
                line = f"failed (exit {r.returncode}): {(r.stderr.strip().splitlines() or ['?'])[-1][:90]}"
            else:
                ms = float(line.split()[1])
                line = f"{ms:.3f} ms  x{compiled / ms:.2f} compile  {' '.join(line.split()[2:])}"
        except subprocess.TimeoutExpired:
            line = "failed: timed out"
        bm, bn, w, st = cfg
        print(f"{bm:4d} {bn:4d} {w:2d} {st:2d}  {line}", flush=True)


def one(a, q, k, v, ref, big, bm: int, bn: int, w: int, s: int) -> None:
    """One configuration (in a child process): 'ms <median> err <e> spills <n> regs <n>'."""
    import torch
    import triton
    from triton.testing import do_bench

    from nodes.expert.families import attention

    d = tempfile.mkdtemp()
    p = Path(d) / "attn_k.py"
    p.write_text("import triton\nimport triton.language as tl\n" + attention._kernel("tf32x3", False))
    spec = importlib.util.spec_from_file_location("attn_k", p)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    scale = 1.0 / (a.d**0.5)
    q3, k3, v3 = (t.reshape(-1, a.s, a.d) for t in (q, k, v))
    block = max(16, triton.next_power_of_2(a.d))
    out = torch.empty_like(q)
    o3 = out.view(-1, a.s, a.d)

    def go():
        mod.attn_fwd_kernel[(triton.cdiv(a.s, bm), q3.shape[0])](
            q3, k3, v3, o3, a.s, a.s, a.d, a.d, q3.shape[0], scale,
            *q3.stride(), *k3.stride(), *v3.stride(), *o3.stride(),
            BLOCK_M=bm, BLOCK_N=bn, BLOCK_D=block, BLOCK_DV=block, num_warps=w, num_stages=s,
        )  # fmt: skip

    go()
    torch.cuda.synchronize()
    err = (out.double() - ref).abs().max().item() / big
    ms = do_bench(go)
    kern = [kk for c in mod.attn_fwd_kernel.device_caches.values() for kk in c[0].values()][-1]
    print(
        f"ms {ms:.4f} err {err:.2e} spills {getattr(kern, 'n_spills', '?')} regs {getattr(kern, 'n_regs', '?')}"
    )


if __name__ == "__main__":
    main()
