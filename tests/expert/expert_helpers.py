"""Helpers for the expert tests, imported by module name (`conftest` is ambiguous across test dirs).

All torch/triton work happens in tests/expert/expert_runner.py subprocesses: the test process itself
never imports torch or triton, like the agent."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from graph.records import TaskDescription, TaskSpec
from nodes.models import CodeReply, CodeRequest, StageBrief

ROOT = Path(__file__).resolve().parents[2]
RUNNER = Path(__file__).with_name("expert_runner.py")
EXAMPLES = ROOT / "examples"


def run_jobs(jobs: list[dict[str, Any]], *, interpret: bool = True, timeout: float = 600) -> list[dict]:
    env = dict(os.environ)
    env.pop("TRITON_INTERPRET", None)
    if interpret:
        env["TRITON_INTERPRET"] = "1"
    env["PYTHONPATH"] = str(ROOT)
    with tempfile.TemporaryDirectory() as d:
        jp, rp = Path(d, "jobs.json"), Path(d, "results.json")
        jp.write_text(json.dumps(jobs))
        proc = subprocess.run(
            [sys.executable, str(RUNNER), str(jp), str(rp)],
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if not rp.exists():
            raise RuntimeError(f"runner died: rc={proc.returncode}\n{proc.stderr[-3000:]}")
        return json.loads(rp.read_text())


def describe_many(tasks: list[tuple[str, dict[str, int]]]) -> list[TaskDescription]:
    """(source, size overrides) -> TaskDescription, captured in one subprocess."""
    res = run_jobs([{"kind": "describe", "source": s, "overrides": o} for s, o in tasks], interpret=False)
    out = []
    for r in res:
        assert r["ok"], r
        out.append(TaskDescription.model_validate(r["desc"]))
    return out


def spec(source: str, overrides: dict[str, int] | None = None) -> TaskSpec:
    return TaskSpec(path="task.py", name="task", source=source, size_overrides=overrides or {})


def stage(name: str = "algorithm") -> StageBrief:
    return StageBrief(name=name, objective="test", may_change=[], must_keep=[])


def request(desc: TaskDescription, mode: str = "seed", **kw: Any) -> CodeRequest:
    return CodeRequest(mode=mode, stage=kw.pop("stage", stage()), task=spec(desc.source), desc=desc, **kw)


def check_jobs(source: str, overrides: dict[str, int], replies: list[CodeReply], **kw: Any) -> list[dict]:
    return [
        {"kind": "check", "task_source": source, "overrides": overrides, "candidate_source": r.source, **kw}
        for r in replies
    ]


TASK_HEAD = "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n\n"
TASK_TAIL = "\n\ndef get_init_inputs():\n    return [{init}]\n"


def task(init: str, body: str, forward: str, inputs: str, init_args: str = "") -> str:
    """A KernelBench task source: Model(init) with `body` in __init__ and `forward` over x."""
    return (
        TASK_HEAD
        + "class Model(nn.Module):\n"
        + f"    def __init__(self{', ' + init if init else ''}):\n        super().__init__()\n"
        + "".join(f"        {ln}\n" for ln in body.strip().splitlines() or ["pass"])
        + "\n    def forward(self, x):\n"
        + "".join(f"        {ln}\n" for ln in forward.strip().splitlines())
        + f"\n\ndef get_inputs():\n    return [{inputs}]\n"
        + TASK_TAIL.format(init=init_args)
    )
