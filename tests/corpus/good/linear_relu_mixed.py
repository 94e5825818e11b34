# ruff: noqa
# task: linear_relu
# Mixed policy: the linear stays in PyTorch (cuBLAS), the ReLU epilogue is a Triton kernel.
import torch.nn as nn
import torch.nn.functional as F
import triton
import triton.language as tl


@triton.jit
def relu_inplace_kernel(y_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    y = tl.load(y_ptr + offs, mask=mask, other=0.0)
    tl.store(y_ptr + offs, tl.maximum(y, 0.0), mask=mask)


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.fc = nn.Linear(in_features, out_features)

    def forward(self, x):
        y = F.linear(x, self.fc.weight, self.fc.bias).contiguous()
        n = y.numel()
        relu_inplace_kernel[(triton.cdiv(n, 1024),)](y, n, BLOCK=1024)
        return y
