"""Combine functions for tl.reduce."""

import triton


@triton.jit
def _red_mul(a, b):
    return a * b
