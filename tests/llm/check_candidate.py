"""Run a candidate file against its KernelBench task under the Triton interpreter (a subprocess helper).

    TRITON_INTERPRET=1 python tests/llm/check_candidate.py TASK.py CANDIDATE.py [NAME=VALUE ...]
    EGG_CHECK_DEVICE=cuda python tests/llm/check_candidate.py TASK.py CANDIDATE.py     # on a GPU

NAME=VALUE overrides module-level size constants of the task. Prints one JSON line
{"max_abs_err": ..., "shape": [...]} and exits 1 when the outputs differ beyond 1e-4.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
import types


def _load(path: str, name: str, overrides: dict[str, int]) -> types.ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    for k, v in overrides.items():
        setattr(mod, k, v)
    return mod


def main(argv: list[str]) -> int:
    import torch

    task_path, cand_path, *rest = argv
    overrides = {k: int(v) for k, v in (a.split("=", 1) for a in rest)}
    task = _load(task_path, "egg_task", overrides)
    cand = _load(cand_path, "egg_candidate", {})
    device = os.environ.get("EGG_CHECK_DEVICE", "cpu")
    torch.manual_seed(0)
    init = task.get_init_inputs()
    ref = task.Model(*init).to(device)
    new = cand.ModelNew(*init).to(device)
    new.load_state_dict(ref.state_dict())
    inputs = [x.to(device) if isinstance(x, torch.Tensor) else x for x in task.get_inputs()]
    with torch.no_grad():
        want = ref(*inputs)
        got = new(*inputs)
    err = float((want - got).abs().max())
    ok = (
        got.shape == want.shape
        and got.dtype == want.dtype
        and torch.allclose(got, want, atol=1e-4, rtol=1e-4)
    )
    print(json.dumps({"max_abs_err": err, "shape": list(got.shape), "ok": bool(ok), "device": device}))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
