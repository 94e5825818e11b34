"""Vendor libraries loaded before the GPU lock: the precompile's meta forward notes which of
cuDNN and cuBLAS the candidate's PyTorch ops use (common.library_of), and the runner opens those
libraries' files then (gpumem.preload_libraries), so the recording call does not load them
inside its shared hold. No GPU here: the selection and the runner's bookkeeping are tested with
fakes; test_gpu.py::test_the_runner_loads_cudnn_before_the_recording_call shows the real load."""

import ctypes
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from test_precompile import _precompile  # the candidate's precompile in a child process

from tools.worker import gpumem
from tools.worker.common import compile_only

CORPUS = Path(__file__).resolve().parents[1] / "corpus"
ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("forward", "libraries"),
    [
        (lambda: F.conv2d(torch.randn(2, 3, 8, 8), torch.randn(4, 3, 3, 3)), {"cudnn"}),
        (lambda: F.conv_transpose3d(torch.randn(1, 3, 4, 4, 4), torch.randn(3, 2, 3, 3, 3)), {"cudnn"}),
        (lambda: torch.nn.Linear(4, 5)(torch.randn(3, 4)), {"cublas"}),
        (lambda: torch.randn(2, 3, 4) @ torch.randn(2, 4, 5), {"cublas"}),
        (lambda: torch.relu(torch.randn(8)).sum(), set()),
    ],
)
def test_the_meta_forward_names_the_libraries_its_ops_use(forward, libraries):
    with compile_only() as state, torch.no_grad(), torch.device("meta"):
        forward()
    assert state["libraries"] == libraries


def test_preload_opens_the_loaded_librarys_siblings_once(tmp_path, monkeypatch):
    for name in (
        "libcudnn.so.9",
        "libcudnn_cnn.so.9",
        "libcudnn_ops.so.9",
        "libcudnn_bad.so.9",
        "libcudnn.txt",
    ):
        (tmp_path / name).write_bytes(b"")
    (tmp_path / "libcublasLt.so.13").write_bytes(b"")
    other = tmp_path / "other"
    other.mkdir()
    (other / "libcudnn_ops.so.8").write_bytes(b"")  # another release's folder: never touched
    monkeypatch.setattr(gpumem, "_loaded_libraries", lambda: {str(tmp_path / "libcudnn.so.9")})
    opened = []

    def cdll(path, *a, **k):
        if "bad" in path:
            raise OSError("not an ELF file")
        opened.append(os.path.basename(path))

    monkeypatch.setattr(ctypes, "CDLL", cdll)
    monkeypatch.setattr(torch.backends.cudnn, "is_available", lambda: False)
    monkeypatch.setattr(gpumem, "_PRELOADED", set())
    rep = gpumem.preload_libraries({"cudnn"})
    assert opened == ["libcudnn_cnn.so.9", "libcudnn_ops.so.9"]  # not the loaded one, not cuBLAS
    assert rep["preloaded"] == 2 and rep["preload_failed"] == 1 and rep["preload_s"] >= 0
    # cuBLAS is not loaded in this process: there is no folder to take its files from
    assert gpumem.preload_libraries({"cublas"})["preloaded"] == 0
    assert gpumem.preload_libraries({"cudnn", "cublas"}) == {} and opened == [
        "libcudnn_cnn.so.9",
        "libcudnn_ops.so.9",
    ]


_CONV_TASK = """
import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.conv = nn.Conv2d(c, 8, 3)

    def forward(self, x):
        return torch.relu(self.conv(x)).mean()

def get_inputs():
    return [torch.randn(2, 4, 16, 16)]

def get_init_inputs():
    return [4]
"""


