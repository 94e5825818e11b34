"""The runner: the only process that imports and runs candidate code. It produces data, never a verdict.

The judge (tools/worker/judge.py) forks it, it confines itself (tools/worker/confine.py), and
then it serves the judge's requests over the channel (tools/worker/channel.py):

  load     import the task (for weights and inputs) and the candidate
  compile  record ModelNew.forward's kernel launches and compile them for sm_90
  build    a ModelNew with the reference's weights (drawn under the judge's seed)
  call     inputs from the judge's seed, one forward, the outputs' bytes into the slab
  time     CUDA-event timing of the forward (triton.testing.do_bench)
  wall     many forwards back to back, timed from outside by the judge, last output returned

Everything it reports (outputs, launch counts, the PyTorch ops it saw, its timings) is a claim:
the judge compares the outputs with its own float64 reference for inputs only it and this
process know, cross-checks timings against its own clock, and decides. Candidate code that
takes this process over can therefore only lie about things the judge checks.
"""

from __future__ import annotations

import copy
import os
import sys
import time
from typing import Any

import torch

from tools.worker import channel
from tools.worker.common import (
    BadTask,
    CandidateLoadError,
    OpRecorder,
    as_outputs,
    fingerprint,
    launch_log,
    line_in,
    load_task,
    one_line,
    same_fingerprint,
    sync,
    to_device,
)
from tools.worker.laps import Laps

# `time` with cudagraph="auto" (a stage timing) also times the forward's CUDA-graph replay when
# it launches at least this many of the candidate's kernels: where launches are many, the host
# may cost more than the GPU work, and the replay time says how much (the profiler's evidence).
CUDAGRAPH_PROBE_LAUNCHES = 8


class Refused(Exception):
    """A request the candidate fails (its own fault): the reply names the rule."""

    def __init__(self, rule: str, error: str, line: int | None = None) -> None:
        super().__init__(error)
        self.rule, self.error, self.line = rule, error, line


def _storage(x: torch.Tensor) -> int:
    return x.untyped_storage().data_ptr()


def _module_storages(module: Any) -> set[int]:
    """Storages of the tensors a task module holds at its top level (directly or in a list, tuple
    or dict): a get_inputs() that returns one of them returns it on every call."""
    found: set[int] = set()
    for v in vars(module).values() if module is not None else ():
        items = v.values() if isinstance(v, dict) else v if isinstance(v, (list, tuple)) else (v,)
        found.update(_storage(t) for t in items if isinstance(t, torch.Tensor))
    return found


def scaled(xs: list[Any], module: Any = None) -> list[Any]:
    """x * 3 - 0.5 for every floating-point tensor of `xs`, get_inputs()'s tensors of one call.

    In place: a copy would hold the input twice over while it is made (an 8 GiB input peaked at
    24 GiB in the judge and again in the runner). A tensor whose storage another input or a
    top-level tensor of the task `module` shares is scaled out of place instead, so nothing is
    scaled twice and nothing outside this call's inputs changes. Both ways round the same two
    steps, so the values are the same bits."""
    tensors = [x for x in xs if isinstance(x, torch.Tensor)]
    counts: dict[int, int] = {}
    for x in tensors:
        counts[_storage(x)] = counts.get(_storage(x), 0) + 1
    keep = _module_storages(module)
    out: list[Any] = []
    for x in xs:
        if not isinstance(x, torch.Tensor) or not x.is_floating_point():
            out.append(x)
        elif counts[_storage(x)] == 1 and _storage(x) not in keep and not x.requires_grad:
            try:
                out.append(x.mul_(3.0).sub_(0.5))
            except RuntimeError:  # elements that share memory (an expanded tensor): nothing written
                out.append(x * 3.0 - 0.5)
        else:
            out.append(x * 3.0 - 0.5)
    return out


def _refill(dst: list[Any], src: list[Any]) -> None:
    """`src`'s values into `dst`'s tensors, in place; no reference to `src` is kept."""
    for x, y in zip(dst, src, strict=False):
        if isinstance(x, torch.Tensor):
            x.copy_(y)


