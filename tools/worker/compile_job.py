"""The `compile` job: compile every launched @triton.jit kernel of a candidate for sm_90.

How each kernel is launched (argument types, constexprs, num_warps/num_stages) is recorded by
running ModelNew.forward once on the task's inputs (under the interpreter on CPU). The recorded
signatures are then compiled with `triton.compile(ASTSource, target=GPUTarget("cuda", 90, 32))`
in a process WITHOUT the interpreter (a child process on CPU), and ptxas -v gives registers and
spills. Errors are mapped to the candidate file's 1-based line numbers.
"""

from __future__ import annotations

import ast
import inspect
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

_LAUNCH_OPTIONS = (
    "num_warps",
    "num_stages",
    "num_ctas",
    "maxnreg",
    "enable_fp_fusion",
    "launch_cooperative_grid",
    "launch_pdl",
    "debug",
)
_DTYPES = {
    "float32": "fp32",
    "float16": "fp16",
    "bfloat16": "bf16",
    "float64": "fp64",
    "int32": "i32",
    "int64": "i64",
    "int16": "i16",
    "int8": "i8",
    "uint8": "u8",
    "bool": "i1",
    "float8_e4m3fn": "fp8e4nv",
    "float8_e5m2": "fp8e5",
}


def _is_constexpr(param: inspect.Parameter) -> bool:
    ann = param.annotation
    if ann is inspect.Parameter.empty:
        return False
    return "constexpr" in (ann if isinstance(ann, str) else getattr(ann, "__name__", repr(ann)))


def _jsonable(v: Any) -> Any:
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    return str(v)


def launch_signature(kernel: Any, args: tuple, kwargs: dict) -> dict[str, Any]:
    """How Triton's launcher would specialise this launch: argument types, constexprs, and (as
    the JIT does) integers equal to 1 and 16-divisible integers and 16-byte-aligned pointers,
    so the compiled program is the one that runs (unit strides give vector loads and wgmma)."""
    import torch

    fn = kernel.fn
    sig = inspect.signature(fn)
    kw = dict(kwargs)
    opts = {k: kw.pop(k) for k in list(kw) if k in _LAUNCH_OPTIONS}
    bound = sig.bind_partial(*args, **kw)
    bound.apply_defaults()
    signature: dict[str, str] = {}
    constexprs: dict[str, Any] = {}
    ones: list[str] = []
    divisible: list[str] = []
    for name, param in sig.parameters.items():
        v = bound.arguments.get(name)
        if _is_constexpr(param):
            signature[name] = "constexpr"
            constexprs[name] = _jsonable(
                v.value if hasattr(v, "value") and not isinstance(v, torch.Tensor) else v
            )
        elif isinstance(v, torch.Tensor):
            signature[name] = "*" + _DTYPES.get(str(v.dtype).replace("torch.", ""), "fp32")
            if v.data_ptr() % 16 == 0:
                divisible.append(name)
        elif isinstance(v, bool):
            signature[name] = "i1"
        elif isinstance(v, int):
            signature[name] = "i32" if -(2**31) <= v < 2**31 else "i64"
            if v == 1:
                ones.append(name)
            elif v % 16 == 0:
                divisible.append(name)
        elif isinstance(v, float):
            signature[name] = "fp32"
        elif v is None:
            signature[name] = "constexpr"
            constexprs[name] = None
        else:
            signature[name] = "constexpr"
            constexprs[name] = _jsonable(v)
    return {
        "name": fn.__name__,
        "signature": signature,
        "constexprs": constexprs,
        "ones": ones,
        "divisible": divisible,
        "num_warps": int(opts.get("num_warps", 4)),
        "num_stages": int(opts.get("num_stages", 3)),
    }