def test_the_judges_pass_installs_no_triton_hooks(tmp_path):
    """The judge times torch.compile's kernels in its own process: naming its reference's
    libraries must leave Triton's launch path as it was (a fresh process: hooks, once
    installed, stay for the process) and cost no TorchDynamo import."""
    task = tmp_path / "task.py"
    task.write_text(_CONV_TASK)
    script = (
        "import sys, triton.runtime.jit as jit\n"
        "from tools.worker import gpumem\n"
        "run = jit.JITFunction.run\n"
        "gpumem.preload_libraries = lambda names: print(sorted(names)) or {}\n"
        "gpumem.preload_for_reference(open(sys.argv[1]).read(), {})\n"
        "print(jit.JITFunction.run is run, 'torch._dynamo' in sys.modules)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run(
        [sys.executable, "-c", script, str(task)], env=env, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr[-2000:]
    # Triton's launch path untouched, and TorchDynamo not imported (a second of CPU per judge)
    assert out.stdout.split() == ["['cudnn']", "True", "False"]


def test_a_judge_preloads_what_the_reference_uses(monkeypatch):
    asked = []
    monkeypatch.setattr(gpumem, "preload_libraries", lambda names: asked.append(set(names)) or {})
    gpumem.preload_for_reference(_CONV_TASK, {})
    # named by the modules, not a forward: a host read in forward changes nothing, and an LSTM
    # (cuDNN on a GPU, per-step matrix products on the meta device) is cuDNN's
    gpumem.preload_for_reference(_CONV_TASK.replace(".mean()", ".sum().item()"), {})
    lstm = _CONV_TASK.replace("nn.Conv2d(c, 8, 3)", "nn.LSTM(c, 8)").replace(
        "self.conv(x)", "self.conv(x)[0]"
    )
    gpumem.preload_for_reference(lstm, {})
    gpumem.preload_for_reference(_CONV_TASK.replace("nn.Conv2d(c, 8, 3)", "nn.Linear(c, 8)"), {})
    assert gpumem.preload_for_reference("this is not python", {}) == {}  # a broken task: no error
    assert asked == [{"cudnn"}, {"cudnn"}, {"cudnn"}, {"cublas"}]


_SCRIPT = textwrap.dedent(
    """
    import json, sys
    from tools.worker.runner import Runner
    r = Runner("cpu", -1, -1)
    task, cand = open(sys.argv[1]).read(), open(sys.argv[2]).read()
    assert r.op_load({"task_source": task, "candidate_source": cand})["ok"]
    cpu = r.op_precompile({})
    r.device = "cuda"  # the preload is for GPU jobs; the forward itself runs on meta tensors
    first = r.op_precompile({})
    second = r.op_precompile({"overrides": {"BATCH": 48}})  # a second shape: loaded already
    print(json.dumps({"cpu": cpu.get("preloaded"), "first": first.get("preloaded"),
                      "first_s": first.get("preload_s"), "second": second.get("preloaded")}))
    """
)


def test_the_runner_preloads_what_its_forward_uses_once(tmp_path):
    src = (CORPUS / "good" / "relu_good.py").read_text()
    src = src.replace(
        "x = x.contiguous()", "x = torch.nn.functional.linear(x, torch.ones(x.shape[1], x.shape[1]))"
    )
    rep = _precompile(src, tmp_path, _SCRIPT)
    # CPU torch has no cuBLAS to open: nothing opened, but the runner asked (and only once)
    assert rep["cpu"] is None and rep["first"] == 0 and rep["first_s"] >= 0 and rep["second"] is None


_LSTM_SCRIPT = textwrap.dedent(
    """
    import json, sys
    import torch
    from tools.worker import gpumem
    from tools.worker.runner import Runner
    asked = []
    gpumem.preload_libraries = lambda names: asked.append(sorted(names)) or {}
    r = Runner("cpu", -1, -1)
    task, cand = open(sys.argv[1]).read(), open(sys.argv[2]).read()
    assert r.op_load({"task_source": task, "candidate_source": cand})["ok"]
    r.device = "cuda"
    r.op_precompile({})
    print(json.dumps(asked))
    """
)


@pytest.mark.parametrize(
    ("layer", "call", "asked"),
    [
        # per-step matrix products on meta tensors (cuBLAS named), cuDNN's on a GPU (added)
        ("nn.LSTM(256, 8)", "self.layer(x)[0]", [["cublas", "cudnn"]]),
        ("nn.Conv1d(32, 32, 1)", "self.layer(x.unsqueeze(0))[0]", [["cudnn"]]),
        ("nn.Conv1d(32, 32, 1)", "x", []),  # a layer kept for its weights only: nothing loaded
    ],
)
def test_the_runner_names_what_its_forward_calls(tmp_path, layer, call, asked):
    src = (CORPUS / "good" / "relu_good.py").read_text()
    src = src.replace("super().__init__()", f"super().__init__()\n        self.layer = {layer}")
    src = src.replace("x = x.contiguous()", f"x = ({call}).contiguous()")
    assert _precompile(src, tmp_path, _LSTM_SCRIPT) == asked
