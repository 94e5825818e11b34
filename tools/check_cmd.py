"""`egg check TASK.py CANDIDATE.py`: verify one candidate the way the agent does.

Exit codes: 0 accepted, 1 rejected (every reason printed), 2 bad input (one line, no traceback).
The agent process never imports torch: the device is probed in a worker job.
"""

from __future__ import annotations

import json
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from graph.records import TaskSpec
from tools.errors import read_task_source
from tools.protocol import Job
from tools.sandbox import run_job
from tools.toolbox import BadTaskError, Toolbox, ToolInfraError


def cuda_available(timeout_s: float = 120.0) -> bool:
    job = Job(kind="selftest", task_path="", task_source="", device="cuda", options={"what": "env"})
    res = run_job(job, timeout_s=timeout_s)
    return bool(res.ok and res.payload.get("cuda"))


def _fail(msg: str, as_json: bool) -> int:
    if as_json:
        print(
            json.dumps(
                {
                    "accepted": False,
                    "reasons": [f"bad_input: {msg}"],
                    "max_abs_err": None,
                    "max_rel_err": None,
                    "trials": 0,
                    "timing": None,
                    "error": msg,
                }
            )
        )
    else:
        print(f"error: {msg}", file=sys.stderr)
    return 2


def check_command(
    task_path: str,
    candidate_path: str,
    *,
    device: str = "auto",
    as_json: bool = False,
    policy: str = "mixed",
    tolerance: float | None = None,
) -> int:
    tp, cp = Path(task_path), Path(candidate_path)
    for p, what in ((tp, "task"), (cp, "candidate")):
        if not p.is_file():
            return _fail(f"{what} file not found: {p}", as_json)
    if device not in ("auto", "cpu", "cuda"):
        return _fail(f"--device must be auto, cpu or cuda (got {device!r})", as_json)
    if policy not in ("mixed", "strict"):
        return _fail(f"--policy must be mixed or strict (got {policy!r})", as_json)
    if tolerance is not None and not tolerance > 0:
        return _fail("--tolerance must be a positive number", as_json)
    try:
        task_src = read_task_source(tp)
    except BadTaskError as e:
        return _fail(f"bad task: {e}", as_json)
    try:
        cand_src = cp.read_text()
    except (OSError, UnicodeDecodeError) as e:
        return _fail(f"cannot read the candidate: {e}", as_json)
    tb = Toolbox()
    try:
        if device == "auto":
            device = "cuda" if cuda_available() else "cpu"
        elif device == "cuda" and not cuda_available():
            return _fail("--device cuda requested but no CUDA GPU is available", as_json)
        task = TaskSpec(path=str(tp), name=tp.stem, source=task_src, device=device)
        desc = tb.describe(task, shrink=device == "cpu")
        if device == "cpu":
            task = task.model_copy(
                update={
                    "size_overrides": {k: int(v) for k, v in desc.sizes_used.items() if isinstance(v, int)}
                }
            )
        # Compile (sm_90) and check are independent jobs: run them side by side.
        with ThreadPoolExecutor(2) as ex:
            f_comp = ex.submit(tb.compile, task, cand_src)
            f_check = ex.submit(tb.check, task, cand_src, policy=policy, tolerance=tolerance)
            comp, report = f_comp.result(), f_check.result()
        reasons = list(report.reasons)
        if not comp.ok:
            where = f" (line {comp.error_line})" if comp.error_line else ""
            reasons.insert(0, f"compile.{comp.error_kind}: {comp.error}{where}")
        accepted = report.accepted and comp.ok
        timing = tb.time(task, cand_src) if accepted and device == "cuda" else None
    except BadTaskError as e:
        return _fail(f"bad task: {e}", as_json)
    except ToolInfraError as e:
        return _fail(f"tool failure: {str(e).splitlines()[0]}", as_json)
    out: dict[str, Any] = {
        "accepted": accepted,
        "reasons": reasons,
        "max_abs_err": report.max_abs_err,
        "max_rel_err": report.max_rel_err,
        "trials": report.trials,
        "timing": timing.model_dump(mode="json") if timing is not None else None,
        "policy": report.policy,
        "device": device,
        "delegated_ops": report.delegated_ops,
        "tolerance": report.tolerance,
        "tolerance_widened": report.tolerance_widened,
        "degenerate": sorted(set(desc.degenerate) | set(report.degenerate)),
        "sizes_used": desc.sizes_used,
        "shapes_checked": report.shapes_checked,
        "compile": comp.model_dump(mode="json"),
    }
    if as_json:
        print(json.dumps(out))
    else:
        _print_human(out)
    return 0 if accepted else 1


def _print_human(o: dict[str, Any]) -> None:
    print(
        f"{'ACCEPTED' if o['accepted'] else 'REJECTED'}  (device {o['device']}, policy {o['policy']}, "
        f"{o['trials']} trial(s))"
    )
    for r in o["reasons"]:
        print(f"  - {r}")
    if o["max_abs_err"] is not None:
        print(f"  max_abs_err {o['max_abs_err']:.3g}  max_rel_err {o['max_rel_err']:.3g}")
    tol = o["tolerance"]
    if tol:
        print(
            f"  tolerance atol {tol.get('atol', 0):.3g} rtol {tol.get('rtol', 0):.3g}"
            f" (reference's own error {tol.get('reference_err', 0):.3g})"
            + ("  [WIDENED by --tolerance]" if o["tolerance_widened"] else "")
        )
    if o["delegated_ops"]:
        print(f"  delegated to PyTorch: {', '.join(o['delegated_ops'])}")
    if o["degenerate"]:
        print(f"  notes: {'; '.join(o['degenerate'])}")
    print(f"  sizes: {o['sizes_used']}")
    for k in o["compile"].get("kernels", []):
        print(
            f"  kernel {k['name']}: warps {k['num_warps']} stages {k['num_stages']} regs {k['registers']} "
            f"spills {k['spills']} shared {k['shared_bytes']} B"
        )
    t = o["timing"]
    if t is not None:
        if t["measured"]:
            env = t.get("env") or {}
            print(
                f"  timing: candidate {t['candidate_ms']:.4f} ms (p20 {t['candidate_p20_ms']:.4f}, p80 "
                f"{t['candidate_p80_ms']:.4f}), eager {t['eager_ms']:.4f} ms, noise {t['noise']:.1%} "
                f"on {env.get('gpu')}"
            )
        else:
            print(f"  timing: not measured: {t['reason']}")
