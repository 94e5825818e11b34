"""The host probe's CPU-side parts: a kernel file made from a candidate's parameters, and the busy
processes of --load (the timing itself needs a GPU: evals/h200/session.sh host)."""

import json
from pathlib import Path

from evals.h200.host_probe import cpu_load, kernel_from_params
from graph.records import TaskSpec
from nodes.expert import ExpertCode
from nodes.models import CodeRequest, StageBrief
from tools.toolbox import Toolbox

# a row softmax of a scaled input with a residual: one small fused chain
TASK = (
    "import torch\nimport torch.nn as nn\n\nN, D = 12, 40\n\n\n"
    "class Model(nn.Module):\n"
    "    def forward(self, x):\n"
    "        return torch.softmax(x * 0.5, dim=-1) + x\n\n\n"
    "def get_inputs():\n    return [torch.randn(N, D)]\n\n\n"
    "def get_init_inputs():\n    return []\n"
)


def test_kernel_from_params_is_the_expert_candidate_of_those_params(tmp_path: Path) -> None:
    task = tmp_path / "t.py"
    task.write_text(TASK)
    spec = TaskSpec(path=str(task), name="t", source=TASK)
    desc = Toolbox().describe(spec, shrink=False)
    brief = StageBrief(name="algorithm", objective="test", may_change=[], must_keep=[])
    reply = ExpertCode().write(
        CodeRequest(mode="seed", stage=brief, task=spec, desc=desc, seed_index=1, n_seeds=3)
    )
    assert reply.source is not None
    params = tmp_path / "p.json"
    params.write_text(json.dumps(reply.params))
    path = kernel_from_params(str(task), str(params), str(tmp_path / "out"))
    assert Path(path).read_text() == reply.source
    assert Path(path).parent == tmp_path / "out"


def test_cpu_load_runs_its_processes_and_stops_them() -> None:
    with cpu_load(2) as procs:
        assert len(procs) == 2 and all(p.is_alive() for p in procs)
    assert not any(p.is_alive() for p in procs)
    with cpu_load(0) as procs:
        assert procs == []
