"""runner.op_precompile: the candidate's forward on meta tensors with launches turned into compile
only, no PyTorch op on the GPU (the judge asks for it without the GPU lock). Run in a child
process under Triton's interpreter (no GPU here); the GPU test in test_gpu.py shows the JIT
warm-up itself."""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

CORPUS = Path(__file__).resolve().parents[1] / "corpus"
ROOT = Path(__file__).resolve().parents[2]

_SCRIPT = textwrap.dedent(
    """
    import json, sys
    from tools.worker.runner import Runner
    r = Runner("cpu", -1, -1)
    task, cand = open(sys.argv[1]).read(), open(sys.argv[2]).read()
    assert r.op_load({"task_source": task, "candidate_source": cand})["ok"]
    print(json.dumps(r.op_precompile({"overrides": {"BATCH": 48}})))
    """
)


def _precompile(candidate_source: str, tmp_path, script: str = _SCRIPT, task: str = "relu") -> dict:
    """`script` run under Triton's interpreter on `task` (tests/corpus/tasks) and this
    candidate: its last line of output, as JSON."""
    cand = tmp_path / "cand.py"
    cand.write_text(candidate_source)
    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": str(ROOT)}
    out = subprocess.run(
        [sys.executable, "-c", script, str(CORPUS / "tasks" / f"{task}.py"), str(cand)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_precompile_reaches_every_launch_on_meta_tensors(tmp_path):
    rep = _precompile((CORPUS / "good" / "relu_good.py").read_text(), tmp_path)
    # no launcher under the interpreter: there is no compiled program to launch
    assert rep == {"ok": True, "kernels": 1, "launchers": 0}


@pytest.mark.parametrize(
    "line",
    [
        "torch.empty(4, device='cuda')",  # a factory on the GPU
        "x.to('cuda')",  # a copy to the GPU
    ],
)
def test_precompile_refuses_gpu_work(tmp_path, line):
    src = (CORPUS / "good" / "relu_good.py").read_text()
    src = src.replace("        x = x.contiguous()\n", f"        x = x.contiguous()\n        {line}\n")
    rep = _precompile(src, tmp_path)
    # stopped before the launch (here by the missing CUDA build too; the guard's own refusal is
    # the test below and, on a GPU, test_gpu.py)
    assert rep["ok"] and rep["kernels"] == 0 and rep["stopped"], rep


def test_the_guard_refuses_ops_that_would_make_or_read_gpu_tensors():
    torch = pytest.importorskip("torch")
    from tools.worker.common import GpuWorkRefused, _NoGpuWork

    mode = _NoGpuWork()
    with pytest.raises(GpuWorkRefused, match="would create a CUDA tensor"):
        mode.__torch_dispatch__(
            torch.ops.aten.empty.memory_format, (), ([4],), {"device": torch.device("cuda")}
        )
    meta = torch.empty(4, device="meta")
    out = mode.__torch_dispatch__(torch.ops.aten.add.Tensor, (), (meta, meta), {})
    assert out.device.type == "meta" and out.shape == (4,)


def test_precompile_stops_quietly_where_meta_tensors_cannot_go(tmp_path):
    # a host value read from a tensor: best effort stops there, the real call compiles the rest
    src = (CORPUS / "good" / "relu_good.py").read_text()
    src = src.replace("        return out\n", "        float(out.sum())\n        return out\n")
    rep = _precompile(src, tmp_path)
    assert rep["ok"] and rep["kernels"] == 1 and rep["stopped"]


def _sm90_kernel():
    """A kernel compiled for sm_90 without a GPU, as the compile-only pass leaves it: built, not
    loaded (no module, no launcher yet)."""
    import triton
    import triton.language as tl
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    @triton.jit
    def copy(x, y, n, B: tl.constexpr):
        o = tl.program_id(0) * B + tl.arange(0, B)
        tl.store(y + o, tl.load(x + o, mask=o < n), mask=o < n)

    sig = {"x": "*fp32", "y": "*fp32", "n": "i32", "B": "constexpr"}
    return triton.compile(
        ASTSource(fn=copy, signature=sig, constexprs={"B": 128}), target=GPUTarget("cuda", 90, 32)
    )


class _Driver:
    """Stands in for Triton's active driver: records the launchers it is asked to build."""

    def __init__(self, fail: bool = False) -> None:
        self.built: list = []
        self.fail = fail

    def launcher_cls(self, src, metadata):
        if self.fail:
            raise AssertionError("libcuda.so cannot found!")  # what a GPU-less host raises
        self.built.append((src, metadata))


def _with_driver(drv, fn):
    from triton.runtime import driver

    # set_active/reset_active would make the default driver on the way back, and a host without a
    # GPU has none: the slot is put back as it was instead
    before = driver._active
    driver.set_active(drv)
    try:
        return fn()
    finally:
        driver._active = before


def test_precompile_builds_the_launcher_of_a_compiled_kernel(tmp_path, monkeypatch):
    """The compile-only pass builds each kernel's C launcher (the system compiler's work) before
    the GPU lock, so the recording call under the lock finds it built."""
    from tools.worker.common import build_launcher

    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "cache"))
    kernel = _sm90_kernel()
    drv = _Driver()
    assert _with_driver(drv, lambda: build_launcher(kernel)) == 1
    assert drv.built == [(kernel.src, kernel.metadata)]