def copy_weights(ref: torch.nn.Module, cand: torch.nn.Module) -> None:
    rsd, csd = ref.state_dict(), cand.state_dict()
    if set(rsd) == set(csd):
        for k in rsd:
            if rsd[k].shape != csd[k].shape:
                raise Refused(
                    "weights.mismatch",
                    f"`{k}` has shape {list(csd[k].shape)}, reference {list(rsd[k].shape)}",
                )
        cand.load_state_dict(rsd)
        return
    # Same structure under other names: match in order when every shape agrees.
    rv, cv = list(rsd.items()), list(csd.items())
    if len(rv) == len(cv) and all(a[1].shape == b[1].shape for a, b in zip(rv, cv, strict=False)):
        cand.load_state_dict({cn: rt for (cn, _), (_, rt) in zip(cv, rv, strict=False)})
        return
    missing = sorted(set(rsd) - set(csd))[:4]
    extra = sorted(set(csd) - set(rsd))[:4]
    raise Refused(
        "weights.mismatch",
        f"ModelNew's state_dict does not match the reference (missing {missing}, unexpected {extra})",
    )


def load_candidate(source: str) -> Any:
    from tools.worker.common import load_module

    try:
        mod = load_module(source, "candidate")
    except SyntaxError as e:
        raise CandidateLoadError(f"syntax error: {e.msg}", e.lineno, "syntax") from None
    except (Exception, SystemExit) as e:  # sys.exit() at import is a load failure too
        raise CandidateLoadError(one_line(e), line_in(e, "egg_candidate_"), "import") from None
    if not hasattr(mod, "ModelNew"):
        raise CandidateLoadError("candidate defines no ModelNew", None, "import")
    return mod


def _build_key(m: dict[str, Any]) -> tuple[str, int]:
    """A build request's sizes and weight seed, as op_stage and op_build match them."""
    return repr(sorted((m.get("overrides") or {}).items())), int(m["weight_seed"])


def _off_gpu(build: Any) -> tuple[Any, str | None]:
    """`build()` with nothing run on the GPU (the judge holds no GPU lock for it): (its result,
    None), or (None, why) where it failed or tried to make a CUDA tensor or launch a kernel;
    the caller then builds it again under the lock, where a failure is reported."""
    from tools.worker.common import compile_only

    try:
        with compile_only() as state:
            made = build()
            if state["kernels"]:
                raise RuntimeError("ModelNew() launches a kernel")
    except (Exception, SystemExit) as e:
        return None, one_line(e)[:200]
    return made, None