def _specialised(fn: Any, spec: dict[str, Any]) -> tuple[dict[str, str], dict[str, Any], dict]:
    """(signature, constexprs, attrs) for ASTSource: the recorded specialisation, less what the
    kernel opts out of (`do_not_specialize`, `do_not_specialize_on_alignment`)."""
    signature, constexprs = dict(spec["signature"]), dict(spec["constexprs"])
    params = {p.name: (i, p) for i, p in enumerate(fn.params)}
    attrs: dict[tuple[int, ...], list] = {}
    for name in spec.get("ones", []):
        i, p = params[name]
        if not p.do_not_specialize:
            signature[name] = "constexpr"
            constexprs[name] = 1
    for name in spec.get("divisible", []):
        i, p = params[name]
        if not (p.do_not_specialize or p.do_not_specialize_on_alignment):
            attrs[(i,)] = [["tt.divisibility", 16]]
    return signature, constexprs, attrs


def _mma(ptx: str) -> str | None:
    """The tensor-core instruction the kernel's dots compiled to: Hopper's asynchronous
    warpgroup MMA, the synchronous per-warp MMA of earlier GPUs, or none (FMA or no dot)."""
    if "wgmma.mma_async" in ptx:
        return "wgmma"
    if re.search(r"\bmma\.sync\b", ptx):
        return "mma.sync"
    return None


def _def_lines(source: str) -> dict[str, int]:
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return {}
    return {n.name: n.lineno for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)}


def ptxas_info(ptx: str) -> tuple[int | None, int | None]:
    import triton

    ptxas = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "ptxas"
    if not ptxas.exists():
        return None, None
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "k.ptx"
        p.write_text(ptx)
        r = subprocess.run(
            [str(ptxas), "-v", "--gpu-name", "sm_90a", str(p), "-o", str(Path(d) / "k.cubin")],
            capture_output=True,
            text=True,
            timeout=120,
        )
    text = r.stdout + r.stderr
    regs = re.search(r"Used (\d+) registers", text)
    spills = re.findall(r"(\d+) bytes spill (?:stores|loads)", text)
    return (int(regs.group(1)) if regs else None, sum(int(s) for s in spills) if spills else None)


