"""Why the 3xTF32 "bsplit" GEMM was refused on the H200, and whether its fix holds: the split-k
kernel's accumulation and its A tile's in-register TF32 split, several ways, on the GPU.

    python -m evals.h200.tf32_probe [--m 256] [--k 65536] [--n 256]

The sixth sitting's kb-tuned run saw every output of level1/6 low by 1.7e-4 relative (a bias of
one sign), while the same kernel is exact under emulated tensor-core truncation on CPU
(tests/expert/test_tf32_truncation.py). This writes the expert's split-k bsplit kernel for an
M x K x N matmul of positive inputs and two variants of its A split, runs each, and prints the
mean relative error against float64, its time (ms, do_bench median) and what the PTX does:

  as written   ah = A rounded to TF32 by integer arithmetic on its bits; each K step's three
               products summed in a zero accumulator, then added to the running sum (FRESH_ACC)
  running sum  the same, each step's products fed straight onto the running sum (the sixth
               sitting's kernel: -2.05e-5 at K = 65536 in the seventh sitting's probe)
  cvt.rna      as written, ah rounded by the PTX instruction (cvt.rna.tf32.f32) instead
  unrounded    as written, ah = A (the tensor cores truncate it): the bias of a lost rounding
  tf32x3       Triton's own 3xTF32 split-k kernel (what the expert proposes today)

Reading: the seventh sitting found "as written" (then a running sum) and "cvt.rna" equal at
-2.05e-5, so the split compiles as written and the bias is the MMAs' truncated accumulation,
which grows with K. "as written" near tf32x3's error confirms the fresh accumulator; its time
against tf32x3's says whether bsplit is worth proposing again. The kernels are the expert's own;
nothing of a task runs here.
"""

from __future__ import annotations

import argparse
import importlib.util
import re
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
AH = re.compile(r"^(\s*)ah = tl\.where\(a == a, .*$", re.M)
MASK = re.compile(r"and\.b32[^;]*(-8192|0xFFFFE000|4294959104)")
CVT_RNA = (
    'ah = tl.inline_asm_elementwise("cvt.rna.tf32.f32 $0, $1;", "=r,f", [a], dtype=tl.int32, '
    "is_pure=True, pack=1).to(tl.float32, bitcast=True)"
)
# name: (parameters over the split-k seed's, a replacement for the A split line or None)
VARIANTS = {
    "as written": ({"PRECISION": "tf32x3-bsplit", "FRESH_ACC": True}, None),
    "running sum": ({"PRECISION": "tf32x3-bsplit", "FRESH_ACC": False}, None),
    "cvt.rna": ({"PRECISION": "tf32x3-bsplit", "FRESH_ACC": True}, CVT_RNA),
    "unrounded": ({"PRECISION": "tf32x3-bsplit", "FRESH_ACC": True}, "ah = a"),
    "tf32x3": ({"PRECISION": "tf32x3"}, None),
}


def source(m: int, k: int, n: int, device: str, update: dict) -> str:
    from graph.records import TaskSpec
    from nodes.expert import ExpertCode
    from nodes.expert.code import plan_for
    from nodes.models import CodeRequest, StageBrief
    from tools.toolbox import Toolbox

    p = ROOT / "evals" / "suites" / "egg" / "mm12_large_k_ragged.py"
    task = TaskSpec(
        path=str(p), name=p.stem, source=p.read_text(), device=device, size_overrides={"M": m, "K": k, "N": n}
    )
    desc = Toolbox().describe(task, shrink=False)
    brief = StageBrief(name="algorithm", objective="tf32 probe", may_change=[], must_keep=[])
    code = ExpertCode()
    for i in range(8):
        r = code.write(CodeRequest(mode="seed", stage=brief, task=task, desc=desc, seed_index=i, n_seeds=8))
        if r.source is not None and r.algorithm == "split-k":
            unit = plan_for(desc).units[0]
            params = dict(r.params, **update)
            return unit.fam.generate(desc, unit.view, unit.plan, params)
    raise SystemExit("no split-k seed for this shape")


def ptx_notes(mod) -> str:
    try:
        caches = mod.gemm_splitk_kernel.device_caches
        kernels = [k for cache in caches.values() for k in cache[0].values()]
        ptx = kernels[0].asm["ptx"]
    except Exception as e:  # the cache's layout is Triton's own; say so rather than fail
        return f"PTX not read ({type(e).__name__})"
    masks = len(MASK.findall(ptx))
    return (
        f"and.b32 -8192: {masks}, cvt.rna.tf32: {ptx.count('cvt.rna.tf32')}, "
        f"wgmma: {ptx.count('wgmma.mma_async')}, mma.sync: {ptx.count('mma.sync')}"
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--m", type=int, default=256)
    ap.add_argument("--k", type=int, default=65536)
    ap.add_argument("--n", type=int, default=256)
    ap.add_argument("--device", default="cuda", help="cpu: a dry run under TRITON_INTERPRET=1")
    a = ap.parse_args(argv)
    import torch

    torch.manual_seed(0)
    x = torch.rand(a.m, a.k, device=a.device)
    w = torch.rand(a.k, a.n, device=a.device)
    ref = x.double() @ w.double()
    tmp = Path(tempfile.mkdtemp(prefix="tf32-probe-"))
    print(f"{a.m} x {a.k} x {a.n}, positive inputs, mean |ref| {float(ref.mean()):.1f}")
    for name, (update, line) in VARIANTS.items():
        src = source(a.m, a.k, a.n, a.device, update)
        if line is not None:
            if not AH.search(src):
                raise SystemExit("the generated kernel has no in-register A split line")
            src = AH.sub(lambda mt, ln=line: mt.group(1) + ln, src)
        f = tmp / f"v_{name.replace(' ', '_').replace('.', '_')}.py"
        f.write_text(src)
        spec = importlib.util.spec_from_file_location(f.stem, f)
        mod = importlib.util.module_from_spec(spec)
        try:
            spec.loader.exec_module(mod)
            with torch.no_grad():
                y = mod.ModelNew()(x, w).double()
            if a.device == "cuda":
                torch.cuda.synchronize()
            err = float(((y - ref) / ref).mean())
            ms = "-"
            if a.device == "cuda":
                import triton.testing

                model = mod.ModelNew()
                with torch.no_grad():
                    ms = f"{triton.testing.do_bench(lambda m=model: m(x, w)):.3f} ms"
            print(f"  {name:11s} mean relative error {err:+.3e}   {ms}   {ptx_notes(mod)}", flush=True)
        except Exception as e:
            print(f"  {name:11s} failed: {type(e).__name__}: {str(e)[:300]}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
