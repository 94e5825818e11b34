"""Host-side arithmetic for the generated launchers, without Triton's constexpr wrapper.

`triton.cdiv` and `triton.next_power_of_2` are constexpr functions in Triton 3.6: called from
Python each goes through ConstexprFunction.__call__ (an import, argument unwrapping), about 5 us
a call on a 2-core CPU host against well under 1 us for the arithmetic itself, and a launcher
calls them several times per kernel. `torch.broadcast_shapes` runs PyTorch's Python reference
implementation with symbolic-shape guards (about 9 us a call there for equal shapes, more for
unequal ones). The assembler
(assemble.render) swaps these in for the host code of a candidate; kernels keep Triton's own.
"""

import torch


def _host_cdiv(x, div):
    """triton.cdiv: the same formula, (x + div - 1) // div."""
    return (x + div - 1) // div


def _host_next_pow2(n):
    """triton.next_power_of_2 for ints: the smallest power of two >= n (0 for 0)."""
    n = n.__index__()  # integers only (Triton's bit arithmetic refuses a float too)
    return 1 << (n - 1).bit_length() if n > 0 else 0


def _host_broadcast(*shapes):
    """torch.broadcast_shapes over shapes (tuples of ints): NumPy's rule in plain Python."""
    first = shapes[0]
    if all(s == first for s in shapes[1:]):
        return torch.Size(first)
    nd = max(len(s) for s in shapes)
    out = [1] * nd
    for s in shapes:
        for i, d in enumerate(s, nd - len(s)):
            if d != 1:
                if out[i] != 1 and out[i] != d:
                    raise RuntimeError(f"shapes {[tuple(x) for x in shapes]} do not broadcast")
                out[i] = d
    return torch.Size(out)
