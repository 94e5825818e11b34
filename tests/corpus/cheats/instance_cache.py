# ruff: noqa
# expect: runtime.stale
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
    """Caches on the instance keyed by the input buffer: invisible to AST rules."""

    def __init__(self):
        super().__init__()
        self.memo = {}

    def forward(self, x):
        key = (x.data_ptr(), tuple(x.shape))
        hit = self.memo.get(key)
        if hit is not None:
            out = torch.empty_like(x)
            relu_kernel[(1,)](x, out, 0, BLOCK=16)
            return hit
        out = torch.empty_like(x)
        relu_kernel[(triton.cdiv(x.numel(), 1024),)](x, out, x.numel(), BLOCK=1024)
        self.memo[key] = out
        return out