class Runner:
    def __init__(self, device: str, slab: int, reply_fd: int) -> None:
        self.device = device
        self.slab = slab
        self.reply_fd = reply_fd
        self.task_source = ""
        self.source = ""
        self.tasks: dict[str, Any] = {}
        self.task: Any = None
        self.mod: Any = None
        self.model: Any = None
        self.inputs: list[Any] = []
        self.specs: list[dict[str, Any]] = []
        self.compiled: list[Any] = []  # the JIT's kernels for self.specs (GPU)
        self.record_model: Any = None  # the recording call's ModelNew, built before the lock
        self.staged_build: Any = None  # ((sizes, weight seed), ModelNew on the CPU): op_stage

    # -- requests ------------------------------------------------------------------------------

    def op_load(self, m: dict[str, Any]) -> dict[str, Any]:
        self.task_source = str(m["task_source"])
        self.source = str(m["candidate_source"])
        self.task = self._task(m.get("overrides") or {})
        try:
            self.mod = load_candidate(self.source)
        except CandidateLoadError as e:
            return {"ok": False, "rule": "load.error", "kind": e.kind, "error": str(e), "line": e.line}
        return {"ok": True, "module": self.mod.__name__}

    def op_precompile(self, m: dict[str, Any]) -> dict[str, Any]:
        """Compile the candidate's kernels without running anything on the GPU (the judge asks
        for this without holding the GPU lock: compiling is CPU work): ModelNew and the task's
        inputs at `overrides` are built on the meta device (shapes and dtypes only), and forward
        runs with every Triton launch turned into the JIT's warm-up, which builds the program for
        the launch's specialisation into the in-process cache the real launches then hit. Any
        PyTorch op on a CUDA tensor raises there. Best effort: whatever stops it (a host value
        read from a tensor, an op meta tensors lack) leaves the rest to be compiled by the first
        real call, as without it; the reply says how far it got."""
        from tools.worker.common import PRECOMPILE_THREADS, compile_only

        task = self._task(m.get("overrides") or {})
        done = launchers = 0
        libraries: set[str] = set()
        staged = self._stage_record_model(task)
        stopped: dict[str, Any] = {}
        try:
            with compile_only(PRECOMPILE_THREADS) as state, torch.no_grad(), torch.device("meta"):
                init = task.init_args()
                model = self.mod.ModelNew(*copy.deepcopy(init)).eval()
                inputs = task.inputs(0, "meta")
                try:
                    model(*inputs)
                finally:
                    done, launchers = int(state["kernels"]), int(state["launchers"])
                    libraries = set(state["libraries"])
                    # a recurrent layer is cuDNN's on a GPU, per-step matrix products on meta
                    # tensors; other layers (often kept only for their weights) count if called
                    if any(isinstance(x, torch.nn.RNNBase) for x in model.modules()):
                        libraries.add("cudnn")
        except (Exception, SystemExit) as e:
            stopped = {"stopped": one_line(e)[:300]}
        return {
            "ok": True,
            "kernels": done,
            "launchers": launchers,
            **stopped,
            **staged,
            **self._context_note(),
            **self._preload(libraries),
        }

    def _preload(self, libraries: set[str]) -> dict[str, Any]:
        """Load the vendor libraries the forward's PyTorch ops use on the GPU (seen on the meta
        device) now, before the judge takes the GPU lock for the recording call, which would
        otherwise load them inside its hold (gpumem.preload_libraries: once per process)."""
        if self.device != "cuda" or not libraries:
            return {}
        from tools.worker.gpumem import preload_libraries

        return preload_libraries(libraries)

    def _stage_record_model(self, task: Any) -> dict[str, Any]:
        """Build the recording call's ModelNew on the CPU now, before the judge takes the GPU lock
        for the recording (op_record then only moves it to the GPU): building a model initialises
        its weights on the CPU, work a shared hold of the lock kept every waiting timer from. Only
        for the task the runner loaded (not a second shape's precompile), before any recording.
        {"record_model_staged": seconds} or {"record_model_staged": None, "stage_error": why}."""
        if self.device != "cuda" or task is not self.task or self.specs:
            return {}
        t0 = time.monotonic()

        def build() -> Any:
            torch.manual_seed(0)  # record_launches's seed
            return self.mod.ModelNew(*task.init_args())

        self.record_model, why = _off_gpu(build)
        if why is not None:  # record_launches builds it again and reports it
            return {"record_model_staged": None, "stage_error": why}
        return {"record_model_staged": round(time.monotonic() - t0, 4)}

    def _context_note(self) -> dict[str, Any]:
        """{"cuda_context": bool} on a GPU: whether compiling made this process's CUDA context
        (the judge may ask for the compile before the job holds its memory shares)."""
        if self.device != "cuda":
            return {}
        try:
            made = torch.cuda.is_initialized() and bool(
                torch._C._cuda_hasPrimaryContext(torch.cuda.current_device())
            )
        except Exception:  # noqa: BLE001 - a note only
            return {}
        return {"cuda_context": made}

    def op_record(self, m: dict[str, Any]) -> dict[str, Any]:
        """Record the kernels' launches (a GPU step). A failure is the compile report itself."""
        from tools.worker.compile_job import record_launches

        staged, self.record_model = self.record_model, None
        keep = bool(m.get("keep"))
        res = record_launches(self.source, self.mod, self.task, self.device, m, model=staged, keep=keep)
        if not res.get("ok"):
            return {"ok": True, "report": res, "phases": res.get("phases") or {}}
        self.specs = res["specs"]
        self.compiled = res.get("compiled") or []
        if keep:
            # the built, called candidate a screening timing times next (op_time)
            self.model, self.inputs = res.pop("kept")
        return {"ok": True, "phases": res.get("phases") or {}, "kept": keep}

    def op_compile(self, m: dict[str, Any]) -> dict[str, Any]:
        """The compile report of the recorded launches: on a GPU from the kernels the recording
        call's JIT built (compiled once), otherwise compiled here for sm_90 (no GPU needed)."""
        from tools.worker.compile_job import _compile_specs, report_from_jit

        if self.device == "cuda" and len(self.compiled) == len(self.specs):
            report = report_from_jit(self.specs, self.compiled)
            if report is not None:
                return {"ok": True, "report": report}
        return {"ok": True, "report": _compile_specs(self.source, self.mod, self.specs, m)}

    def op_release(self, m: dict[str, Any]) -> dict[str, Any]:
        """Drop the built model and its inputs and give the allocator's cached blocks back: the
        judge is about to release its memory shares and queue for the check's (evaluate.py)."""
        import gc

        self.model, self.inputs = None, []
        gc.collect()
        if self.device == "cuda" and torch.cuda.is_initialized():
            torch.cuda.empty_cache()
            return {"ok": True, "reserved_bytes": int(torch.cuda.memory_reserved())}
        return {"ok": True}

    def _cpu_build(self, task: Any, seed: int) -> Any:
        """ModelNew with the reference's weights for `seed`, on the CPU (op_build's first part)."""
        init = task.init_args()
        torch.manual_seed(seed)
        ref = task.module.Model(*init)
        try:
            torch.manual_seed(seed ^ 0x5A5A)
            cand = self.mod.ModelNew(*copy.deepcopy(init))
        except Exception as e:
            raise Refused("load.error", f"ModelNew(*get_init_inputs()) raised {one_line(e)}") from None
        if not isinstance(cand, torch.nn.Module):
            raise Refused("load.error", "ModelNew is not a torch.nn.Module")
        copy_weights(ref, cand)
        return cand

    def op_stage(self, m: dict[str, Any]) -> dict[str, Any]:
        """op_build's CPU part ahead of time: the judge asks for it before it takes the GPU lock
        for the build (two models' weights initialised on the CPU kept every waiting timer off
        the GPU while a check's first trial held the lock). Under the no-GPU-work mode: a
        constructor that makes CUDA tensors or launches a kernel is built by op_build under the
        lock, as is anything that fails here (op_build reports it). One staged instance, used by
        the next build of the same sizes and weight seed only."""
        self.staged_build = None
        if self.device != "cuda":
            return {"ok": True, "staged": False}
        key = _build_key(m)
        cand, why = _off_gpu(lambda: self._cpu_build(self._task(m.get("overrides") or {}), key[1]))
        if why is not None:
            return {"ok": True, "staged": False, "why": why}
        self.staged_build = (key, cand)
        return {"ok": True, "staged": True}

    def op_build(self, m: dict[str, Any]) -> dict[str, Any]:
        lap = Laps()
        task = self._task(m.get("overrides") or {})
        key = _build_key(m)
        staged, self.staged_build = self.staged_build, None
        cand = staged[1] if staged is not None and staged[0] == key else self._cpu_build(task, key[1])
        lap("cpu")
        self.model = cand.to(self.device).eval()
        self.task = task
        self.inputs = []
        lap("to_device")
        # where a build's seconds go: the two models made on the CPU, then the move to the GPU
        return {"ok": True, "phases": lap.phases}

    def op_call(self, m: dict[str, Any]) -> dict[str, Any]:
        # The last call's inputs stay alive while this call's are made, so new tensors never
        # take their addresses (a candidate that kept the first call's pointers is caught).
        fresh = self._inputs(int(m["input_seed"]), m.get("transform"))
        if m.get("reuse") and self.inputs:
            # the same tensors as the last call, new values: a cache keyed on them must miss
            _refill(self.inputs, fresh)
        else:
            self.inputs = fresh
        # Only self.inputs from here: the new values' own copy would be a third input copy at
        # the forward's peak, next to the pristine one (an 8 GiB input peaked at 24 GiB here).
        del fresh
        # Inputs sent back are compared by the judge; otherwise this process claims them
        # unchanged, by fingerprints rather than a pristine copy (one input's worth of memory).
        back_inputs = bool(m.get("return_inputs"))
        before = (
            None
            if back_inputs
            else [fingerprint(x) if isinstance(x, torch.Tensor) else None for x in self.inputs]
        )
        rec = OpRecorder(poison=True)
        with torch.no_grad(), launch_log() as log:
            try:
                with rec:
                    out = self.model(*self.inputs)
                sync(self.device)
            except (Exception, SystemExit) as e:
                line = line_in(e, "egg_candidate_")
                where = f" (candidate line {line})" if line else ""
                raise Refused("run.error", f"ModelNew.forward raised {one_line(e)}{where}", line) from None
        outs = as_outputs(out)
        mutated = before is not None and not all(
            f is None or same_fingerprint(f, fingerprint(x)) for f, x in zip(before, self.inputs, strict=True)
        )
        back = [x for x in self.inputs if isinstance(x, torch.Tensor)] if back_inputs else []
        descs = channel.write_tensors(self.slab, outs + back)
        return {
            "ok": True,
            "outputs": descs[: len(outs)],
            "inputs": descs[len(outs) :],
            "launches": log.count(self.mod.__name__),
            "ops": rec.ops[:2000],
            "mutated": mutated,
        }

    def op_time(self, m: dict[str, Any]) -> dict[str, Any]:
        import triton.testing

        model, xs = self.model, self.inputs
        with torch.no_grad(), launch_log() as log:
            model(*xs)
            sync(self.device)
        launches = log.count(self.mod.__name__)
        with torch.no_grad():
            med, p20, p80 = triton.testing.do_bench(
                lambda: model(*xs),
                warmup=float(m.get("warmup_ms", 25)),
                rep=float(m.get("rep_ms", 100)),
                quantiles=[0.5, 0.2, 0.8],
            )
        out: dict[str, Any] = {"ok": True, "median": med, "p20": p20, "p80": p80, "launches": launches}
        probe = m.get("cudagraph")
        if probe is True or (probe == "auto" and launches >= CUDAGRAPH_PROBE_LAUNCHES):
            out.update(self._cudagraph(m))
        return out

    def _cudagraph(self, m: dict[str, Any]) -> dict[str, Any]:
        import triton.testing

        model, xs = self.model, self.inputs
        try:
            g = torch.cuda.CUDAGraph()
            s = torch.cuda.Stream()
            s.wait_stream(torch.cuda.current_stream())
            with torch.no_grad(), torch.cuda.stream(s):
                model(*xs)
            torch.cuda.current_stream().wait_stream(s)
            with torch.no_grad(), torch.cuda.graph(g):
                model(*xs)
            ms = triton.testing.do_bench(
                g.replay, warmup=float(m.get("warmup_ms", 25)), rep=float(m.get("rep_ms", 100))
            )
            return {"cudagraph_ms": float(ms)}
        except Exception as e:
            return {"cudagraph_error": one_line(e, 200)}

    def op_wall(self, m: dict[str, Any]) -> dict[str, Any]:
        _refill(self.inputs, self._inputs(int(m["input_seed"]), None))  # no copy held while timed
        sync(self.device)
        channel.send(self.reply_fd, {"phase": "start"})
        out = None
        with torch.no_grad():
            for _ in range(max(1, int(m["iters"]))):
                out = self.model(*self.inputs)
            sync(self.device)
        descs = channel.write_tensors(self.slab, as_outputs(out))
        return {"ok": True, "outputs": descs}

    # -- helpers -------------------------------------------------------------------------------

    def _task(self, overrides: dict[str, int]) -> Any:
        key = repr(sorted(overrides.items()))
        if key not in self.tasks:
            self.tasks[key] = load_task(self.task_source, dict(overrides))
        return self.tasks[key]

    def _inputs(self, seed: int, transform: str | None) -> list[Any]:
        xs = to_device(self.task.inputs(seed, self.device), self.device)
        return scaled(xs, self.task.module) if transform == "scaled" else xs


