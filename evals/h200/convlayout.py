"""What a library convolution costs in each layout on this GPU, and what the passes around it cost:
the facts behind the conv + elementwise-tail algorithms (eager's default precision, TF32 in cuDNN).

    python -m evals.h200.convlayout TASK.py [TASK.py ...]

For each task's first conv module (at the task's own sizes): the conv on an NCHW input, on a
channels-last input converted inside the timed call, on an input already channels-last (with the
weight in either layout), the layout conversion alone, one elementwise pass over the conv output,
and the whole model in eager and torch.compile. Medians of triton.testing.do_bench (L2 flushed).
Then each layout's error against the float64 conv (largest difference over the largest value),
with cuDNN's TF32 allowed (eager's default) and off: whether cuDNN ran TF32 in that layout, the
bar the checker sets (4x the reference's own error) for a TF32 candidate.
"""

from __future__ import annotations

import copy
import importlib.util
import sys

import torch
import triton.testing


def load(path: str):
    spec = importlib.util.spec_from_file_location("task_under_probe", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def ms(fn) -> float:
    return float(triton.testing.do_bench(fn, warmup=25, rep=200, return_mode="median"))


CL = {4: torch.channels_last, 5: torch.channels_last_3d}


def main(paths: list[str]) -> int:
    torch.backends.cudnn.benchmark = False  # eager's default
    for path in paths:
        probe(path)
    return 0


def probe(path: str) -> None:
    mod = load(path)
    torch.manual_seed(0)
    model = mod.Model(*mod.get_init_inputs()).cuda()
    x = [t.cuda() if isinstance(t, torch.Tensor) else t for t in mod.get_inputs()]
    conv = next(m for m in model.modules() if isinstance(m, torch.nn.modules.conv._ConvNd))
    x0 = x[0]
    fmt = CL.get(x0.dim())
    rows: list[tuple[str, float]] = []
    with torch.no_grad():
        y = conv(x0)
        rows.append(("conv NCHW", ms(lambda: conv(x0))))
        if fmt is not None:
            xc = x0.contiguous(memory_format=fmt)
            rows.append(("to channels-last alone", ms(lambda: x0.contiguous(memory_format=fmt))))
            rows.append(
                ("conv, input converted in the call", ms(lambda: conv(x0.contiguous(memory_format=fmt))))
            )
            rows.append(("conv, input channels-last", ms(lambda: conv(xc))))
            w = conv.weight.data
            conv.weight.data = w.contiguous(memory_format=fmt)
            rows.append(("conv, input and weight channels-last", ms(lambda: conv(xc))))
            yc = conv(xc)
            conv.weight.data = w
            rows.append(("one pass over the CL output (relu)", ms(lambda: torch.relu(yc))))
            rows.append(("CL output -> NCHW copy", ms(lambda: yc.contiguous())))
        rows.append(("one pass over the NCHW output (relu)", ms(lambda: torch.relu(y))))
        rows.append(("model eager", ms(lambda: model(*x))))
        comp = torch.compile(model)
        comp(*x)
        rows.append(("model torch.compile", ms(lambda: comp(*x))))
    print(f"\n## {path.rsplit('/', 1)[-1]}  input {list(x0.shape)}  conv out {list(y.shape)}")
    for name, t in rows:
        print(f"  {name:42s} {t:8.3f} ms", flush=True)
    for name, e in errors(conv, x0, fmt):
        print(f"  {name:42s} {e:8.2e} (error / max |ref|)", flush=True)


def errors(conv, x0, fmt) -> list[tuple[str, float]]:
    with torch.no_grad():
        ref = copy.deepcopy(conv).double()(x0.double())
        big = float(ref.abs().max())
        out = []
        layouts = [("NCHW", x0)] + ([("channels-last", x0.contiguous(memory_format=fmt))] if fmt else [])
        for tf32 in (True, False):
            with torch.backends.cudnn.flags(enabled=True, allow_tf32=tf32):
                for name, xi in layouts:
                    err = float((conv(xi).double() - ref).abs().max()) / big
                    out.append((f"error, {name}, TF32 {'allowed' if tf32 else 'off'}", err))
        del ref
    return out


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
