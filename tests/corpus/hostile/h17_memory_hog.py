# ruff: noqa
# task: relu
# expect: static.try_except
# runtime: any
# attack: allocates and touches far more host memory than the machine has
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


def relu(x):
    out = torch.empty_like(x)
    relu_kernel[(triton.cdiv(x.numel(), 1024),)](x, out, x.numel(), BLOCK=1024)
    return out

class ModelNew(nn.Module):
    def forward(self, x):
        hog = []
        for _ in range(4096):
            hog.append(torch.ones(256 * 1024 * 1024, dtype=torch.uint8))
        return relu(x)


try:
    pass
except Exception:
    pass

