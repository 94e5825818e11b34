"""Shared worker machinery: loading tasks/candidates from source, size overrides, inputs,
launch hooks on Triton kernels and the PyTorch-op recorder used by the policy rules."""

from __future__ import annotations

import ast
import contextlib
import copy
import hashlib
import importlib.util
import math
import sys
import tempfile
import types
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from tools.sizes import int_constants
from tools.sizes import size_spans as _size_spans

_counter = [0]


class BadTask(Exception):
    """The task file itself is unusable (message is one line, shown to the user)."""


class InfraFault(Exception):
    """A fault of the machine, not of the task or the candidate (the GPU ran out of memory while
    other jobs held it): the job's result says so and the toolbox retries it."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


def is_oom(e: BaseException | str) -> bool:
    text = e if isinstance(e, str) else f"{type(e).__name__}: {e}"
    return "OutOfMemoryError" in text or "CUDA out of memory" in text or "CUDA error: out of memory" in text


class CandidateLoadError(Exception):
    def __init__(self, msg: str, line: int | None = None, kind: str = "import") -> None:
        super().__init__(msg)
        self.line = line
        self.kind = kind


def float_constants(source: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for node in ast.parse(source).body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            v = node.value
            if isinstance(v, ast.Constant) and type(v.value) is float:
                out[node.targets[0].id] = v.value
    return out


def apply_overrides(source: str, overrides: dict[str, int]) -> str:
    """Rewrite module-level int constants; unknown names are a bad task (typo protection)."""
    if not overrides:
        return source
    consts = int_constants(source)
    unknown = sorted(set(overrides) - set(consts))
    if unknown:
        raise BadTask(f"size override for unknown module-level int constant(s): {', '.join(unknown)}")
    lines = source.splitlines(keepends=True)
    spans = _size_spans(source)
    # Replace literal spans bottom-up so earlier offsets stay valid; keeps line numbers intact.
    edits = []
    for name, value in overrides.items():
        v = spans[name][1]
        edits.append((v.lineno, v.col_offset, v.end_lineno, v.end_col_offset, str(int(value))))
    for l0, c0, l1, c1, text in sorted(edits, reverse=True):
        if l0 != l1:
            raise BadTask("multi-line size constant cannot be overridden")
        s = lines[l0 - 1]
        b = s.encode()
        lines[l0 - 1] = (b[:c0] + text.encode() + b[c1:]).decode()
    return "".join(lines)


def load_module(source: str, stem: str, workdir: str | None = None) -> types.ModuleType:
    """Exec `source` as a fresh module backed by a real file (Triton reads kernel source via
    inspect, and tracebacks then carry the file's own line numbers)."""
    _counter[0] += 1
    digest = hashlib.sha1(source.encode()).hexdigest()[:8]
    name = f"egg_{stem}_{digest}_{_counter[0]}"
    # The sandbox's TMPDIR is the job's own directory; in-process callers (tests) get the system
    # temporary directory, never their working directory (the repository).
    d = Path(workdir or tempfile.gettempdir())
    path = d / f"{name}.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod  # triton's JIT resolves globals through the module
    spec.loader.exec_module(mod)
    return mod


def line_in(exc: BaseException, filename_part: str) -> int | None:
    """The innermost line in a file matching `filename_part`, following `raise ... from` chains
    (the Triton interpreter wraps the error raised inside the kernel)."""
    line = None
    seen: set[int] = set()
    e: BaseException | None = exc
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        tb = e.__traceback__
        while tb is not None:
            if filename_part in tb.tb_frame.f_code.co_filename:
                line = tb.tb_lineno
            tb = tb.tb_next
        e = e.__cause__ or e.__context__
    return line


def one_line(exc: BaseException, limit: int = 400) -> str:
    msg = str(exc).strip().splitlines()
    first = next((m for m in msg if m.strip()), "")
    return f"{type(exc).__name__}: {first}"[:limit]


def listed(name: str, value: Any) -> list[Any]:
    """What get_inputs()/get_init_inputs() returned, as a list; BadTask when it is not a list or
    tuple (None, a lone tensor), which is the task's fault, not a tool failure."""
    if not isinstance(value, (list, tuple)):
        raise BadTask(f"{name}() returned {type(value).__name__}; expected a list (or tuple) of inputs")
    return list(value)


@dataclass
class LoadedTask:
    module: types.ModuleType
    source: str
    sizes: dict[str, int]

    def init_args(self) -> list[Any]:
        return listed("get_init_inputs", self.module.get_init_inputs())

    def inputs(self, seed: int, device: str = "cpu") -> list[Any]:
        """get_inputs() under `seed`; on a GPU the tensors are created there directly (factory
        calls follow the default device), which for multi-GB inputs is seconds faster than CPU
        generation plus a copy and keeps host memory free when many workers share a machine."""
        torch.manual_seed(seed)
        if device == "cpu":
            return listed("get_inputs", self.module.get_inputs())
        with torch.device(device):
            return listed("get_inputs", self.module.get_inputs())


def load_task(source: str, overrides: dict[str, int]) -> LoadedTask:
    src = apply_overrides(source, overrides)
    try:
        mod = load_module(src, "task")
    except SyntaxError as e:
        raise BadTask(f"task file has a syntax error at line {e.lineno}: {e.msg}") from None
    except (Exception, SystemExit) as e:  # the task's own import failed (or exited): a bad task
        raise BadTask(f"task file failed to import: {one_line(e)}") from None
    for name in ("Model", "get_inputs", "get_init_inputs"):
        if not hasattr(mod, name):
            raise BadTask(
                f"task file defines no `{name}` (KernelBench format needs Model, get_inputs, get_init_inputs)"
            )
    if not (isinstance(mod.Model, type) and issubclass(mod.Model, torch.nn.Module)):
        raise BadTask("`Model` is not a torch.nn.Module subclass")
    sizes = int_constants(src)
    return LoadedTask(mod, src, sizes)


def to_device(x: Any, device: str) -> Any:
    if isinstance(x, torch.Tensor):
        return x.to(device)
    if isinstance(x, (list, tuple)):
        return type(x)(to_device(v, device) for v in x)
    return x


def clone_inputs(xs: list[Any]) -> list[Any]:
    return [x.detach().clone() if isinstance(x, torch.Tensor) else copy.deepcopy(x) for x in xs]


# Elements per chunk of `same_values`: its temporaries are a few bytes per element of one chunk.
SAME_CHUNK = 1 << 24


def chunk_ranges(n: int, size: int):
    """(start, end) of consecutive chunks of `size` flat elements covering n elements: how the
    checker, the describe job and the inputs test walk multi-GB tensors a slice at a time."""
    for s in range(0, n, size):
        yield s, min(n, s + size)


def same_values(x: torch.Tensor, y: torch.Tensor, chunk: int = SAME_CHUNK) -> bool:
    """Whether two tensors hold the same values, NaN equal to NaN (the "inputs unchanged" test).
    Compared in the tensors' own dtype, in chunks of flat elements when both are contiguous: a
    whole-tensor float64 copy (and nan_to_num of it) of both tensors took about 6x the input's size
    on top (measured on CPU: +6145 MiB for 1 GiB; this way +148 MiB), enough to exhaust an H200
    on a large elementwise task. Unlike nan_to_num, +-Inf is not confused with the largest finite value."""
    if x.shape != y.shape or x.dtype != y.dtype or x.device != y.device:
        return False
    if not (x.is_floating_point() or x.is_complex()):
        return torch.equal(x, y)

    def part(a: torch.Tensor, b: torch.Tensor) -> bool:
        return bool(((a == b) | (torch.isnan(a) & torch.isnan(b))).all())

    if not (x.is_contiguous() and y.is_contiguous()):
        return part(x, y)
    xf, yf = x.reshape(-1), y.reshape(-1)
    return all(part(xf[s:e], yf[s:e]) for s, e in chunk_ranges(xf.numel(), chunk))


def fingerprint(x: torch.Tensor, chunk: int = SAME_CHUNK) -> tuple[int, int] | torch.Tensor:
    """What the tensor's bytes hash to: the sum of its 4-byte (or 1-byte) words and their sum
    weighted by position, both mod 2**64, taken a chunk at a time (temporaries of a few bytes per
    element of one chunk). Any change to a word changes the first sum; a swap of two words, the
    second. A non-contiguous tensor's fingerprint is a copy of it. For the runner's claim that a
    forward left its multi-GB inputs unchanged, where a pristine copy would be one more input's
    worth of GPU memory; the claim is the candidate process's own either way."""
    x = x.detach()
    if not x.is_contiguous():
        return x.clone()
    words = x.reshape(-1).view(torch.uint8)
    if words.numel() % 4 == 0:
        with contextlib.suppress(RuntimeError):  # a storage offset not 4-byte aligned: bytes
            words = words.view(torch.int32)
    total = weighted = 0
    mask = (1 << 64) - 1
    for s, e in chunk_ranges(words.numel(), chunk):
        w = words[s:e].to(torch.int64)
        pos = torch.arange(s + 1, e + 1, device=w.device, dtype=torch.int64)
        total = (total + int(w.sum())) & mask
        weighted = (weighted + int((w * pos).sum())) & mask
    return total, weighted


def same_fingerprint(a: tuple[int, int] | torch.Tensor, b: tuple[int, int] | torch.Tensor) -> bool:
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and same_values(a, b)
    return a == b


def upcast_copies(xs: list[Any]) -> list[Any]:
    """Fresh copies of the inputs with floating tensors in float64: one new tensor each (the
    float64 conversion is the copy), not a clone and then a float64 copy of the clone."""
    return [
        (x.detach().to(torch.float64, copy=True) if x.is_floating_point() else x.detach().clone())
        if isinstance(x, torch.Tensor)
        else copy.deepcopy(x)
        for x in xs
    ]


# Factory functions whose float32 results (the default dtype) the float64 twin upcasts.
_FACTORIES = (
    "randn", "rand", "randn_like", "rand_like", "zeros", "ones", "full", "empty",
    "zeros_like", "ones_like", "full_like", "empty_like", "tensor", "arange", "linspace", "eye",
)  # fmt: skip


class _Float64Twin(TorchFunctionMode):
    """A torch-function mode for the reference's float64 twin: a float32 tensor the forward
    creates itself (`torch.randn(n, h, device=x.device)`, an initial state) comes out in float64,
    so it meets the twin's float64 weights as the float32 one meets the float32 weights, instead
    of failing in the first op that mixes them ("mat1 and mat2 must have the same dtype")."""

    factories = {getattr(torch, n) for n in _FACTORIES if hasattr(torch, n)}

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if (
            func in self.factories
            and kwargs.get("dtype") is None
            and isinstance(out, torch.Tensor)
            and out.dtype == torch.float32
        ):
            return out.double()
        return out


def float64_twin_mode() -> TorchFunctionMode:
    """The mode to run the float64 twin under (see _Float64Twin)."""
    return _Float64Twin()


def as_outputs(out: Any) -> list[Any]:
    if isinstance(out, (tuple, list)):
        return list(out)
    return [out]


def dtype_name(dt: torch.dtype) -> str:
    return str(dt).replace("torch.", "")


def numel_of(shape) -> int:
    return int(math.prod(shape)) if len(shape) else 1


# ---------------------------------------------------------------------------------------------
# Triton launch hooks
# ---------------------------------------------------------------------------------------------


@dataclass
class Launch:
    kernel: Any  # JITFunction or InterpretedFunction
    name: str
    module: str
    args: tuple
    kwargs: dict
    grid: Any
    # what the launch ran (the JIT's CompiledKernel on a GPU), when arguments are recorded
    compiled: Any = None


@dataclass
class LaunchLog:
    launches: list[Launch] = field(default_factory=list)
    record_args: bool = False
    depth: int = 0

    def count(self, module_prefix: str | None = None) -> int:
        return sum(1 for x in self.launches if module_prefix is None or x.module.startswith(module_prefix))


_ACTIVE: list[LaunchLog] = []
_PATCHED = [False]
# compile_only(): launches compile (JIT warm-up) and return without running; "kernels" counts them
_COMPILE_ONLY: dict[str, Any] = {"on": False, "kernels": 0, "launchers": 0, "libraries": set(), "pending": []}
# Kernels compile_only(threads=...) compiles at once (Triton's AsyncCompileMode over a thread
# pool): Triton's compile leaves the GIL for most of its work (its MLIR and LLVM passes, ptxas
# runs as a process). On 2 CPU cores four sm_90 tf32x3 GEMM tiles compiled in 0.67 s in four
# threads against 1.12 s one after another (2026-12-08). The runner's precompile uses two: an
# eval runs 8 workers on the GPU host's 16 cores, and a loaded host slows the launches of the
# host-bound forwards other jobs are timing (the final benchmarks of 2026-12-08 that drifted).
PRECOMPILE_THREADS = 2


def _kernel_module(kernel: Any) -> str:
    fn = getattr(kernel, "fn", None)
    return getattr(fn, "__module__", "") or ""


def _install_hooks() -> None:
    if _PATCHED[0]:
        return
    import triton.runtime.interpreter as interp
    import triton.runtime.jit as jit

    def wrap(cls):
        orig = cls.run

        def run(self, *args, grid, warmup, **kwargs):
            if _COMPILE_ONLY["on"]:
                _COMPILE_ONLY["kernels"] += 1
                if cls is interp.InterpretedFunction:
                    return None  # nothing to compile under the interpreter
                kernel = orig(self, *args, grid=grid, warmup=True, **kwargs)
                if hasattr(kernel, "result"):  # compiling in compile_only's pool: built after it
                    _COMPILE_ONLY["pending"].append(kernel)
                else:
                    _COMPILE_ONLY["launchers"] += build_launcher(kernel)
                return kernel
            logs = list(_ACTIVE)
            if warmup or not logs:
                return orig(self, *args, grid=grid, warmup=warmup, **kwargs)
            made = []
            for log in logs:
                made.append(
                    Launch(
                        self,
                        getattr(self.fn, "__name__", "?"),
                        _kernel_module(self),
                        args if log.record_args else (),
                        dict(kwargs) if log.record_args else {},
                        grid,
                    )
                )
                log.launches.append(made[-1])
                log.depth += 1
            try:
                ran = orig(self, *args, grid=grid, warmup=warmup, **kwargs)
                for launch, log in zip(made, logs, strict=True):
                    if log.record_args:
                        launch.compiled = ran
                return ran
            finally:
                for log in logs:
                    log.depth -= 1

        cls.run = run

    wrap(jit.JITFunction)
    wrap(interp.InterpretedFunction)
    graph_cls = getattr(getattr(torch, "cuda", None), "CUDAGraph", None)
    if graph_cls is not None:
        install_graph_hooks(graph_cls)
    _PATCHED[0] = True


# The launches each CUDA graph captured (by id of the torch.cuda.CUDAGraph): a replay launches
# them again, so a forward that replays a graph of its own kernels (the expert's host=graph
# variant, nodes/expert/hostgraph.py) is counted as launching them, and a graph of PyTorch ops
# alone as launching none, exactly as when the same forward runs eagerly.
_GRAPH_LAUNCHES: dict[int, list[Launch]] = {}


def install_graph_hooks(graph_cls: Any) -> None:
    """Count a graph's captured launches again at each of its replays (see _GRAPH_LAUNCHES)."""
    begin, end, replay = graph_cls.capture_begin, graph_cls.capture_end, graph_cls.replay
    capturing: dict[int, LaunchLog] = {}

    def capture_begin(self, *args, **kwargs):
        log = LaunchLog()
        capturing[id(self)] = log
        _ACTIVE.append(log)
        return begin(self, *args, **kwargs)

    def capture_end(self, *args, **kwargs):
        try:
            return end(self, *args, **kwargs)
        finally:
            log = capturing.pop(id(self), None)
            if log is not None:
                _drop_log(log)
                _GRAPH_LAUNCHES[id(self)] = list(log.launches)

    def graph_replay(self, *args, **kwargs):
        for log in list(_ACTIVE):
            if not log.record_args:  # a recording log wants launches it can compile from
                log.launches.extend(_GRAPH_LAUNCHES.get(id(self), ()))
        return replay(self, *args, **kwargs)

    graph_cls.capture_begin = capture_begin
    graph_cls.capture_end = capture_end
    graph_cls.replay = graph_replay


@contextlib.contextmanager
def launch_log(record_args: bool = False):
    _install_hooks()
    log = LaunchLog(record_args=record_args)
    _ACTIVE.append(log)
    try:
        yield log
    finally:
        _drop_log(log)


def _drop_log(log: LaunchLog) -> None:
    """Take `log` itself off the active list: logs are dataclasses, so `list.remove` would take
    the first log that merely compares equal (two logs of the same launches, as a capture's and
    the call's around it are), and the caller's own log would then be missing at its end."""
    for i, x in enumerate(_ACTIVE):
        if x is log:
            del _ACTIVE[i]
            return


def build_launcher(kernel: Any) -> int:
    """Build a compiled kernel's host launcher now: 1 if built, else 0.

    Triton makes a small C module per kernel signature (its launcher) with the system C compiler
    the first time the kernel is loaded, i.e. at its first real launch, and a job's Triton cache
    is its own (judge.py), so every job builds its launchers anew. That first launch is the
    recording call, which holds the GPU lock (shared), and a job waiting to time waits for every
    shared holder: on the H200 suite run the recording call took 4.0 s a job (median), most of
    it compiling, while timing jobs queued behind it. Built here, during the compile-only pass
    that runs before the lock, the launch finds the module in the cache. CPU work only (nothing
    is loaded onto the GPU). A kernel this cannot prepare (an asynchronous compile, a Triton
    whose internals differ) is simply built at its launch, as before: the reply's count of
    launchers against kernels shows how many were."""
    # not a compiled kernel (the interpreter's None, an asynchronous compile's future), or one
    # already loaded by a launch (its module is set, its launcher built)
    if (
        kernel is None
        or hasattr(kernel, "result")
        or not hasattr(kernel, "module")
        or kernel.module is not None
    ):
        return 0
    try:
        from triton.runtime import driver

        driver.active.launcher_cls(kernel.src, kernel.metadata)
    except Exception:  # noqa: BLE001  (an optimisation: the first launch builds it, as before)
        return 0
    return 1


class _NoGpuWork(TorchDispatchMode):
    """A dispatch mode under which any PyTorch op on a CUDA tensor, or one that would create
    one, raises: what runs under it does no work on the GPU. The vendor libraries the ops seen
    would call on a GPU (`library_of`) are added to `libraries`."""

    def __init__(self, libraries: set[str] | None = None) -> None:
        super().__init__()
        self.libraries = set() if libraries is None else libraries

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        lib = library_of(func)
        if lib is not None:
            self.libraries.add(lib)
        dev = kwargs.get("device")
        if dev is not None and torch.device(dev).type == "cuda":
            raise GpuWorkRefused(f"{func} would create a CUDA tensor")
        for a in tree_leaves((args, kwargs)):
            if isinstance(a, torch.Tensor) and a.device.type == "cuda":
                raise GpuWorkRefused(f"{func} on a CUDA tensor")
        return func(*args, **kwargs)


class GpuWorkRefused(RuntimeError):
    pass


# aten ops that PyTorch runs through a vendor library on a CUDA device, by that library's name
_CUDNN_OPS = ("convolution", "cudnn", "lstm", "gru", "rnn_tanh", "rnn_relu", "batch_norm")
_CUBLAS_OPS = {"mm", "addmm", "bmm", "baddbmm", "addbmm", "addmv", "mv", "matmul", "linear", "dot", "vdot"}


def library_of(func: Any) -> str | None:
    """ "cudnn" or "cublas" for an aten op that PyTorch runs through that library on a CUDA
    device (convolutions, RNNs and batch norm; matrix products), else None. A hint for loading
    the library before the op first runs, not a verdict: a wrong answer costs only time."""
    name = getattr(func, "_opname", "") or ""
    if any(part in name for part in _CUDNN_OPS):
        return "cudnn"
    if name in _CUBLAS_OPS or name.startswith("_scaled_dot_product"):
        return "cublas"
    return None


def module_libraries(model: Any) -> set[str]:
    """The vendor libraries a model's layers call on a GPU, from its modules alone (no forward):
    convolutions, recurrent layers and batch norm run through cuDNN, linear layers and attention
    through cuBLAS (a judge's reference: the layers of a reference are called)."""
    from torch.nn.modules.batchnorm import _BatchNorm
    from torch.nn.modules.conv import _ConvNd

    found: set[str] = set()
    for m in model.modules() if isinstance(model, torch.nn.Module) else ():
        if isinstance(m, (_ConvNd, torch.nn.RNNBase, _BatchNorm)):
            found.add("cudnn")
        elif isinstance(m, (torch.nn.Linear, torch.nn.Bilinear, torch.nn.MultiheadAttention)):
            found.add("cublas")
    return found


@contextlib.contextmanager
def compile_only(threads: int = 1):
    """Run code whose Triton launches only compile their kernels (the JIT's warm-up: the
    program is built and cached for the launch's specialisation, nothing runs) and whose PyTorch
    ops must not touch the GPU (`_NoGpuWork`); tensors are meant to be on the meta device. Yields
    a dict whose "kernels" is the number of launches compiled so far and whose "libraries" names
    the vendor libraries (`library_of`) the PyTorch ops seen would use on the GPU.

    threads > 1: the kernels compile in that many threads while the code goes on (Triton's
    AsyncCompileMode), all finished when the block ends; a kernel that fails to compile there is
    left to its first real launch, which reports the error as it would have without this pass."""
    _install_hooks()
    _COMPILE_ONLY.update(on=True, kernels=0, launchers=0, libraries=set(), pending=[])
    pool = mode = None
    if threads > 1:
        try:
            from concurrent.futures import ThreadPoolExecutor

            from triton.runtime._async_compile import AsyncCompileMode

            pool = ThreadPoolExecutor(threads, thread_name_prefix="egg-compile")
            mode = AsyncCompileMode(pool, ignore_errors=True)
        except ImportError:  # a Triton without it: one kernel after another
            pool = mode = None
    try:
        with _NoGpuWork(_COMPILE_ONLY["libraries"]), mode or contextlib.nullcontext():
            yield _COMPILE_ONLY
        # every compile has finished (the mode waited for them): their launchers, as for the rest
        for fut in _COMPILE_ONLY["pending"]:
            _COMPILE_ONLY["launchers"] += build_launcher(fut.result(ignore_errors=True))
    finally:
        _COMPILE_ONLY["on"] = False
        _COMPILE_ONLY["pending"] = []
        if pool is not None:
            pool.shutdown(wait=True)


def in_kernel_launch() -> bool:
    return any(log.depth > 0 for log in _ACTIVE)


# ---------------------------------------------------------------------------------------------
# PyTorch op recorder (policy) + output poisoning
# ---------------------------------------------------------------------------------------------

# aten ops that only allocate, view, copy or describe tensors: allowed under both policies.
_ALLOC = {
    "empty",
    "empty_like",
    "empty_strided",
    "new_empty",
    "new_empty_strided",
    "zeros",
    "zeros_like",
    "new_zeros",
    "ones",
    "ones_like",
    "new_ones",
    "full",
    "full_like",
    "new_full",
    "fill_",
    "zero_",
    "scalar_tensor",
    "lift_fresh",
    "lift_fresh_copy",
    "_local_scalar_dense",
    "arange",
    "resize_",
}
_VIEW = {
    "view",
    "_unsafe_view",
    "reshape",
    "_reshape_alias",
    "permute",
    "transpose",
    "t",
    "expand",
    "unsqueeze",
    "squeeze",
    "slice",
    "select",
    "as_strided",
    "alias",
    "detach",
    "split",
    "split_with_sizes",
    "chunk",
    "unbind",
    "narrow",
    "flatten",
    "unflatten",
    "view_as",
    "expand_as",
    "movedim",
    "unfold",
    "contiguous",
    "clone",
    "copy_",
    "_to_copy",
    "to",
    "_copy_from",
    "_copy_from_and_resize",
    "sym_size",
    "sym_stride",
    "sym_numel",
    "sym_storage_offset",
    "is_same_size",
    "is_nonzero",
    "set_",
    "stride",
    "size",
    "dim",
    "numel",
    "_has_compatible_shallow_copy_type",
    "record_stream",
}
# Library ops a `mixed` candidate may leave in PyTorch (matmul/linear/convolution families).
DELEGABLE = {
    "mm",
    "bmm",
    "addmm",
    "addbmm",
    "baddbmm",
    "matmul",
    "linear",
    "convolution",
    "_convolution",
    "conv1d",
    "conv2d",
    "conv3d",
    "conv_transpose1d",
    "conv_transpose2d",
    "conv_transpose3d",
    "cudnn_convolution",
    "cudnn_convolution_transpose",
    "mkldnn_convolution",
    "_mkl_linear",
    "einsum",
    "dot",
    "mv",
    "addmv",
    "_addmm_activation",
    "_convolution_mode",
    "slow_conv2d_forward",
    "slow_conv3d_forward",
    "slow_conv_transpose2d",
    "slow_conv_transpose3d",
    "_slow_conv2d_forward",
    "convolution_overrideable",
    "thnn_conv2d",
    "_nnpack_spatial_convolution",
}


def op_base(func: Any) -> str:
    name = getattr(func, "__name__", str(func))  # e.g. "mm.default"
    return name.split(".")[0]


def op_category(base: str) -> str:
    if base in _ALLOC:
        return "alloc"
    if base in _VIEW:
        return "view"
    if base in DELEGABLE:
        return "library"
    return "compute"


class OpRecorder(TorchDispatchMode):
    """Records aten ops run outside Triton launches; optionally fills fresh allocations with NaN
    so a kernel that leaves part of its output unwritten produces NaN instead of stale values."""

    def __init__(self, poison: bool = False) -> None:
        super().__init__()
        self.poison = poison
        self.ops: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if in_kernel_launch():
            return out
        base = op_base(func)
        self.ops.append(base)
        if self.poison and base in ("empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided"):
            if isinstance(out, torch.Tensor) and (out.is_floating_point() or out.is_complex()):
                out.fill_(float("nan"))
        return out


def categorize(ops: list[str]) -> dict[str, list[str]]:
    cats: dict[str, list[str]] = {"alloc": [], "view": [], "library": [], "compute": []}
    for op in ops:
        c = op_category(op)
        if op not in cats[c]:
            cats[c].append(op)
    return cats


def sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()