def test_launcher_not_built_for_loaded_or_missing_kernels_or_where_it_cannot_be(tmp_path, monkeypatch):
    from tools.worker.common import build_launcher

    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "cache"))
    kernel = _sm90_kernel()
    drv = _Driver()
    assert _with_driver(drv, lambda: build_launcher(None)) == 0  # the interpreter compiles nothing
    loaded = _sm90_kernel()
    loaded.module = object()  # already loaded by a launch: its launcher exists
    assert _with_driver(drv, lambda: build_launcher(loaded)) == 0
    assert drv.built == []
    # no libcuda (this host): not built here, the first launch builds it as before
    assert _with_driver(_Driver(fail=True), lambda: build_launcher(kernel)) == 0


_STAGE_SCRIPT = textwrap.dedent(
    """
    import json, sys
    from tools.worker.compile_job import record_launches
    from tools.worker.runner import Runner
    r = Runner("cpu", -1, -1)
    task, cand = open(sys.argv[1]).read(), open(sys.argv[2]).read()
    assert r.op_load({"task_source": task, "candidate_source": cand, "overrides": {"BATCH": 48}})["ok"]
    r.device = "cuda"  # the staging is for GPU jobs; the model itself is built on the CPU
    other = r._stage_record_model(r._task({"BATCH": 64}))  # a second shape's precompile: not staged
    staged = r._stage_record_model(r.task)
    model = r.record_model
    class OnGpu(r.mod.ModelNew):  # a constructor that makes a CUDA tensor: not staged
        def __init__(self, *a):
            super().__init__(*a)
            self.w = torch.ones(3, device="cuda")
    import torch
    real, r.mod.ModelNew = r.mod.ModelNew, OnGpu
    refused = r._stage_record_model(r.task)
    refused["kept"] = r.record_model is not None
    r.mod.ModelNew = real
    r.device = "cpu"
    with_model = record_launches(cand, r.mod, r.task, "cpu", {}, model=model)
    without = record_launches(cand, r.mod, r.task, "cpu", {})
    print(json.dumps({"other": other, "staged": staged, "refused": refused, "with": sorted(with_model["phases"]),
                      "without": sorted(without["phases"]), "ok": [with_model["ok"], without["ok"]]}))
    """
)


def test_the_recording_model_is_built_before_the_lock_and_used_by_the_recording(tmp_path):
    """runner._stage_record_model (sent with the precompile, before the job's GPU lock) builds the
    recording call's ModelNew on the CPU; record_launches then only moves it to the device, and
    says where its seconds went."""
    rep = _precompile((CORPUS / "good" / "relu_good.py").read_text(), tmp_path, _STAGE_SCRIPT)
    assert rep["other"] == {} and rep["staged"]["record_model_staged"] >= 0
    assert rep["refused"]["record_model_staged"] is None and not rep["refused"]["kept"]
    assert rep["refused"]["stage_error"]  # refused (here torch has no CUDA at all)
    assert rep["ok"] == [True, True]
    assert rep["with"] == ["forward", "inputs", "to_device"]  # built before: no build here
    assert rep["without"] == ["build", "forward", "inputs", "to_device"]


