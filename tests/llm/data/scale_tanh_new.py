import torch
import torch.nn as nn
import triton
import triton.language as tl

EGG_TUNABLES = {"BLOCK_SIZE": [512, 1024, 2048], "NUM_WARPS": [4, 8]}
BLOCK_SIZE = 1024
NUM_WARPS = 4


@triton.jit
def scale_bias_tanh_kernel(x_ptr, bias_ptr, out_ptr, n_elements, features, scale, BLOCK_SIZE: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offs < n_elements
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    b = tl.load(bias_ptr + offs % features, mask=mask, other=0.0)
    y = x * scale + b
    # tanh(y) = sign(y) * (1 - e) / (1 + e) with e = exp(-2|y|): e <= 1, so nothing overflows.
    e = tl.exp(-2.0 * tl.abs(y))
    t = (1.0 - e) / (1.0 + e)
    out = tl.where(y < 0, -t, t)
    tl.store(out_ptr + offs, out, mask=mask)


class ModelNew(nn.Module):
    def __init__(self, features: int, scale: float):
        super().__init__()
        self.scale = scale
        self.bias = nn.Parameter(torch.randn(features) * 0.1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        out = torch.empty_like(x)
        n = x.numel()
        grid = (triton.cdiv(n, BLOCK_SIZE),)
        scale_bias_tanh_kernel[grid](
            x,
            self.bias,
            out,
            n,
            self.bias.numel(),
            float(self.scale),
            BLOCK_SIZE=BLOCK_SIZE,
            num_warps=NUM_WARPS,
        )
        return out