def serve(requests: int, replies: int, slab: int, device: str, applied: dict[str, Any]) -> None:
    """Answer requests until `exit` or the judge closes the channel. Never returns."""
    runner = Runner(device, slab, replies)
    channel.send(replies, {"ok": True, "op": "hello", "pid": os.getpid(), "isolation": applied})
    while True:
        try:
            msg = channel.recv(requests)
        except channel.ChannelError:
            break
        op = msg.get("op")
        if op == "exit":
            break
        t0 = time.monotonic()
        handler = getattr(runner, f"op_{op}", None)
        try:
            if handler is None:
                raise Refused("protocol", f"unknown request {op!r}")
            reply = handler(msg)
        except Refused as r:
            reply = {"ok": False, "rule": r.rule, "error": r.error, "line": r.line}
        except BadTask as e:
            reply = {"ok": False, "rule": "bad_task", "error": str(e)}
        except (Exception, SystemExit) as e:  # the candidate's failure, reported as such
            reply = {
                "ok": False,
                "rule": "run.error",
                "error": one_line(e),
                "line": line_in(e, "egg_candidate_"),
            }
        reply["op"] = op
        reply["seconds"] = round(time.monotonic() - t0, 4)
        if device == "cuda" and torch.cuda.is_initialized():
            reply["peak_bytes"] = int(torch.cuda.max_memory_allocated())
        try:
            channel.send(replies, reply)
        except OSError:
            break
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
