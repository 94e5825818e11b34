"""The `describe` job: load and validate a task, pick CPU-friendly sizes, count flops/bytes."""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch.utils.flop_counter import FlopCounterMode

from tools.sizes import second_shape_options
from tools.worker.common import (
    BadTask,
    InfraFault,
    as_outputs,
    chunk_ranges,
    dtype_name,
    float_constants,
    int_constants,
    is_oom,
    listed,
    load_task,
    numel_of,
    one_line,
    to_device,
)

SHRINK_BUDGET = 2**18
# The interpreter runs every program of a launch in Python: its time grows with the work, not only
# with the bytes. Sizes are also halved until the forward's flops fit this (a 256^3 matmul's).
SHRINK_FLOPS = 2.0**25


def task_fault(message: str, e: BaseException) -> Exception:
    """A failure while running the task's own code: the task's fault, unless the GPU was full."""
    if is_oom(e):
        return InfraFault("oom", f"{message} (the GPU ran out of memory: the machine's fault, retried)")
    return BadTask(message)


# Constants below this are kernel sizes, strides, channel groups...: never shrunk.
SHRINK_MIN = 16
# ...except the inputs' leading dim (the batch) of a task still over SHRINK_FLOPS: down to this.
LEADING_MIN = 2


def _meta_run(task_source: str, overrides: dict[str, int]) -> tuple[list[Any], list[Any], float | None, Any]:
    """Shapes, outputs and flops without allocating real memory (real tensors when a task's
    construction cannot run on the meta device, e.g. it calls .item())."""
    try:
        return _meta_run_on(task_source, overrides, "meta")
    except Exception:
        pass
    try:
        return _meta_run_on(task_source, overrides, "cpu")
    except BadTask:
        raise
    except (Exception, SystemExit) as e:  # the task's own code failed on the CPU: its fault
        raise task_fault(f"the task failed to build or run: {one_line(e)}", e) from None


def _meta_run_on(
    task_source: str, overrides: dict[str, int], device: str
) -> tuple[list[Any], list[Any], float | None, Any]:
    t = load_task(task_source, overrides)
    with torch.device(device):
        torch.manual_seed(0)
        init = t.init_args()
        model = t.module.Model(*init)
        inputs = listed("get_inputs", t.module.get_inputs())
    inputs = [x.to(device) if isinstance(x, torch.Tensor) else x for x in inputs]
    flops: float | None = None
    with torch.no_grad():
        try:
            with flop_counter(model) as counted:
                out = model(*inputs)
            flops = counted()
        except Exception:
            # Some ops have no meta kernel; flops then come from the real run.
            out = None
    return inputs, as_outputs(out) if out is not None else [], flops, model


def _elements(inputs: list[Any], outputs: list[Any], model: Any) -> int:
    n = sum(x.numel() for x in inputs if isinstance(x, torch.Tensor))
    n += sum(x.numel() for x in outputs if isinstance(x, torch.Tensor))
    n += sum(p.numel() for p in model.state_dict().values())
    return n


def _runs(task_source: str, sizes: dict[str, int], device: str = "cpu") -> bool:
    """The task builds and runs its forward on `device` with these sizes. On a GPU, running out
    of memory is the machine's fault (InfraFault, retried), not a sign the sizes do not work."""
    try:
        t = load_task(task_source, sizes)
        torch.manual_seed(0)
        with torch.device(device):
            model = t.module.Model(*t.init_args()).to(device)
            inputs = to_device(t.inputs(0, device), device)
        with torch.no_grad():
            model(*inputs)
        return True
    except Exception as e:
        if device == "cuda" and is_oom(e):
            raise InfraFault("oom", f"trying ragged sizes ran out of GPU memory: {one_line(e)}") from None
        return False
    finally:
        if device == "cuda":
            torch.cuda.empty_cache()


