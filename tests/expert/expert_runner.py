"""Subprocess side of the expert tests: describe tasks and check candidates (imports torch).

Usage: python tests/expert/expert_runner.py JOBS.json RESULTS.json
Each job is {"kind": "describe"|"check"|"compile", ...}; results come back in the same order.
TRITON_INTERPRET must be set by the caller (before triton is imported) for "check" jobs;
"compile" jobs need it unset.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import re
import sys
import tempfile
import traceback
import types
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)

import torch  # noqa: E402


def load_task(source: str, overrides: dict[str, int]) -> types.ModuleType:
    mod = types.ModuleType("task_under_test")
    exec(compile(source, "task_under_test.py", "exec"), mod.__dict__)
    for k, v in overrides.items():
        setattr(mod, k, v)
    return mod


def load_candidate(source: str, tmpdir: str, idx: int) -> types.ModuleType:
    # triton.jit reads kernel source through inspect, so the candidate must be a real file.
    path = os.path.join(tmpdir, f"cand_{idx}.py")
    with open(path, "w") as f:
        f.write(source)
    spec = importlib.util.spec_from_file_location(f"cand_{idx}", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _tinfo(t: Any) -> dict:
    if isinstance(t, torch.Tensor):
        return {
            "shape": list(t.shape),
            "dtype": str(t.dtype).replace("torch.", ""),
            "stride": list(t.stride()),
        }
    kind = "bool" if isinstance(t, bool) else "int" if isinstance(t, int) else "float"
    return {"value": t, "type": kind}


def describe(job: dict) -> dict:
    from tools.worker.describe import module_ints
    from tools.worker.opgraph import capture

    mod = load_task(job["source"], job.get("overrides", {}))
    torch.manual_seed(0)
    init = list(mod.get_init_inputs())
    model = mod.Model(*init)
    inputs = list(mod.get_inputs())
    with torch.no_grad():
        out = model(*inputs)
    nodes, err = capture(model, inputs)
    return {
        "name": job.get("name", "task"),
        "source": job["source"],
        "init_args": init,
        "inputs": [_tinfo(t) for t in inputs],
        "outputs": [_tinfo(out)],
        "params": [
            {"name": n, "shape": list(p.shape), "dtype": str(p.dtype).replace("torch.", "")}
            for n, p in model.state_dict().items()
        ],
        "op_graph": nodes,
        "capture_error": err,
        "module_ints": module_ints(model),
    }


def check(job: dict, tmpdir: str, idx: int) -> dict:
    mod = load_task(job["task_source"], job.get("overrides", {}))
    cand = load_candidate(job["candidate_source"], tmpdir, idx)
    torch.manual_seed(job.get("seed", 0))
    init = list(mod.get_init_inputs())
    ref = mod.Model(*init)
    new = cand.ModelNew(*init)
    new.load_state_dict(ref.state_dict())
    if job.get("eval"):
        # Inference semantics (what the real checker uses): e.g. BatchNorm on running statistics.
        ref.eval()
        new.eval()
    worst = 0.0
    for trial in range(job.get("trials", 1)):
        torch.manual_seed(100 + trial)
        inputs = list(mod.get_inputs())
        with torch.no_grad():
            want = ref(*inputs)
            got = new(*inputs)
        if got.shape != want.shape or got.dtype != want.dtype:
            return {
                "ok": False,
                "error": f"shape/dtype {tuple(got.shape)} {got.dtype} vs {tuple(want.shape)} {want.dtype}",
            }
        err = (got.double() - want.double()).abs()
        tol = job.get("atol", 1e-4) + job.get("rtol", 1e-4) * want.double().abs()
        bad = ~(err <= tol)
        if torch.isnan(want).any() or torch.isnan(got).any():
            if not torch.equal(torch.isnan(want), torch.isnan(got)):
                return {"ok": False, "error": "nan pattern differs"}
            bad = bad & ~torch.isnan(want)
        worst = max(worst, float(err[~torch.isnan(err)].max()) if err.numel() else 0.0)
        if bad.any():
            return {"ok": False, "error": f"mismatch max_abs_err {worst:.3g}", "max_abs_err": worst}
    return {"ok": True, "max_abs_err": worst if math.isfinite(worst) else None}


def compile_kernels(job: dict, tmpdir: str, idx: int) -> dict:
    """Compile every @triton.jit kernel of a candidate for sm_90 by running the launcher with
    recording: each kernel launch's signature/constexprs are captured on CPU tensors via a
    patched JITFunction.run, then compiled with triton.compile for GPUTarget('cuda', 90, 32)."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.runtime.jit import JITFunction

    captured: list[tuple[Any, dict, dict]] = []

    def fake_run(self, *args, grid, warmup, **kwargs):  # noqa: ARG001
        bound = dict(zip(self.arg_names, args, strict=False))
        bound.update({k: v for k, v in kwargs.items() if k in self.arg_names})
        opts = {k: v for k, v in kwargs.items() if k not in self.arg_names}
        captured.append((self, bound, opts))
        return None

    mod = load_task(job["task_source"], job.get("overrides", {}))
    cand = load_candidate(job["candidate_source"], tmpdir, idx)
    orig = JITFunction.run
    JITFunction.run = fake_run
    try:
        torch.manual_seed(0)
        init = list(mod.get_init_inputs())
        new = cand.ModelNew(*init)
        with torch.no_grad():
            try:
                new(*mod.get_inputs())
            except Exception:
                pass  # outputs are empty (kernels did not run); only the launches matter
    finally:
        JITFunction.run = orig
    if not captured:
        return {"ok": False, "error": "no kernel launch recorded"}
    done = []
    for fn, bound, opts in captured:
        sig: dict[str, str] = {}
        consts: dict[str, Any] = {}
        for i, name in enumerate(fn.arg_names):
            v = bound.get(name)
            if fn.params[i].is_constexpr:
                sig[name] = "constexpr"
                consts[name] = v
            elif isinstance(v, torch.Tensor):
                sig[name] = (
                    "*"
                    + {
                        "float32": "fp32",
                        "float16": "fp16",
                        "bfloat16": "bf16",
                        "int64": "i64",
                        "int32": "i32",
                        "bool": "i1",
                        "int8": "i8",
                        "uint8": "u8",
                    }[str(v.dtype).replace("torch.", "")]
                )
            elif isinstance(v, bool):
                sig[name] = "i1"
            elif isinstance(v, int) and v == 1:
                # a launch specialises an int argument equal to 1 into a constant
                sig[name] = "constexpr"
                consts[name] = 1
            elif isinstance(v, int):
                sig[name] = "i64" if abs(v) >= 2**31 else "i32"
            elif isinstance(v, float):
                sig[name] = "fp32"
            else:
                return {"ok": False, "error": f"{fn.__name__}: cannot type argument {name}={v!r}"}
        # The launch's own specialisation on a GPU: pointers and ints divisible by 16 are
        # marked so (what lets Triton prove accesses aligned and vectorize them).
        attrs = {}
        for i, name in enumerate(fn.arg_names):
            v = bound.get(name)
            if fn.params[i].is_constexpr:
                continue
            if isinstance(v, torch.Tensor):
                div = v.data_ptr() % 16 == 0
            else:
                div = isinstance(v, int) and not isinstance(v, bool) and v % 16 == 0
            if div:
                attrs[(i,)] = [["tt.divisibility", 16]]
        src = triton.compiler.ASTSource(fn=fn, signature=sig, constexprs=consts, attrs=attrs)
        options = {k: opts[k] for k in ("num_warps", "num_stages") if k in opts}
        try:
            k = triton.compile(src, target=GPUTarget("cuda", 90, 32), options=options)
        except Exception as e:
            return {"ok": False, "error": f"{fn.__name__}: {type(e).__name__}: {str(e)[-1500:]}"}
        ptx = k.asm["ptx"]
        ops = re.findall(r"\b((?:ld|st)\.global\S*)", ptx)

        def count(kind: str, vec: str, ops=ops) -> int:
            # global accesses of the PTX: 128-bit vectors (.v4) or single 32-bit words
            return sum(
                1
                for o in ops
                if o.startswith(kind)
                and (vec in o if vec else not re.search(r"\.v[248]\.", o) and o.endswith("32"))
            )

        if job.get("ptxas"):
            from tools.worker.compile_job import ptxas_info

            regs, spills = ptxas_info(ptx)
        else:
            regs = spills = None
        done.append(
            {
                "kernel": fn.__name__,
                "shared": k.metadata.shared,
                # ptxas -v for sm_90a (jobs with "ptxas": true): registers a thread, spilled bytes
                "registers": regs,
                "spills": spills,
                "n_regs": getattr(k, "n_regs", None),
                "ld_v4": count("ld", ".v4."),
                "ld_b32": count("ld", ""),
                "st_v4": count("st", ".v4."),
                "st_b32": count("st", ""),
                # async copies into shared memory (the pipelined tl.dot operand tiles), by size
                "cp16": len(re.findall(r"cp\.async\.\w+\.shared\.global\s[^;]*\],\s*0x10\b", ptx)),
                "cp4": len(re.findall(r"cp\.async\.\w+\.shared\.global\s[^;]*\],\s*0x4\b", ptx)),
            }
        )
    return {"ok": True, "kernels": done}


