# ruff: noqa
# task: state_linear
# Mixed policy: both products stay in PyTorch, the sum and the ReLU are one Triton kernel; the
# reference builds a float32 state in forward (the float64 twin must upcast it to run at all).
import torch
import torch.nn as nn
import torch.nn.functional as F
import triton
import triton.language as tl


@triton.jit
def add_relu_kernel(a_ptr, b_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    a = tl.load(a_ptr + offs, mask=mask, other=0.0)
    b = tl.load(b_ptr + offs, mask=mask, other=0.0)
    tl.store(out_ptr + offs, tl.maximum(a + b, 0.0), mask=mask)


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.fc = nn.Linear(in_features, out_features)
        self.w = nn.Parameter(torch.randn(out_features, out_features) * 0.1)

    def forward(self, x):
        h = torch.ones(x.shape[0], self.w.shape[0], device=x.device)
        a = F.linear(x, self.fc.weight, self.fc.bias).contiguous()
        b = torch.matmul(h, self.w).contiguous()
        out = torch.empty_like(a)
        n = out.numel()
        add_relu_kernel[(triton.cdiv(n, 1024),)](a, b, out, n, BLOCK=1024)
        return out