_BUILD_SCRIPT = textwrap.dedent(
    """
    import json, sys
    import torch
    from tools.worker.runner import Runner
    r = Runner("cpu", -1, -1)
    task, cand = open(sys.argv[1]).read(), open(sys.argv[2]).read()
    assert r.op_load({"task_source": task, "candidate_source": cand, "overrides": {"BATCH": 8}})["ok"]
    plain = r.op_stage({"overrides": {"BATCH": 8}, "weight_seed": 7})  # a CPU job: nothing staged
    r.device = "cuda"  # staging is for GPU jobs; the model itself is built on the CPU
    staged = r.op_stage({"overrides": {"BATCH": 8}, "weight_seed": 7})
    kept = r.staged_build[1]
    r.device = "cpu"
    built = r.op_build({"overrides": {"BATCH": 8}, "weight_seed": 7})
    used = r.model is kept and r.staged_build is None
    r.device = "cuda"
    r.op_stage({"overrides": {"BATCH": 8}, "weight_seed": 7})
    r.device = "cpu"
    r.op_build({"overrides": {"BATCH": 8}, "weight_seed": 8})  # another seed: built anew
    other_seed_fresh = r.staged_build is None
    fresh = r.model
    r.op_build({"overrides": {"BATCH": 8}, "weight_seed": 7})
    pairs = list(zip(kept.state_dict().values(), r.model.state_dict().values()))
    same = bool(pairs) and all(torch.equal(a, b) for a, b in pairs)
    print(json.dumps({"plain": plain, "staged": staged, "built": built["ok"], "used": used,
                      "other_seed_fresh": other_seed_fresh and fresh is not kept, "same": same}))
    """
)


def test_a_build_staged_before_the_lock_is_the_build_made_under_it(tmp_path):
    """runner.op_stage (asked before the judge's GPU lock) builds the candidate with the
    reference's weights on the CPU; the next build of the same sizes and weight seed uses it, with
    the same weights as building it there; any other build makes its own."""
    rep = _precompile(
        (CORPUS / "good" / "linear_relu_mixed.py").read_text(), tmp_path, _BUILD_SCRIPT, "linear_relu"
    )
    assert rep["plain"] == {"ok": True, "staged": False}
    assert rep["staged"] == {"ok": True, "staged": True}
    assert rep["built"] and rep["used"] and rep["other_seed_fresh"] and rep["same"]


def test_compile_only_with_threads_compiles_in_triton_async_mode_and_builds_launchers_after(monkeypatch):
    """compile_only(threads) runs the block under Triton's AsyncCompileMode (the JIT's warm-ups
    return futures and compile in the pool); when the block ends every compile has finished and
    each future's kernel gets its launcher, as a warm-up's kernel does at once without threads."""
    from triton.runtime import _async_compile

    from tools.worker import common

    built = []
    monkeypatch.setattr(common, "build_launcher", lambda k: built.append(k) or (k is not None))

    class Future:  # what JITFunction.run(warmup=True) returns under the mode
        def __init__(self, kernel):
            self.kernel = kernel

        def result(self, ignore_errors=False):
            return self.kernel

    with common.compile_only(threads=2) as state:
        assert isinstance(_async_compile.active_mode.get(), _async_compile.AsyncCompileMode)
        state["pending"] += [Future("k1"), Future(None)]  # None: a compile that failed
        assert built == []
    assert built == ["k1", None] and state["launchers"] == 1
    assert _async_compile.active_mode.get() is None and state["pending"] == []
    # one thread (the default, and _off_gpu's): no mode, nothing pending
    with common.compile_only() as state:
        assert _async_compile.active_mode.get() is None
    # an error in the block ends the mode too, and nothing is built for it
    built.clear()
    with pytest.raises(RuntimeError), common.compile_only(threads=2) as state:
        state["pending"].append(Future("k2"))
        raise RuntimeError("a host read of a meta tensor")
    assert built == [] and _async_compile.active_mode.get() is None and not state["on"]