def compile_recorded(source: str, module: Any, specs: list[dict[str, Any]]) -> dict[str, Any]:
    """Compile the recorded launches of `module`'s kernels (run without the interpreter)."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    defs = _def_lines(source)
    kernels: list[dict[str, Any]] = []
    for spec in specs:
        obj = getattr(module, spec["name"], None)
        while obj is not None and not isinstance(obj, triton.runtime.jit.JITFunction) and hasattr(obj, "fn"):
            obj = obj.fn
        if obj is None or not isinstance(obj, triton.runtime.jit.JITFunction):
            return {
                "ok": False,
                "error_kind": "no_kernel",
                "error": f"kernel `{spec['name']}` is not a module-level @triton.jit function",
                "error_line": defs.get(spec["name"]),
                "kernels": kernels,
            }
        signature, constexprs, attrs = _specialised(obj, spec)
        src = ASTSource(fn=obj, signature=signature, constexprs=constexprs, attrs=attrs)
        try:
            k = triton.compile(
                src,
                target=GPUTarget("cuda", 90, 32),
                options={"num_warps": spec["num_warps"], "num_stages": spec["num_stages"]},
            )
        except Exception as e:
            line = None
            node = getattr(e, "node", None)
            if node is not None and hasattr(node, "lineno") and spec["name"] in defs:
                line = defs[spec["name"]] + node.lineno - 1
            msg = str(getattr(e, "error_message", None) or e).strip().splitlines()
            first = next((m for m in msg if m.strip()), type(e).__name__)
            return {
                "ok": False,
                "error_kind": "triton",
                "error_line": line,
                "error": f"{spec['name']}: {type(e).__name__}: {first}"[:600],
                "kernels": kernels,
            }
        regs, spills = ptxas_info(k.asm["ptx"])
        kernels.append(
            {
                "name": spec["name"],
                "num_warps": spec["num_warps"],
                "num_stages": spec["num_stages"],
                "registers": regs,
                "spills": spills,
                "shared_bytes": int(k.metadata.shared),
                "mma": _mma(k.asm["ptx"]),
                "constants": spec["constexprs"],
            }
        )
    return {"ok": True, "kernels": kernels}


def record_launches(
    source: str,
    mod: Any,
    task: Any,
    device: str,
    options: dict[str, Any],
    model: Any = None,
    keep: bool = False,
) -> dict[str, Any]:
    """Record how ModelNew.forward launches its kernels: {"ok": True, "specs": [...]}, or a failed
    compile report. The only step of compiling that runs on the GPU. `model`: ModelNew(*init)
    already built on the CPU under seed 0 (runner._stage_record_model), else built here. The
    result's "phases" say where the seconds went (build, to_device, inputs, forward). keep: the
    result's "kept" is (model, inputs) on the device after the call, for a screening timing.

    Runs in the runner (tools/worker/runner.py): it imports and runs the candidate."""
    import torch

    from tools.worker.common import launch_log, line_in, one_line, to_device
    from tools.worker.laps import Laps

    t0 = time.monotonic()
    launches: list[Any] = []
    lap = Laps()
    try:
        if model is None:
            torch.manual_seed(0)
            model = mod.ModelNew(*task.init_args())
            lap("build")
        model = model.to(device).eval()
        lap("to_device")
        inputs = to_device(task.inputs(0, device), device)
        lap("inputs")
        with torch.no_grad(), launch_log(record_args=True) as log:
            launches = log.launches
            model(*inputs)
        if device == "cuda":
            torch.cuda.synchronize()
        lap("forward")
    except Exception as e:
        from_triton = "triton" in type(e).__module__ or "InterpreterError" in type(e).__name__
        recorded = [x for x in launches if x.module == mod.__name__]
        if from_triton and recorded:
            # The failing launch was recorded before it ran: the real compiler gives the precise error.
            res = _compile_specs(
                source, mod, [launch_signature(x.kernel, x.args, x.kwargs) for x in recorded[-1:]], options
            )
            if not res.get("ok"):
                res["seconds"] = time.monotonic() - t0
                return res
        return {
            "ok": False,
            "error_kind": "triton" if from_triton else "crash",
            "error": f"ModelNew.forward raised while recording kernel launches: {one_line(e)}",
            "error_line": line_in(e, "egg_candidate_"),
            "seconds": time.monotonic() - t0,
        }
    own = [x for x in launches if x.module == mod.__name__]
    if not own:
        return {
            "ok": False,
            "error_kind": "no_kernel",
            "error": "ModelNew.forward launched no @triton.jit kernel of the candidate",
            "seconds": time.monotonic() - t0,
        }
    specs: list[dict[str, Any]] = []
    compiled: list[Any] = []
    seen: set[str] = set()
    for launch in own:
        spec = launch_signature(launch.kernel, launch.args, launch.kwargs)
        key = json.dumps(spec, sort_keys=True)
        if key not in seen:
            seen.add(key)
            specs.append(spec)
            compiled.append(launch.compiled)
    # `compiled` (the kernels the JIT built for these launches) and `kept` stay in the runner
    return {
        "ok": True,
        "specs": specs,
        "compiled": compiled,
        "seconds": time.monotonic() - t0,
        "phases": lap.phases,
        **({"kept": (model, inputs)} if keep else {}),
    }


def report_from_jit(specs: list[dict[str, Any]], compiled: list[Any]) -> dict[str, Any] | None:
    """The compile report from the kernels the JIT already built and loaded on the GPU for the
    recorded launches (registers and local memory from the loaded binary, shared memory and the
    MMA kind from the compiled program), instead of compiling each launch again for sm_90 and
    running ptxas on it: the same programs, compiled once. None when any launch lacks its loaded
    kernel (then the caller compiles)."""
    kernels: list[dict[str, Any]] = []
    for spec, k in zip(specs, compiled, strict=True):
        asm = getattr(k, "asm", None)
        regs = getattr(k, "n_regs", None)
        if k is None or asm is None or "ptx" not in asm or not isinstance(regs, int):
            return None
        local = getattr(k, "n_spills", None)  # 4-byte words of local memory per thread
        kernels.append(
            {
                "name": spec["name"],
                "num_warps": spec["num_warps"],
                "num_stages": spec["num_stages"],
                "registers": regs,
                "spills": int(local) * 4 if isinstance(local, int) else None,
                "shared_bytes": int(k.metadata.shared),
                "mma": _mma(asm["ptx"]),
                "constants": spec["constexprs"],
            }
        )
    return {"ok": True, "kernels": kernels, "source": "jit"}


def run_compile(job, runner: Any = None) -> dict[str, Any]:
    """The judge's side: static rules first (a rejected candidate never runs), then the runner
    loads the candidate and records and compiles its launches. The report is the runner's."""
    from tools.worker.judge import RunnerFailure, RunnerProcess
    from tools.worker.static_rules import static_findings

    t0 = time.monotonic()
    source = job.candidate_source or ""
    bad = syntax_failure(source)
    if bad is None and job.options.get("static_rules", True) is not False:
        found = static_findings(source)
        if found:
            line = re.search(r"\(line (\d+)\)", " ".join(found))
            bad = {
                "ok": False,
                "error_kind": "static",
                "error": "; ".join(found)[:1200],
                "error_line": int(line.group(1)) if line else None,
            }
    if bad is not None:
        return {**bad, "seconds": time.monotonic() - t0}
    own = runner is None
    if runner is None:
        runner = RunnerProcess(job, timeout_s=float(job.options.get("runner_timeout_s", 280)))
    try:
        failed = runner.load(job)
        if failed is not None:
            kind = failed.get("kind") if failed.get("kind") in ("syntax", "import") else "crash"
            return {
                "ok": False,
                "error_kind": kind,
                "error": failed["error"],
                "error_line": failed.get("line"),
                "seconds": time.monotonic() - t0,
            }
        from tools.worker.gpulock import gpu_lock

        opts = {k: v for k, v in job.options.items() if k == "compile_timeout_s"}
        pre: dict[str, Any] = {}
        try:
            if runner.pending == "precompile":
                pre = runner.finish("precompile")  # sent by start_precompile, maybe long done
            elif job.device == "cuda":
                # The kernels are compiled before the GPU lock is taken (runner.op_precompile: no
                # GPU work): a reader holding the lock through seconds of compiling would keep
                # every timing job, and the readers queued behind it, off the GPU.
                pre = runner.request("precompile", overrides=dict(job.size_overrides))
            t_pre = time.monotonic()
            # The GPU lock (shared) covers only the recording call, not the sm_90 compile. A
            # screened job's runner keeps the recording call's model and inputs: the screening
            # timing needs a built, called candidate and nothing of the reference's, so it goes
            # straight to its exclusive hold (timing._screen) instead of building and calling the
            # candidate again under a second shared hold.
            keep = job.device == "cuda" and bool(job.options.get("screen"))
            with gpu_lock(exclusive=False, step="compile.record"):
                r = runner.request("record", keep=keep, **opts)
            runner.ready_to_time = bool(keep and r.get("ok") and "report" not in r and r.get("kept"))
            t_rec = time.monotonic()
            rec_parts = r.get("phases") if isinstance(r.get("phases"), dict) else {}
            if r.get("ok") and "report" not in r:
                r = runner.request("compile", **opts)
        except RunnerFailure as f:
            kind = "timeout" if f.rule == "sandbox.timeout" else "crash"
            return {"ok": False, "error_kind": kind, "error": f.message, "seconds": time.monotonic() - t0}
        if not r.get("ok"):
            return {
                "ok": False,
                "error_kind": "crash",
                "error": str(r.get("error"))[:600],
                "error_line": r.get("line"),
                "seconds": time.monotonic() - t0,
            }
        report = dict(r.get("report") or {})
        report["seconds"] = time.monotonic() - t0
        report["phases"] = {
            "precompile": round(t_pre - t0, 3),
            "record": round(t_rec - t_pre, 3),
            "compile_specs": round(time.monotonic() - t_rec, 3),
            # the runner's parts of the recording call (held under the shared GPU lock)
            **{f"record.{k}": v for k, v in rec_parts.items() if isinstance(v, (int, float))},
        }
        if pre:
            keep = (
                "kernels",
                "launchers",
                "stopped",
                "cuda_context",
                "record_model_staged",
                "stage_error",
                "preloaded",
                "preload_failed",
                "preload_s",
            )
            report["precompiled"] = {k: pre[k] for k in keep if k in pre}
            # the runner's own seconds: more than phases["precompile"] where it ran meanwhile
            report["phases"]["precompile_runner"] = round(float(pre.get("seconds") or 0.0), 3)
        return report
    finally:
        if own:
            runner.close()


