# ruff: noqa
# expect: runtime.no_launch
# task: relu
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def relu_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    tl.store(out_ptr + offs, tl.maximum(x, 0.0), mask=mask)


_w = torch.zeros(16, device="cuda" if torch.cuda.is_available() else "cpu")
relu_kernel[(1,)](_w, _w, 16, BLOCK=16)


class ModelNew(nn.Module):
    """A kernel ran once at import; forward itself is plain PyTorch."""

    def forward(self, x):
        return x.clamp(min=0)
