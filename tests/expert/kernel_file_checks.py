"""Subprocess side of test_kernel_files.py: import the expert's fixed kernel files directly and
run each kernel under the Triton interpreter against PyTorch (odd sizes). Prints one JSON line
{name: "ok" | error}. Run with TRITON_INTERPRET=1."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import torch
import triton
import triton.language as tl

KDIR = Path(__file__).resolve().parents[2] / "nodes" / "expert" / "kernels"


def load(name: str):
    spec = importlib.util.spec_from_file_location(f"egg_kernel_{name}", KDIR / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


ew = load("ew")
red = load("reduce")
xent = load("xent")
rowloss = load("rowloss")
cat = load("cat")
tri = load("tri")
rnn = load("rnn")
random = load("random")
pad = load("pad")
layout = load("layout")
# a candidate pastes the files' functions together: layout's host helpers are the others' too
pad._memory_order = cat._memory_order = layout._memory_order


@triton.jit
def _apply(x_ptr, out_ptr, n, WHICH: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(x_ptr + offs, mask=m, other=1.0)  # 1: the identity of the product check
    if WHICH == 0:
        y = ew._ew_tanh(x)
    elif WHICH == 1:
        y = ew._ew_softplus(x, 1.0, 20.0)
    else:
        y = tl.reduce(x, 0, red._red_mul) + tl.zeros_like(x)
    tl.store(out_ptr + offs, y, mask=m)


def run(x: torch.Tensor, which: int, block: int = 512) -> torch.Tensor:
    out = torch.empty_like(x)
    _apply[(triton.cdiv(x.numel(), block),)](x, out, x.numel(), WHICH=which, BLOCK=block)
    return out


def close(a: torch.Tensor, b: torch.Tensor, tol: float = 1e-5) -> None:
    if not torch.allclose(a, b, atol=tol, rtol=tol):
        raise AssertionError(f"max abs err {(a - b).abs().max().item():.3g}")


def check_tanh() -> None:
    x = torch.linspace(-30, 30, 1001)
    close(run(x, 0), torch.tanh(x))


def check_softplus() -> None:
    x = torch.linspace(-60, 60, 777)
    close(run(x, 1), torch.nn.functional.softplus(x), 1e-4)


def check_red_mul() -> None:
    x = 1.0 + torch.rand(37) * 0.01
    close(run(x, 2, block=64)[:1], torch.prod(x).reshape(1))


def check_bcast() -> None:
    shape = (3, 5, 7)
    t, mode, inner, size = ew._bcast(torch.randn(5, 1), shape)
    assert (mode, inner, size) == (2, 7, 5), (mode, inner, size)
    assert ew._bcast(torch.randn(1), shape)[1] == 1
    assert ew._bcast(torch.randn(*shape), shape)[1] == 0
    # varying dims that are not one block: a materialised broadcast, read as same-shape
    a = torch.randn(3, 1, 7)
    t, mode, _, _ = ew._bcast(a, shape)
    assert mode == 0 and torch.equal(t, a.expand(shape))


def check_xent() -> None:
    n, c = 13, 301
    x, t = torch.randn(n, c), torch.randint(0, c, (n,))
    loss = torch.empty(n)
    out = torch.empty(())
    xent.xent_row_kernel[(n,)](x, t, loss, c, x.stride(0), BLOCK_N=128)
    xent.xent_sum_kernel[(1,)](loss, out, n, 1.0 / n, BLOCK=64)
    close(out, torch.nn.functional.cross_entropy(x, t))


def check_rowloss_sum() -> None:
    v = torch.randn(1003)
    out = torch.empty(())
    rowloss.rl_sum_kernel[(1,)](v, out, v.numel(), 0.5, BLOCK=256)
    close(out, v.sum() * 0.5, 1e-4)


def check_cat() -> None:
    a, b = torch.randn(3, 5, 7), torch.randn(3, 2, 7)
    close(cat.launch_cat([a, b], 1), torch.cat([a, b], 1), 0.0)
    close(
        cat.launch_cat([a.transpose(0, 2), a.transpose(0, 2)], 0), torch.cat([a.transpose(0, 2)] * 2, 0), 0.0
    )
    # channels-last branches (a Fire module's expand convs): joined in their own layout, which
    # the output keeps; with an input of another layout, everything goes contiguous as before
    cl = [torch.randn(2, 5, 4, c).permute(0, 3, 1, 2) for c in (3, 6, 1)]
    got = cat.launch_cat(cl, 1)
    close(got, torch.cat(cl, 1), 0.0)
    assert got.is_contiguous(memory_format=torch.channels_last), got.stride()
    mixed = [cl[0], cl[1].contiguous()]
    got = cat.launch_cat(mixed, 1)
    close(got, torch.cat(mixed, 1), 0.0)
    assert got.is_contiguous()
    same = [cl[0], cl[0]]
    close(cat.launch_cat(same, 2), torch.cat(same, 2), 0.0)  # along H, still channels-last


def check_tri() -> None:
    x = torch.randn(2, 5, 7)
    for d in (-1, 0, 2):
        close(tri.launch_tri(x, d, False), torch.tril(x, d), 0.0)
        close(tri.launch_tri(x, d, True), torch.triu(x, d), 0.0)


def check_rnn() -> None:
    torch.manual_seed(0)
    for cls, gates, step, extra in (
        (torch.nn.LSTM, 4, rnn.lstm_step_kernel, {}),
        (torch.nn.GRU, 3, rnn.gru_step_kernel, {}),
        (torch.nn.RNN, 1, rnn.rnn_step_kernel, {"RELU": False}),
    ):
        # registers-resident sequence kernel, then per-step kernels (the launcher's block choice,
        # then a tuned one whose blocks split the hidden units and the batch differently)
        for hidden, cfg in ((20, None), (70, None), (70, {"BLOCK_H": 32, "BLOCK_K": 32, "BLOCK_B": 32})):
            m = cls(7, hidden, num_layers=2, bidirectional=True, batch_first=True).eval()
            x = torch.randn(3, 5, 7)
            h0 = torch.randn(4, 3, hidden)
            hx = (h0, torch.randn(4, 3, hidden)) if gates == 4 else h0
            with torch.no_grad():
                want = m(x, hx)
                got = rnn.launch_recurrent(m, x, hx, step, gates, extra, cfg)
            close(got[0], want[0], 1e-4)
            if gates == 4:
                close(got[1][0], want[1][0], 1e-4)
                close(got[1][1], want[1][1], 1e-4)
            else:
                close(got[1], want[1], 1e-4)


def check_random() -> None:
    z = random.launch_random((301, 7), "cpu", None, True, 1234)
    assert z.shape == (301, 7) and z.dtype == torch.float32
    assert abs(z.mean().item()) < 0.1 and abs(z.std().item() - 1.0) < 0.1, (z.mean(), z.std())
    u = random.launch_random((2000,), "cpu", None, False, 7)
    assert 0.0 <= u.min().item() and u.max().item() < 1.0 and abs(u.mean().item() - 0.5) < 0.05
    assert not torch.equal(z, random.launch_random((301, 7), "cpu", None, True, 99))


def check_pad() -> None:
    import torch.nn.functional as F

    x = torch.randn(2, 5, 7, 3)
    for p, mode, value in (
        ([0, 0, 2, 1, 3, 0], "constant", -1.5),
        ([1, 2, 3, 1], "reflect", 0.0),
        ([1, 2, 3, 1], "replicate", 0.0),
        ([2, 1, 1, 3], "circular", 0.0),
        ([-1, 2, 0, -2], "constant", 0.0),  # negative pads crop
    ):
        for t in (x, x.transpose(1, 2)):  # any input strides
            want = F.pad(t, p, mode=mode, value=value) if mode == "constant" else F.pad(t, p, mode=mode)
            got = pad.launch_pad(t, p, mode, value)
            assert got.shape == want.shape, (got.shape, want.shape)
            close(got, want, 0.0)
    y = torch.randn(2, 2, 3, 4, 5, 6)  # more than 5 dims: the leading ones merge
    close(pad.launch_pad(y, [1, 1, 2, 0], "constant", 3.0), F.pad(y, [1, 1, 2, 0], value=3.0), 0.0)
    # a channels-last input (a permuted contiguous tensor, as a network's NHWC activations are)
    # is padded in its memory order and stays channels-last, as PyTorch's pads keep it
    for t, fmt, pads in (
        (
            torch.randn(2, 6, 5, 4).permute(0, 3, 1, 2),
            torch.channels_last,
            (([1, 1, 1, 1], "reflect"), ([2, 0, 1, 3], "replicate"), ([1, 2, 0, 1], "constant")),
        ),
        (
            torch.randn(2, 3, 4, 5, 3).permute(0, 4, 1, 2, 3),
            torch.channels_last_3d,
            (([1, 1, 1, 2, 2, 1], "reflect"), ([2, 0, 1, 0, 1, 1], "replicate"), ([1, 2], "constant")),
        ),
    ):
        for p, mode in pads:
            got = pad.launch_pad(t, p, mode, 0.5 if mode == "constant" else 0.0)
            want = F.pad(t, p, mode=mode, value=0.5) if mode == "constant" else F.pad(t, p, mode=mode)
            assert got.shape == want.shape and got.is_contiguous(memory_format=fmt), (got.shape, got.stride())
            close(got, want, 0.0)
    # the channel dim padded too (the permuted view's last dim)
    t = torch.randn(2, 6, 5, 4).permute(0, 3, 1, 2)
    p = [1, 0, 0, 2, 1, 1]
    close(pad.launch_pad(t, p, "constant", 0.0), F.pad(t, p), 0.0)


def check_layout() -> None:
    for shape in ((2, 5, 7, 3), (3, 70, 9, 11), (2, 3, 4, 5, 6), (1, 130, 1, 33)):
        x = torch.randn(*shape)
        fmt = torch.channels_last if x.dim() == 4 else torch.channels_last_3d
        for t in (x, x.transpose(-1, -2)):  # any input strides
            got = layout.to_channels_last(t)
            assert got.is_contiguous(memory_format=fmt), got.stride()
            close(got, t, 0.0)
    cl = torch.randn(2, 6, 5, 4).contiguous(memory_format=torch.channels_last)
    assert layout.to_channels_last(cl) is cl  # already channels-last: no copy
    for shape in ((2, 5, 7, 3), (3, 70, 9, 11), (2, 3, 4, 5, 6)):
        x = layout.to_channels_last(torch.randn(*shape))
        b = torch.randn(shape[1])
        got = layout.to_contiguous(x, b)
        assert got.is_contiguous()
        close(got, x + b.reshape([1, -1] + [1] * (x.dim() - 2)), 0.0)
        close(layout.to_contiguous(x, None), x, 0.0)


if __name__ == "__main__":
    results = {}
    for name, fn in list(globals().items()):
        if name.startswith("check_"):
            try:
                fn()
                results[name] = "ok"
            except Exception as e:  # reported to the test, which fails on it
                results[name] = f"{type(e).__name__}: {e}"
    print(json.dumps(results))
    sys.exit(0)
