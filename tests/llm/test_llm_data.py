"""The hand-written scale+tanh candidate (the fake server's reply in CLI tests) is correct under
TRITON_INTERPRET=1, for the task's sizes, a size that is not a multiple of the block, and every
EGG_TUNABLES variant. Runs in subprocesses: this process never imports torch or triton."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from llm_helpers import DATA, KERNEL_SOURCE

from nodes.llm_replies import tunable_variants

CHECK = Path(__file__).resolve().parent / "check_candidate.py"


def _check(candidate: Path, *sizes: str, gpu: bool = False) -> dict:
    env = {**os.environ, "EGG_CHECK_DEVICE": "cuda"} if gpu else {**os.environ, "TRITON_INTERPRET": "1"}
    p = subprocess.run(
        [sys.executable, str(CHECK), str(DATA / "scale_tanh.py"), str(candidate), *sizes],
        capture_output=True,
        text=True,
        env=env,
        timeout=240,
    )
    assert p.returncode in (0, 1), p.stderr[-2000:]
    return json.loads(p.stdout.strip().splitlines()[-1]) | {"rc": p.returncode}


@pytest.mark.slow
def test_candidate_matches_reference_in_interpreter() -> None:
    r = _check(DATA / "scale_tanh_new.py")
    assert r["rc"] == 0 and r["max_abs_err"] < 1e-5, r
    r = _check(DATA / "scale_tanh_new.py", "BATCH=3", "FEATURES=1000")  # 3000 elements: a partial block
    assert r["rc"] == 0 and r["shape"] == [3, 1000], r


def test_check_catches_a_wrong_kernel(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text(KERNEL_SOURCE.replace("y = x * scale + b", "y = x * scale"))  # drops the bias
    r = _check(bad, "BATCH=4", "FEATURES=256")
    assert r["rc"] == 1 and r["max_abs_err"] > 1e-3


@pytest.mark.slow
def test_every_tunable_variant_is_correct(tmp_path: Path) -> None:
    for i, (params, src) in enumerate(tunable_variants(KERNEL_SOURCE, {})):
        f = tmp_path / f"v{i}.py"
        f.write_text(src)
        r = _check(f, "BATCH=5", "FEATURES=777")
        assert r["rc"] == 0, (params, r)


def test_kernel_compiles_for_sm90_without_a_gpu() -> None:
    """The real target compiles too (not only the interpreter): ptx for sm_90 with the declared options."""
    code = (
        "import importlib.util, json, triton\n"
        "from triton.backends.compiler import GPUTarget\n"
        f"spec = importlib.util.spec_from_file_location('cand', {str(DATA / 'scale_tanh_new.py')!r})\n"
        "m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)\n"
        "sig = {'x_ptr': '*fp32', 'bias_ptr': '*fp32', 'out_ptr': '*fp32', 'n_elements': 'i32', 'features': 'i32',"
        " 'scale': 'fp32', 'BLOCK_SIZE': 'constexpr'}\n"
        "src = triton.compiler.ASTSource(fn=m.scale_bias_tanh_kernel, signature=sig, constexprs={'BLOCK_SIZE': m.BLOCK_SIZE})\n"
        "k = triton.compile(src, target=GPUTarget('cuda', 90, 32), options={'num_warps': m.NUM_WARPS})\n"
        "print(json.dumps({'ptx': '.target sm_90' in k.asm['ptx']}))\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=240)
    assert p.returncode == 0, p.stderr[-2000:]
    assert json.loads(p.stdout.strip().splitlines()[-1]) == {"ptx": True}


def _cuda_available() -> bool:
    p = subprocess.run(
        [sys.executable, "-c", "import torch; print(torch.cuda.is_available())"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    return p.stdout.strip().endswith("True")


@pytest.mark.gpu
def test_candidate_matches_reference_on_gpu() -> None:
    if not _cuda_available():
        pytest.skip("needs a CUDA GPU")
    r = _check(DATA / "scale_tanh_new.py", gpu=True)
    assert r["rc"] == 0 and r["device"] == "cuda" and r["max_abs_err"] < 1e-5, r
    r = _check(DATA / "scale_tanh_new.py", "BATCH=3", "FEATURES=1000", gpu=True)
    assert r["rc"] == 0, r
