"""Where a fresh process's first library call goes: loading cuDNN's and cuBLAS's libraries (CPU
work that could run before a GPU lock is taken) against the first call itself.

    python -m evals.h200.libwarm_probe [--repeat 2]

Each case runs in a fresh process: the CUDA context is made first, then (preload "dlopen") every
shared library of the wheel's cuDNN and cuBLAS folders is opened with ctypes, or ("dlopen+tiny")
that and a tiny conv and matmul, then the op runs twice (each synchronised). It prints one line
per case: the preload's seconds and the two calls'.
The suite's recording call (the candidate's first forward, under the shared GPU lock) took 0.5 to
1.5 s median on its conv tasks against 0.02 to 0.1 s on Triton-only tasks (H200, 2026-12-06).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

CASE = r"""
import ctypes, glob, json, os, sys, time
import torch
case, mode = sys.argv[1], sys.argv[2]
preload = mode in ("1", "2")
torch.zeros(1, device="cuda"); torch.cuda.synchronize()
t0 = time.perf_counter(); opened = failed = 0
if preload:
    try:
        import nvidia
        roots = [os.path.join(d, sub, "lib") for d in nvidia.__path__ for sub in ("cudnn", "cublas")]
    except ImportError:
        roots = []
    roots.append(os.path.join(os.path.dirname(torch.__file__), "lib"))
    for root in roots:
        for so in sorted(glob.glob(os.path.join(root, "lib*.so*"))):
            if "cudnn" in so or "cublas" in so:
                try:
                    ctypes.CDLL(so, mode=ctypes.RTLD_GLOBAL); opened += 1
                except OSError:
                    failed += 1  # reported: a library that did not load is not preloaded
    torch.backends.cudnn.version()
if mode == "2":
    # a tiny call of the same kind (what a runner could do before its lock): handles, engines
    with torch.no_grad():
        torch.nn.functional.conv2d(torch.ones(1, 1, 4, 4, device="cuda"), torch.ones(1, 1, 3, 3, device="cuda"))
        torch.ones(8, 8, device="cuda") @ torch.ones(8, 8, device="cuda")
    torch.cuda.synchronize()
pre = time.perf_counter() - t0
g = torch.Generator(device="cuda").manual_seed(0)
def inputs():
    if case == "conv2d":
        return (torch.randn(16, 64, 64, 64, device="cuda", generator=g), torch.nn.Conv2d(64, 128, 3, padding=1).cuda())
    if case == "conv_transpose2d":
        return (torch.randn(16, 64, 32, 32, device="cuda", generator=g), torch.nn.ConvTranspose2d(64, 32, 4, stride=2).cuda())
    if case == "conv3d":
        return (torch.randn(8, 16, 16, 32, 32, device="cuda", generator=g), torch.nn.Conv3d(16, 32, 3).cuda())
    return (torch.randn(1024, 1024, device="cuda", generator=g), torch.nn.Linear(1024, 1024).cuda())
x, m = inputs(); torch.cuda.synchronize()
calls = []
with torch.no_grad():
    for _ in range(2):
        t = time.perf_counter(); m(x); torch.cuda.synchronize(); calls.append(time.perf_counter() - t)
print(json.dumps({"case": case, "preload": {"0": "none", "1": "dlopen", "2": "dlopen+tiny"}[mode], "opened": opened, "failed": failed, "preload_s": round(pre, 3),
                  "first_s": round(calls[0], 3), "second_s": round(calls[1], 4)}))
"""


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=2)
    args = ap.parse_args()
    for case in ("conv2d", "conv_transpose2d", "conv3d", "linear"):
        for preload in ("0", "1", "2"):
            for _ in range(args.repeat):
                r = subprocess.run(
                    [sys.executable, "-c", CASE, case, preload], capture_output=True, text=True, timeout=120
                )
                line = r.stdout.strip().splitlines()[-1:] or [r.stderr.strip()[-300:]]
                try:
                    print(json.dumps(json.loads(line[0])))
                except ValueError:
                    print(json.dumps({"case": case, "preload": preload, "error": line[0]}))


if __name__ == "__main__":
    main()