def start_precompile(job, runner: Any) -> bool:
    """Load the candidate in the runner and set it compiling its kernels (runner.op_precompile,
    CPU work only) without waiting: the judge meanwhile queues for the job's memory shares and
    makes its CUDA context, and run_compile reads the reply. On the H100 (2026-12-06, 8 suite
    tasks) a job waited 5.8 s for memory, then 3.4 s for its context, then 5.0 s for this compile,
    one after the other. True when the request is on its way; a load that failed, or a runner
    that died, is left for run_compile to report."""
    from tools.worker.judge import RunnerFailure

    if job.device != "cuda" or runner.load(job) is not None:
        return False
    try:
        runner.start("precompile", overrides=dict(job.size_overrides))
    except RunnerFailure:
        return False  # run_compile's next request raises it again and reports the crash
    return True


def syntax_failure(source: str) -> dict[str, Any] | None:
    try:
        ast.parse(source)
    except SyntaxError as e:
        return {"ok": False, "error_kind": "syntax", "error": f"SyntaxError: {e.msg}", "error_line": e.lineno}
    return None


def _compile_specs(
    source: str, mod: Any, specs: list[dict[str, Any]], options: dict[str, Any]
) -> dict[str, Any]:
    if os.environ.get("TRITON_INTERPRET") == "1":
        return _compile_in_child(source, specs, float(options.get("compile_timeout_s", 240)))
    return compile_recorded(source, mod, specs)