def ragged_sizes(
    task_source: str, overrides: dict[str, int], device: str = "cpu"
) -> tuple[dict[str, int], str | None]:
    """`--shapes ragged`: the first set of the ragged rule (tools/sizes.py second_shape_options,
    the checker's second-shape rule) applied to the sizes as they stand (the file's, the user's
    overrides, the CPU shrinking) with which the task builds, draws its inputs and runs its
    forward on `device`. Returns (overrides, note); when no set runs, the sizes as they stood and
    a note saying so."""
    consts = int_constants(task_source)
    sizes = {**consts, **overrides}
    options = second_shape_options(sizes)
    if not options:
        return dict(overrides), "ragged: no int size constant >= 8 to change; the task ran as written"
    for option in options:
        if _runs(task_source, option, device):
            return {k: v for k, v in option.items() if k in overrides or v != consts[k]}, None
    return (
        dict(overrides),
        f"ragged: the task runs with none of the {len(options)} ragged size set(s); it ran as written",
    )


def choose_sizes(task_source: str, overrides: dict[str, int], budget: int = SHRINK_BUDGET) -> dict[str, int]:
    """Halve the largest size constants (>= SHRINK_MIN) until inputs+outputs+params fit `budget`.

    The meta device does not check everything (a LayerNorm's shape, a pooling window larger
    than its input, an assert on the image size), so the choice is run for real once; when the
    task rejects it, halved constants get their size back one at a time until it runs."""
    frozen: set[str] = set()
    for _ in range(3):
        current = _halved_sizes(task_source, overrides, budget, frozen)
        if current == overrides or _runs(task_source, current):
            return current
        halved = sorted(set(current) - set(overrides), key=lambda k: -current[k])
        # One size back first (the one the task could not take), else all of them in turn;
        # then halve the others again with those kept.
        back = next(
            (k for k in halved if _runs(task_source, {n: v for n, v in current.items() if n != k})), None
        )
        if back is not None:
            frozen.add(back)
            continue
        trial = dict(current)
        back_all: list[str] = []
        for k in halved:
            trial.pop(k)
            back_all.append(k)
            if _runs(task_source, trial):
                break
        # keep halved what the task takes halved (e.g. the class count, not both image sides)
        for k in list(back_all):
            if _runs(task_source, {**trial, k: current[k]}):
                trial[k] = current[k]
                back_all.remove(k)
        frozen |= set(back_all)
    return dict(overrides)


def _halved_sizes(
    task_source: str, overrides: dict[str, int], budget: int, frozen: set[str]
) -> dict[str, int]:
    current = _halved_large(task_source, overrides, budget, frozen)
    return _halved_leading(task_source, current, frozen)