def _ms(fn, reps: int = 50) -> float:
    for _ in range(5):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        torch.cuda.synchronize()
        times.append(a.elapsed_time(b))
    times.sort()
    return times[len(times) // 2]


def bench(job: dict, tmpdir: str, idx: int) -> dict:
    """On CUDA: check the candidate at the task's own sizes, then time it, eager and compile."""
    mod = load_task(job["task_source"], job.get("overrides", {}))
    cand = load_candidate(job["candidate_source"], tmpdir, idx)
    torch.manual_seed(0)
    init = list(mod.get_init_inputs())
    ref = mod.Model(*init).cuda()
    new = cand.ModelNew(*init).cuda()
    new.load_state_dict(ref.state_dict())
    inputs = [t.cuda() if isinstance(t, torch.Tensor) else t for t in mod.get_inputs()]
    with torch.no_grad():
        want = ref(*inputs)
        got = new(*inputs)
        torch.cuda.synchronize()
        err = float((got.double() - want.double()).abs().max())
        ok = bool(torch.allclose(got, want, atol=job.get("atol", 1e-4), rtol=job.get("rtol", 1e-4)))
        out = {
            "ok": ok,
            "max_abs_err": err,
            "candidate_ms": _ms(lambda: new(*inputs)),
            "eager_ms": _ms(lambda: ref(*inputs)),
        }
        if job.get("compile"):
            comp = torch.compile(ref)
            out["compile_ms"] = _ms(lambda: comp(*inputs))
    return out


def main() -> None:
    jobs = json.load(open(sys.argv[1]))
    results = []
    with tempfile.TemporaryDirectory() as tmpdir:
        for i, job in enumerate(jobs):
            try:
                if job["kind"] == "describe":
                    results.append({"ok": True, "desc": describe(job)})
                elif job["kind"] == "check":
                    results.append(check(job, tmpdir, i))
                elif job["kind"] == "compile":
                    results.append(compile_kernels(job, tmpdir, i))
                elif job["kind"] == "bench":
                    results.append(bench(job, tmpdir, i))
                else:
                    results.append({"ok": False, "error": f"unknown job kind {job['kind']}"})
            except Exception as e:
                results.append(
                    {
                        "ok": False,
                        "error": f"{type(e).__name__}: {e}",
                        "traceback": traceback.format_exc()[-3000:],
                    }
                )
    json.dump(results, open(sys.argv[2], "w"))


if __name__ == "__main__":
    main()
