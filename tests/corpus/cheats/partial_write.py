# ruff: noqa
# expect: nan_parity
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


class ModelNew(nn.Module):
    """Processes only the first half; the rest is whatever the allocator hands back."""

    def forward(self, x):
        x = x.contiguous()
        out = torch.empty_like(x)
        half = x.numel() // 2
        relu_kernel[(triton.cdiv(half, 1024),)](x, out, half, BLOCK=1024)
        return out