def _compile_in_child(source: str, specs: list[dict[str, Any]], timeout_s: float) -> dict[str, Any]:
    """The interpreter replaces @triton.jit at import time, so real compilation needs a process
    that imported triton without TRITON_INTERPRET."""
    # TMPDIR is the job's own directory in the sandbox; removed here for in-process callers too.
    d = Path(tempfile.mkdtemp(prefix="egg-compile-"))
    try:
        return _run_compiler(d, source, specs, timeout_s)
    finally:
        shutil.rmtree(d, ignore_errors=True)


def _run_compiler(d: Path, source: str, specs: list[dict[str, Any]], timeout_s: float) -> dict[str, Any]:
    (d / "spec.json").write_text(json.dumps({"source": source, "specs": specs}))
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    try:
        r = subprocess.run(
            [sys.executable, "-m", "tools.worker.compile_job", str(d / "spec.json"), str(d / "out.json")],
            env=env,
            cwd=str(d),
            capture_output=True,
            text=True,
            timeout=timeout_s,
        )
    except subprocess.TimeoutExpired:
        return {"ok": False, "error_kind": "timeout", "error": f"compilation exceeded {timeout_s:.0f}s"}
    out = d / "out.json"
    if not out.exists():
        tail = (r.stderr.strip().splitlines() or [""])[-1]
        return {
            "ok": False,
            "error_kind": "crash",
            "error": f"compiler process exited with {r.returncode}: {tail[:300]}",
        }
    return json.loads(out.read_text())


def _child_main(spec_path: str, out_path: str) -> None:
    from tools.worker.common import load_module

    spec = json.loads(Path(spec_path).read_text())
    mod = load_module(spec["source"], "candidate")
    Path(out_path).write_text(json.dumps(compile_recorded(spec["source"], mod, spec["specs"])))


if __name__ == "__main__":
    _child_main(sys.argv[1], sys.argv[2])
