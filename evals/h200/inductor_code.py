"""Print what torch.compile generates for a task (its Inductor output code), to read which layout
and fusions it chose: `TORCH_LOGS=output_code python -m evals.h200.inductor_code TASK.py 2> log`.
Reading it is for facts (which kernels, which layout); none of it is copied into EGG."""

from __future__ import annotations

import sys

import torch

from evals.h200.convlayout import load


def main(path: str) -> int:
    mod = load(path)
    model = mod.Model(*mod.get_init_inputs()).cuda()
    x = [t.cuda() if isinstance(t, torch.Tensor) else t for t in mod.get_inputs()]
    with torch.no_grad():
        torch.compile(model)(*x)
    torch.cuda.synchronize()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