def _halved_leading(task_source: str, current: dict[str, int], frozen: set[str]) -> dict[str, int]:
    """While the forward's flops are still over SHRINK_FLOPS once no constant >= SHRINK_MIN is
    left to halve (a network whose channels and image size are written into its layers), halve
    the constant that sets the inputs' leading dim (the batch) down to LEADING_MIN: under the
    interpreter AlexNet's 8 images are a run-length problem, its 2 images are not."""
    for _ in range(8):
        inputs, outputs, flops, _model = _meta_run(task_source, current)
        if not outputs or (flops or 0.0) <= SHRINK_FLOPS:
            return current
        eff = {**int_constants(task_source), **current}
        lead = [x.shape[0] for x in inputs if isinstance(x, torch.Tensor) and x.dim() >= 2]
        if not lead:
            return current
        step = None
        for k, v in eff.items():
            if k in frozen or v != lead[0] or v <= LEADING_MIN:
                continue
            trial = {**current, k: max(LEADING_MIN, v // 2)}
            try:
                t_in = _meta_run(task_source, trial)[0]
            except Exception:
                continue
            t_lead = [x.shape[0] for x in t_in if isinstance(x, torch.Tensor) and x.dim() >= 2]
            # the constant really is the leading dim (not another one of the same value)
            if t_lead and t_lead[0] == trial[k] and _runs(task_source, trial):
                step = trial
                break
        if step is None:
            return current
        current = step
    return current


def _halved_large(
    task_source: str, overrides: dict[str, int], budget: int, frozen: set[str]
) -> dict[str, int]:
    sizes = {k: v for k, v in {**int_constants(task_source), **overrides}.items() if k not in frozen}
    current = dict(overrides)
    for _ in range(64):
        inputs, outputs, flops, model = _meta_run(task_source, current)
        if not outputs or (_elements(inputs, outputs, model) <= budget and (flops or 0.0) <= SHRINK_FLOPS):
            return current
        eff = {**sizes, **current}
        big = [k for k, v in eff.items() if v >= SHRINK_MIN]
        if not big:
            return current
        top = max(eff[k] for k in big)
        changed = False
        for k in big:
            if eff[k] == top or eff[k] * 4 >= top:
                trial = {**current, k: max(SHRINK_MIN // 2, eff[k] // 2)}
                try:
                    t_in, t_out, _, t_model = _meta_run(task_source, trial)
                    small = t_out and _elements(t_in, t_out, t_model) <= 4 * budget
                    if small and not _runs(task_source, trial):
                        continue  # once small, run for real (the meta device misses some checks)
                except Exception:
                    continue  # halving this constant breaks the task (e.g. divisibility): keep it
                current = trial
                changed = True
        if not changed:
            return current
    return current


# Elements per float64 chunk when describing outputs: a multi-GB output must not need several
# float64 copies of itself at once (the describe job runs before any memory estimate exists).
DESCRIBE_CHUNK = 1 << 24


def _flat_chunks(x: torch.Tensor):
    f = x.detach().reshape(-1)
    for s, e in chunk_ranges(f.numel(), DESCRIBE_CHUNK):
        yield f[s:e].double()


def _max_gap(x: torch.Tensor, y: torch.Tensor) -> tuple[float, float]:
    """(max |x - y| with NaN == NaN, max finite |x|), chunk by chunk."""
    gap, scale, seen = 0.0, 0.0, False
    for xd, yd in zip(_flat_chunks(x), _flat_chunks(y), strict=True):
        both_nan = torch.isnan(xd) & torch.isnan(yd)
        d = torch.where(both_nan, torch.zeros_like(xd), (xd - yd).abs())
        if d.numel():
            m = float(d.max())  # NaN where only one side is NaN: a difference
            gap = m if math.isnan(m) else max(gap, m)
            if math.isnan(gap):
                break
        fin = xd[torch.isfinite(xd)]
        if fin.numel():
            seen = True
            scale = max(scale, float(fin.abs().max()))
    return gap, (scale if seen else 1.0)


def _finite_range(o: torch.Tensor) -> tuple[float, float, float, int]:
    """(min, max, max |x|, count) of the finite elements of `o`, chunk by chunk."""
    lo, hi, amax, n = math.inf, -math.inf, 0.0, 0
    for f in _flat_chunks(o):
        fin = f[torch.isfinite(f)]
        if fin.numel():
            lo, hi = min(lo, float(fin.min())), max(hi, float(fin.max()))
            amax = max(amax, float(fin.abs().max()))
            n += fin.numel()
    return lo, hi, amax, n


def nondeterminism(model: torch.nn.Module, inputs: list[Any], rel: float = 1e-3) -> None:
    """Two runs of the reference on copies of the same inputs must agree: a reference that draws
    random numbers in forward (torch.rand_like, dropout in training mode) cannot verify anything."""
    from tools.worker.common import clone_inputs

    with torch.no_grad():
        try:
            a = as_outputs(model(*clone_inputs(inputs)))
            b = as_outputs(model(*clone_inputs(inputs)))
        except Exception as e:
            raise task_fault(f"Model.forward failed on get_inputs(): {one_line(e)}", e) from None
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if not isinstance(x, torch.Tensor) or not isinstance(y, torch.Tensor) or x.shape != y.shape:
            raise BadTask(f"the reference is nondeterministic: output {i} changes type or shape between runs")
        if not x.is_floating_point():
            same = torch.equal(x, y)
            gap = 0.0 if same else float("inf")
        else:
            gap, scale = _max_gap(x, y)
            same = not (gap != gap) and gap <= rel * max(scale, 1e-30)
        if not same:
            raise BadTask(
                f"the reference is nondeterministic: two runs of Model.forward on the same inputs differ "
                f"(output {i}, max difference {gap:.3g}); EGG can verify only a deterministic reference "
                "(random numbers drawn in forward, e.g. torch.rand_like or dropout in training mode)"
            )


def tensor_info(x: torch.Tensor) -> dict[str, Any]:
    return {"shape": list(x.shape), "dtype": dtype_name(x.dtype), "stride": list(x.stride())}


def input_info(x: Any) -> dict[str, Any]:
    if isinstance(x, torch.Tensor):
        return tensor_info(x)
    if x is None:
        return {"value": None, "type": "none"}
    if isinstance(x, bool):
        return {"value": x, "type": "bool"}
    if isinstance(x, int):
        return {"value": x, "type": "int"}
    if isinstance(x, float):
        return {"value": x, "type": "float"}
    raise BadTask(f"get_inputs() returned a {type(x).__name__}; only tensors and scalars are supported")


def degenerate_flags(outputs: list[torch.Tensor], atol: float = 1e-4) -> list[str]:
    flags = []
    for i, o in enumerate(outputs):
        if not o.is_floating_point() or o.numel() == 0:
            continue
        lo, hi, amax, n_finite = _finite_range(o)
        if n_finite == 0:
            flags.append(f"output {i} has no finite values")
            continue
        if n_finite > 1 and hi - lo == 0.0:
            flags.append(f"output {i} is constant ({lo:.4g})")
        elif amax < 10 * atol:
            flags.append(f"output {i} is tiny (max |x| {amax:.2e}) vs tolerance {atol:g}")
    return flags


# Gates per step of PyTorch's recurrent layers. FlopCounterMode has no formula for their fused
# kernels (cuDNN's on a GPU, the CPU's LSTM) and counts such a layer as 0 flops (the profiler then
# called KernelBench's level-3 LSTMs memory-bound at 0% of the roof); where it counted nothing
# during a layer's forward, the layer's products are added here.
_RNN_GATES = ((torch.nn.LSTM, 4), (torch.nn.GRU, 3), (torch.nn.RNN, 1))


def rnn_flops(mod: torch.nn.Module, gates: int, x: Any) -> float:
    """Flops of the products of recurrent layer `mod` (`gates` per step) on input `x`: per layer
    and direction, every step's input projection and hidden product (multiply-adds x2)."""
    if isinstance(x, torch.nn.utils.rnn.PackedSequence):
        rows = x.data.shape[0]  # all the (step, sequence) pairs
    elif isinstance(x, torch.Tensor) and x.dim() in (2, 3):
        rows = x.shape[0] if x.dim() == 2 else x.shape[0] * x.shape[1]
    else:
        return 0.0
    h, dirs = mod.hidden_size, 2 if mod.bidirectional else 1
    out = getattr(mod, "proj_size", 0) or h
    total = 0.0
    for layer in range(mod.num_layers):
        width = mod.input_size if layer == 0 else dirs * out
        total += dirs * 2.0 * rows * gates * h * (width + out)
        if out != h:  # an LSTM's projection of each step's hidden state (proj_size)
            total += dirs * 2.0 * rows * h * out
    return total


@contextlib.contextmanager
def flop_counter(model: torch.nn.Module) -> Iterator[Callable[[], float]]:
    """Count a forward's flops: PyTorch's FlopCounterMode, plus the products of any nn.LSTM, GRU
    or RNN inside `model` that it counted nothing for. Yields a function giving the total."""
    fc = FlopCounterMode(display=False)
    extra = [0.0]
    started: dict[int, float] = {}
    hooks = []

    def before(mod, args):
        started[id(mod)] = float(fc.get_total_flops())

    def after(mod, args, _out, gates):
        if args and float(fc.get_total_flops()) == started.pop(id(mod), None):
            extra[0] += rnn_flops(mod, gates, args[0])

    for mod in model.modules():
        gates = next((g for cls, g in _RNN_GATES if isinstance(mod, cls)), None)
        if gates is not None:
            hooks.append(mod.register_forward_pre_hook(before))
            hooks.append(mod.register_forward_hook(lambda m, a, o, g=gates: after(m, a, o, g)))
    try:
        with fc:
            yield lambda: float(fc.get_total_flops()) + extra[0]
    finally:
        for h in hooks:
            h.remove()


def bytes_and_flops(model: torch.nn.Module, inputs: list[Any], outputs: list[torch.Tensor]) -> float:
    b = sum(x.numel() * x.element_size() for x in inputs if isinstance(x, torch.Tensor))
    b += sum(p.numel() * p.element_size() for p in model.state_dict().values())
    b += sum(o.numel() * o.element_size() for o in outputs if isinstance(o, torch.Tensor))
    return float(b)


def module_ints(model: Any) -> dict[str, int]:
    """The model's own int attributes (`self.n_head = n_head`): a size forward reads from self,
    which the capture sees only as a number; ModelNew repeats __init__, so it can read it too."""
    return {
        k: v for k, v in vars(model).items() if type(v) is int and not k.startswith("_") and k != "training"
    }


def run_describe(job) -> dict[str, Any]:
    from tools.worker.gpumem import (
        estimate_peak_bytes,
        estimate_timing_bytes,
        shape_bytes,
        total_bytes,
        units_for,
        units_with_margin,
    )

    device = job.device
    overrides = dict(job.size_overrides)
    if job.options.get("shrink"):
        overrides = choose_sizes(
            job.task_source, overrides, int(job.options.get("shrink_budget", SHRINK_BUDGET))
        )
    shapes, shapes_note = "as-written", None
    if job.options.get("shapes") == "ragged":
        ragged, shapes_note = ragged_sizes(job.task_source, overrides, device)
        if shapes_note is None:
            overrides, shapes = ragged, "ragged"
    t = load_task(job.task_source, overrides)
    try:
        init = t.init_args()
    except (Exception, SystemExit) as e:
        raise task_fault(f"get_init_inputs() failed: {one_line(e)}", e) from None
    try:
        torch.manual_seed(0)
        model = t.module.Model(*init).to(device).eval()
    except (Exception, SystemExit) as e:
        raise task_fault(f"Model(*get_init_inputs()) failed: {one_line(e)}", e) from None
    try:
        inputs = to_device(t.inputs(1, device), device)
    except (Exception, SystemExit) as e:
        raise task_fault(f"get_inputs() failed: {one_line(e)}", e) from None
    infos = [input_info(x) for x in inputs]
    try:
        with torch.no_grad(), flop_counter(model) as counted:
            out = model(*inputs)
        flops = counted()
    except (Exception, SystemExit) as e:
        raise task_fault(f"Model.forward failed on get_inputs(): {one_line(e)}", e) from None
    outputs = as_outputs(out)
    for o in outputs:
        if not isinstance(o, torch.Tensor):
            raise BadTask(f"Model.forward returned a {type(o).__name__}; expected tensors")
    nondeterminism(model, inputs)
    params = [
        {
            "name": k,
            "shape": list(v.shape),
            "dtype": dtype_name(v.dtype),
            "is_buffer": k not in dict(model.named_parameters()),
        }
        for k, v in model.state_dict().items()
    ]
    init_json = [v if isinstance(v, (int, float, bool, str, type(None))) else repr(v) for v in init]
    op_graph: list[dict] = []
    capture_error: str | None = None
    try:
        from tools.worker.opgraph import capture
    except ImportError:
        capture = None
        capture_error = "op graph capture unavailable"
    if capture is not None:
        try:
            cap_model = t.module.Model(*init).to(device).eval()
            op_graph, capture_error = capture(cap_model, inputs)
        except Exception as e:
            op_graph, capture_error = [], f"op graph capture failed: {one_line(e)}"
    sizes = shape_bytes(t)  # one meta forward for both estimates
    peak = estimate_peak_bytes(t, sizes)
    constants: dict[str, Any] = {**int_constants(job.task_source), **float_constants(job.task_source)}
    sizes_used = {**int_constants(job.task_source), **overrides}
    return {
        "name": job.options.get("name") or job.task_path.rsplit("/", 1)[-1].removesuffix(".py"),
        "source": job.task_source,
        "init_args": init_json,
        "inputs": infos,
        "outputs": [tensor_info(o) for o in outputs],
        "params": params,
        "constants": constants,
        "sizes_used": sizes_used,
        "shapes": shapes,
        "shapes_note": shapes_note,
        "op_graph": op_graph,
        "capture_error": capture_error,
        "module_ints": module_ints(model),
        "flops": flops,
        "bytes_moved": bytes_and_flops(model, inputs, outputs),
        "degenerate": degenerate_flags(outputs),
        "device": device,
        "check_peak_bytes": float(peak),
        "check_memory_units": units_for(peak, total_bytes()) if device == "cuda" else None,
        "screen_memory_units": (
            units_with_margin(estimate_timing_bytes(t, sizes)) if device == "cuda" else None
        ),
        "total_elements": int(
            sum(numel_of(i["shape"]) for i in infos if "shape" in i) + sum(o.numel() for o in outputs)
        ),
    }
