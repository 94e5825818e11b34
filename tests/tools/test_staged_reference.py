"""Checker.stage: the reference Model built on the CPU before the GPU lock is taken gives the
same reference as building it inside the trial: the same weights, the same random draws after
it (a forward that draws random numbers), and a fresh copy for every trial (a forward that
changes the module's state)."""

import textwrap

import pytest

torch = pytest.importorskip("torch")

from tools.protocol import Job  # noqa: E402
from tools.worker.check import Checker  # noqa: E402
from tools.worker.common import load_task  # noqa: E402

TASK = textwrap.dedent(
    """
    import torch
    import torch.nn as nn

    class Model(nn.Module):
        def __init__(self, n):
            super().__init__()
            self.lin = nn.Linear(n, n)
            self.register_buffer("calls", torch.zeros(()))

        def forward(self, x):
            self.calls += 1  # state a forward changes: every trial must start fresh
            return self.lin(x) * self.calls + 0.1 * torch.randn_like(x)

    def get_inputs():
        return [torch.randn(4, 24)]

    def get_init_inputs():
        return [24]
    """
)


def _checker() -> Checker:
    job = Job(kind="check", task_path="t.py", task_source=TASK, candidate_source="")
    return Checker(job, runner=None)


def test_a_staged_reference_is_the_reference_built_in_the_trial():
    task = load_task(TASK, {})
    plain = _checker()
    inputs = plain.inputs(task, 5, None)
    native, full = plain.reference(task, 1234, inputs)
    again, _ = plain.reference(task, 1234, inputs)
    assert torch.equal(native[0], again[0])  # the unstaged path is itself repeatable

    staged = _checker()
    staged.stage(task, 1234)
    s_native, s_full = staged.reference(task, 1234, inputs)
    s_again, _ = staged.reference(task, 1234, inputs)  # a second trial on the same weights
    assert torch.equal(native[0], s_native[0]) and torch.equal(full[0], s_full[0])
    assert torch.equal(s_native[0], s_again[0])  # a fresh copy: `calls` started at 0 again
    assert "judge.stage_reference" in staged.steps

    other, _ = staged.reference(task, 99, inputs)  # another weight seed is built in the trial
    assert not torch.equal(other[0], s_native[0])


class _Runner:
    def __init__(self) -> None:
        self.log: list[str] = []

    def start(self, op, **kw):
        self.log.append(f"start {op} {kw['weight_seed']}")

    def finish(self, op, timeout_s=None):
        self.log.append(f"finish {op}")
        return {"ok": True, "staged": True}


def test_on_a_gpu_the_runner_stages_its_build_while_the_judge_builds_the_reference():
    task = load_task(TASK, {})
    ck = _checker()
    ck.runner, ck._cuda = _Runner(), True  # a GPU check (no GPU work happens in stage)
    ck.stage(task, 5, {})
    assert ck.runner.log == ["start stage 5", "finish stage"] and (id(task), 5) in ck._staged
    # the reply is read even when the judge's own build fails: the channel stays in step
    broken = load_task(TASK.replace("self.lin = nn.Linear(n, n)", "raise ValueError('no')"), {})
    ck.runner.log.clear()
    with pytest.raises(ValueError):
        ck.stage(broken, 6, {})
    assert ck.runner.log == ["start stage 6", "finish stage"]
