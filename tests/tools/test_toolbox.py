"""Toolbox API: describe/shrink, bad tasks, compile reports and line mapping, profile, beats, egg check."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from graph.records import (
    CompileReport,
    Environment,
    KernelCompileInfo,
    TaskDescription,
    TaskSpec,
    TensorInfo,
    TimingReport,
)
from tools.check_cmd import check_command
from tools.toolbox import BadTaskError, Toolbox, beats

CORPUS = Path(__file__).resolve().parents[1] / "corpus"
TB = Toolbox(timeout_s=120)


def task(name: str, **kw) -> TaskSpec:
    p = CORPUS / "tasks" / f"{name}.py"
    return TaskSpec(path=str(p), name=name, source=p.read_text(), **kw)


def test_describe_shrinks_large_task_keeping_small_constants() -> None:
    d = TB.describe(task("big_softmax"), shrink=True)
    s = d.sizes_used
    assert s["KERNEL"] == 3
    assert s["BATCH"] * s["DIM"] * 2 <= 2**18
    assert s["BATCH"] < 4096 and s["DIM"] < 8192
    assert d.inputs[0].shape == [s["BATCH"], s["DIM"]] and d.outputs[0].shape == d.inputs[0].shape
    assert d.constants["BATCH"] == 4096  # as written
    assert d.bytes_moved == pytest.approx(2 * 4 * s["BATCH"] * s["DIM"])


def test_describe_shrinks_unpacked_and_tuple_size_constants(tmp_path) -> None:
    # `depth, height, width = ...` and `shape = (n,)` are sizes like `N = ...` (KernelBench writes
    # both); left at full size they cost the interpreter a quarter of an hour per check.
    src = (
        "import torch\nimport torch.nn as nn\nbatch = 16\nheight, width = 256, 512\n"
        "feat_shape = (4096,)\nkernel = (3, 3)\n"
        "class Model(nn.Module):\n"
        "    def __init__(self):\n        super().__init__()\n"
        "    def forward(self, x, y):\n        return torch.relu(x).sum() + y.sum()\n"
        "def get_inputs():\n    return [torch.randn(batch, height, width), torch.randn(*feat_shape)]\n"
        "def get_init_inputs():\n    return []\n"
    )
    d = TB.describe(TaskSpec(path=str(tmp_path / "t.py"), name="t", source=src), shrink=True)
    s = d.sizes_used
    assert s["height"] < 256 and s["width"] < 512 and s["feat_shape[0]"] < 4096, s
    assert s["kernel[0]"] == s["kernel[1]"] == 3
    assert d.inputs[0].shape == [s["batch"], s["height"], s["width"]]
    assert d.inputs[1].shape == [s["feat_shape[0]"]]
    assert d.constants["width"] == 512 and d.constants["feat_shape[0]"] == 4096


def test_describe_shrinks_a_small_but_compute_heavy_task_for_the_interpreter(tmp_path) -> None:
    # 64 images of 3x32x32 through a 3x3 conv to 64 channels: few elements, ~0.2 GFLOP, which
    # the interpreter would take minutes over; the batch is halved until the flops fit.
    src = (
        "import torch\nimport torch.nn as nn\nBATCH = 64\nOUT = 64\n"
        "class Model(nn.Module):\n"
        "    def __init__(self):\n        super().__init__()\n        self.conv = nn.Conv2d(3, OUT, 3)\n"
        "    def forward(self, x):\n        return torch.relu(self.conv(x))\n"
        "def get_inputs():\n    return [torch.randn(BATCH, 3, 32, 32)]\n"
        "def get_init_inputs():\n    return []\n"
    )
    d = TB.describe(TaskSpec(path=str(tmp_path / "conv.py"), name="conv", source=src), shrink=True)
    from tools.worker.describe import SHRINK_FLOPS

    assert d.flops is not None and d.flops <= SHRINK_FLOPS
    assert d.sizes_used["BATCH"] < 64


def test_a_network_with_fixed_layers_gets_a_small_batch_for_the_interpreter(tmp_path) -> None:
    # Channels and image size are written into the layers (like KernelBench's CNNs): only the
    # batch and the class count are constants. Halving stops at 8 for constants in general, but a
    # forward still far over the flops budget has its batch halved further, to 2 at the least.
    src = (
        "import torch\nimport torch.nn as nn\nbatch_size = 16\nnum_classes = 100\nIMG = 9\n"
        "class Model(nn.Module):\n"
        "    def __init__(self, num_classes):\n        super().__init__()\n"
        "        self.c1 = nn.Conv2d(3, 64, 5, padding=2)\n        self.c2 = nn.Conv2d(64, 64, 3, padding=1)\n"
        "        self.fc = nn.Linear(64, num_classes)\n"
        "    def forward(self, x):\n"
        "        x = torch.relu(self.c2(torch.relu(self.c1(x))))\n"
        "        return self.fc(x.mean(dim=(2, 3)))\n"
        "def get_inputs():\n    return [torch.randn(batch_size, 3, 112, 112)]\n"
        "def get_init_inputs():\n    return [num_classes]\n"
    )
    d = TB.describe(TaskSpec(path=str(tmp_path / "net.py"), name="net", source=src), shrink=True)
    assert d.sizes_used["batch_size"] == 2, d.sizes_used
    assert d.inputs[0].shape == [2, 3, 112, 112]
    assert d.sizes_used["IMG"] == 9  # a constant that is not the leading dim is left alone


def test_describe_matmul_flops_params_and_overrides() -> None:
    d = TB.describe(task("matmul", size_overrides={"M": 32}), shrink=False)
    assert d.sizes_used["M"] == 32 and d.outputs[0].shape == [32, 48]
    assert d.flops == pytest.approx(2 * 32 * 64 * 48)
    d2 = TB.describe(task("linear_relu"), shrink=False)
    assert {p.name for p in d2.params} == {"fc.weight", "fc.bias"}
    assert d2.init_args == [64, 48]
    # The checker's memory estimate comes with the description (shares of a GPU only on a GPU).
    a, b, c = 32 * 64 * 4, 64 * 48 * 4, 32 * 48 * 4  # bytes of A, B and the output at M=32
    from tools.worker import gpumem

    assert d.check_peak_bytes == gpumem.INPUT_COPIES * (
        a + b
    ) + gpumem.OUTPUT_COPIES * c + gpumem.compare_bytes(c)
    assert d.check_memory_units is None


def test_bad_task_raises_one_line() -> None:
    with pytest.raises(BadTaskError) as e:
        TB.describe(task("bad_no_inputs"), shrink=True)
    assert "get_inputs" in str(e.value) and "\n" not in str(e.value)
    with pytest.raises(BadTaskError, match="unknown"):
        TB.describe(task("relu", size_overrides={"NOPE": 3}), shrink=False)


def test_compile_reports_registers_and_constants() -> None:
    r = TB.compile(task("matmul"), (CORPUS / "good" / "matmul_good.py").read_text())
    assert r.ok, r.error
    k = r.kernels[0]
    assert k.name == "matmul_kernel" and k.registers and k.registers > 0 and k.spills == 0
    assert k.constants["BM"] == 32 and k.shared_bytes and k.shared_bytes > 0


def test_compile_names_the_mma_its_dots_use() -> None:
    """64x64 TF32 tiles with unit strides: Hopper's warpgroup MMA; an IEEE fp32 dot: no MMA."""
    src = (
        (CORPUS / "good" / "matmul_good.py")
        .read_text()
        .replace("BM, BN, BK = 32, 32, 32", "BM, BN, BK = 64, 64, 32")
    )
    tf32 = TB.compile(task("matmul"), src.replace('input_precision="ieee"', 'input_precision="tf32"'))
    ieee = TB.compile(task("matmul"), src)
    assert tf32.ok and ieee.ok, (tf32.error, ieee.error)
    assert tf32.kernels[0].mma == "wgmma" and ieee.kernels[0].mma is None


def test_compile_specialises_launches_like_triton() -> None:
    """The compiled program is the launched one: integers equal to 1 become constexprs and
    16-divisible integers / aligned pointers get divisibility hints, as Triton's launcher does,
    unless the kernel opts out (do_not_specialize)."""
    from types import SimpleNamespace

    import torch

    from tools.worker.compile_job import _specialised, launch_signature

    def k(x_ptr, n, stride, m, BLOCK):
        pass

    k.__annotations__ = {"BLOCK": "tl.constexpr"}
    x = torch.empty(64)
    spec = launch_signature(SimpleNamespace(fn=k), (x, 48, 1, 7), {"BLOCK": 32, "num_warps": 2})
    assert spec["ones"] == ["stride"] and spec["divisible"] == ["x_ptr", "n"]
    assert spec["signature"]["stride"] == "i32" and spec["num_warps"] == 2

    def param(name, dns=False):
        return SimpleNamespace(name=name, do_not_specialize=dns, do_not_specialize_on_alignment=False)

    fn = SimpleNamespace(params=[param("x_ptr"), param("n"), param("stride"), param("m"), param("BLOCK")])
    sig, consts, attrs = _specialised(fn, spec)
    assert sig["stride"] == "constexpr" and consts["stride"] == 1 and consts["BLOCK"] == 32
    assert attrs == {(0,): [["tt.divisibility", 16]], (1,): [["tt.divisibility", 16]]}
    fn.params[2] = param("stride", dns=True)
    fn.params[1] = param("n", dns=True)
    sig, consts, attrs = _specialised(fn, spec)
    assert sig["stride"] == "i32" and "stride" not in consts and (1,) not in attrs


# A candidate the static rules accept, so that it gets as far as being run.
_WELL_FORMED = """import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def copy_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)


def launch(x):
    out = torch.empty_like(x)
    copy_kernel[(triton.cdiv(x.numel(), 256),)](x, out, x.numel(), BLOCK=256)
    return out
# body


class ModelNew(nn.Module):
    def forward(self, x):
        return launch(x)
"""


@pytest.mark.parametrize(
    "source,kind,line",
    [
        ("import torch\n\ndef f(:\n    pass\n", "syntax", 3),
        (_WELL_FORMED.replace("# body", "x = 1 // 0"), "import", 17),
        # a name the file never binds: refused before it runs (the CPU interpreter injects some)
        (_WELL_FORMED.replace("# body", "x = undefined_name + 1"), "static", 17),
        ((CORPUS / "broken" / "triton_error.py").read_text(), "triton", 15),
        (_WELL_FORMED.replace("return launch(x)", "return torch.zeros_like(x)"), "no_kernel", None),
        ("import torch\nimport torch.nn as nn\n\nclass ModelNew(nn.Module):\n    pass\n", "static", 4),
    ],
    ids=["syntax", "import", "undefined", "triton", "no_kernel", "static"],
)
def test_compile_errors_map_to_candidate_lines(source: str, kind: str, line: int | None) -> None:
    r = TB.compile(task("relu"), source)
    assert not r.ok and r.error_kind == kind, r
    assert r.error_line == line
    assert r.error


def test_time_on_cpu_is_not_measured() -> None:
    t = TB.time(task("relu"), "irrelevant")
    assert not t.measured and t.reason == "timing needs a CUDA GPU; not measured on CPU"
    assert TB.benchmark(task("relu"), "x").measured is False


def _timing(ms: float, noise: float, measured: bool = True) -> TimingReport:
    return TimingReport(
        measured=measured, candidate_ms=ms, noise=noise, eager_ms=1.0, env=Environment(gpu="NVIDIA H200")
    )


def test_beats_requires_margin_beyond_noise() -> None:
    assert beats(_timing(0.90, 0.02), _timing(1.0, 0.02))
    assert not beats(_timing(0.99, 0.02), _timing(1.0, 0.02))
    assert not beats(_timing(0.90, 0.15), _timing(1.0, 0.02))
    assert not beats(_timing(0.5, 0.01, measured=False), _timing(1.0, 0.01))


def _desc(flops: float, nbytes: float) -> TaskDescription:
    return TaskDescription(
        name="t",
        source="",
        inputs=[TensorInfo(shape=[1024], dtype="float32")],
        outputs=[TensorInfo(shape=[1024], dtype="float32")],
        flops=flops,
        bytes_moved=nbytes,
    )


def test_profile_classifies_memory_compute_latency() -> None:
    comp = CompileReport(
        ok=True,
        kernels=[
            KernelCompileInfo(name="k", num_warps=4, num_stages=2, registers=40, spills=16, shared_bytes=0)
        ],
    )
    mem = TB.profile(_desc(1e9, 4.3e9), _timing(2.0, 0.01), comp)
    assert mem.bottleneck == "memory" and mem.achieved_gbps == pytest.approx(2150, rel=1e-3)
    assert mem.roofline_fraction == pytest.approx(0.5, rel=1e-3)
    assert any("spills 16" in e for e in mem.evidence) and mem.suggestion
    assert mem.ncu_skipped
    cmp_ = TB.profile(_desc(67e12, 1e6), _timing(2000.0, 0.01), None)
    assert cmp_.bottleneck == "compute" and cmp_.achieved_tflops == pytest.approx(33.5, rel=1e-3)
    lat = TB.profile(_desc(1e3, 1e4), _timing(0.004, 0.01), None)
    assert lat.bottleneck == "latency"
    none = TB.profile(_desc(1e3, 1e4), TimingReport(measured=False, reason="cpu"), None)
    assert none.bottleneck == "unknown" and none.achieved_gbps is None


def test_check_command_exit_codes_and_json(capsys: pytest.CaptureFixture[str]) -> None:
    t = str(CORPUS / "tasks" / "relu.py")
    assert check_command(t, str(CORPUS / "good" / "relu_good.py"), device="cpu", as_json=True) == 0
    out = json.loads(capsys.readouterr().out)
    assert {"accepted", "reasons", "max_abs_err", "max_rel_err", "trials", "timing"} <= set(out)
    assert out["accepted"] is True and out["timing"] is None and out["trials"] == 5
    assert check_command(t, str(CORPUS / "cheats" / "mutates_input.py"), device="cpu") == 1
    text = capsys.readouterr().out
    assert "REJECTED" in text and "inputs.mutated:" in text and "policy mixed" in text
    assert check_command(t, str(CORPUS / "nope.py"), device="cpu") == 2
    assert "not found" in capsys.readouterr().err
    assert (
        check_command(
            str(CORPUS / "tasks" / "bad_no_inputs.py"),
            str(CORPUS / "good" / "relu_good.py"),
            device="cpu",
            as_json=True,
        )
        == 2
    )
    bad = json.loads(capsys.readouterr().out)
    assert bad["accepted"] is False and "get_inputs" in bad["reasons"][0]


def _fake_runs(monkeypatch: pytest.MonkeyPatch, results: list) -> list:
    """Replace the sandbox with scripted JobResults; returns the jobs the toolbox sent."""
    import tools.toolbox as toolbox
    from tools.protocol import JobResult

    sent: list = []

    def fake(job, *, timeout_s, python=None):
        sent.append(job)
        r = results.pop(0)
        return r if isinstance(r, JobResult) else JobResult(kind=job.kind, **r)

    monkeypatch.setattr(toolbox, "run_job", fake)
    monkeypatch.setattr(toolbox.time, "sleep", lambda s: None)
    return sent


def test_gpu_oom_is_retried_with_the_whole_gpu_and_never_blamed(monkeypatch: pytest.MonkeyPatch) -> None:
    """A check that runs out of GPU memory while other jobs hold it is the machine's fault: the
    toolbox retries it with every memory share, and the debugger never sees it."""
    accepted = {"ok": True, "payload": {"accepted": True, "reasons": [], "device": "cuda"}}
    oom = {"ok": False, "error_kind": "oom", "error": "the candidate's process ran out of GPU memory"}
    sent = _fake_runs(monkeypatch, [oom, accepted])
    r = Toolbox(timeout_s=60).check(task("relu", device="cuda"), "source")
    assert r.accepted
    from tools.worker.gpumem import SLOTS

    # no shares from the toolbox (the worker sized itself): the retry cannot know better than all
    assert "memory_units" not in sent[0].options and sent[1].options["memory_units"] == SLOTS == 64
    # still out of memory with the whole GPU on the last try: then, and only then, the candidate
    # hears of it (the worker turns the last try's OOM into a rejection)
    sent = _fake_runs(
        monkeypatch, [oom, oom, {"ok": True, "payload": {"accepted": False, "reasons": ["run.oom: x"]}}]
    )
    r = Toolbox(timeout_s=60).check(task("relu", device="cuda"), "source")
    assert not r.accepted and r.reasons == ["run.oom: x"]
    assert sent[2].options["last_attempt"] is True


def test_an_oom_retry_doubles_the_jobs_shares_and_the_tasks_later_jobs_keep_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A job admitted with the task's shares that runs out of memory is retried with twice as many
    (never fewer than the task measured), not the whole GPU, which would wait for every other
    job to drain; only the last try takes every share. The task's later jobs ask for the raised
    shares."""
    from tools.worker.gpumem import SLOTS

    accepted = {"ok": True, "payload": {"accepted": True, "reasons": [], "device": "cuda"}}
    oom = {"ok": False, "error_kind": "oom", "error": "the candidate's process ran out of GPU memory"}
    tb = Toolbox(timeout_s=60)
    t = task("relu", device="cuda")
    tb._peak[tb._task_key(t)] = {"memory_units": 3, "screen_units": 2}
    sent = _fake_runs(monkeypatch, [oom, accepted])
    assert tb.check(t, "source").accepted
    assert [j.options["memory_units"] for j in sent] == [3, 6]
    assert "last_attempt" not in sent[1].options
    sent = _fake_runs(monkeypatch, [accepted])
    tb.check(t, "source")
    assert sent[0].options["memory_units"] == 6 and sent[0].options["screen_units"] == 2
    # a job sent with fewer shares than the task now knows it needs (a sibling raised them while
    # it ran): the task's figure; the last try, every share
    tb._peak[tb._task_key(t)] = {"memory_units": 20, "screen_units": 1}
    job = tb._job("check", t, candidate_source="source")
    job = job.model_copy(update={"options": {**job.options, "memory_units": 5}})
    assert tb._oom_retry_units(job, last_try=False) == 20
    sent = _fake_runs(monkeypatch, [oom, oom, accepted])
    assert tb.check(t, "source").accepted
    assert [j.options["memory_units"] for j in sent] == [20, 40, SLOTS]
    assert sent[2].options["last_attempt"] is True


def test_a_dead_judge_or_lasting_oom_is_an_infra_error_not_a_rejection(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from tools.errors import ToolInfraError

    dead = {
        "ok": False,
        "error_kind": "crash",
        "error": "worker killed by signal SIGKILL (e.g. out of memory)",
    }
    _fake_runs(monkeypatch, [dead, dead, dead])
    with pytest.raises(ToolInfraError, match="reasons of the machine"):
        Toolbox(timeout_s=60).check(task("relu", device="cuda"), "source")
    # describe: a full GPU is never "bad input"
    oom = {"ok": False, "error_kind": "oom", "error": "get_inputs() ran out of GPU memory"}
    _fake_runs(monkeypatch, [oom, oom, oom])
    with pytest.raises(ToolInfraError):
        Toolbox(timeout_s=60).describe(task("relu", device="cuda"), shrink=False)


def test_nondeterministic_reference_is_bad_input(tmp_path: Path) -> None:
    src = (
        "import torch\nimport torch.nn as nn\nN = 32\n\n\nclass Model(nn.Module):\n"
        "    def forward(self, x):\n        return x + torch.rand_like(x)\n\n\n"
        "def get_inputs():\n    return [torch.randn(N, N)]\n\n\ndef get_init_inputs():\n    return []\n"
    )
    t = TaskSpec(path=str(tmp_path / "r.py"), name="r", source=src)
    with pytest.raises(BadTaskError, match="nondeterministic"):
        TB.describe(t, shrink=True)


def test_baselines_are_prefetched_in_the_background_and_the_benchmark_waits_for_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """prefetch_baselines times eager and torch.compile with no candidate while the stages run;
    the final benchmark waits for it instead of compiling torch.compile a second time at once."""
    import threading
    import time as _time

    import tools.toolbox as toolbox
    from tools.protocol import JobResult

    events: list[str] = []
    release = threading.Event()

    def fake(job, *, timeout_s, python=None):
        if job.candidate_source is None:
            events.append("prefetch start")
            release.wait(5)
            events.append("prefetch end")
            return JobResult(kind=job.kind, ok=True, payload={"measured": True, "compile_ms": 0.5})
        events.append(f"{job.kind} with candidate")
        return JobResult(kind=job.kind, ok=True, payload={"measured": True, "candidate_ms": 0.4})

    monkeypatch.setattr(toolbox, "run_job", fake)
    tb = Toolbox(timeout_s=60)
    t = task("relu", device="cuda")
    tb.prefetch_baselines(t)
    tb.prefetch_baselines(t)  # once per task
    done: list = []
    bench = threading.Thread(target=lambda: done.append(tb.benchmark(t, "source")))
    bench.start()
    _time.sleep(0.3)
    assert events == ["prefetch start"] and not done  # the benchmark is waiting
    release.set()
    bench.join(5)
    assert events == ["prefetch start", "prefetch end", "benchmark with candidate"]
    assert done[0].measured and done[0].candidate_ms == 0.4
    # on CPU nothing is prefetched
    tb.prefetch_baselines(task("relu"))
    assert events.count("prefetch start") == 1


def test_a_failed_prefetch_leaves_the_benchmark_to_measure_everything(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import tools.toolbox as toolbox
    from tools.protocol import JobResult

    kinds: list[tuple[str, bool]] = []

    def fake(job, *, timeout_s, python=None):
        kinds.append((job.kind, job.candidate_source is None))
        if job.candidate_source is None:
            raise RuntimeError("worker pool gone")
        return JobResult(kind=job.kind, ok=True, payload={"measured": True, "candidate_ms": 0.4})

    monkeypatch.setattr(toolbox, "run_job", fake)
    monkeypatch.setattr(toolbox.time, "sleep", lambda s: None)
    tb = Toolbox(timeout_s=60)
    t = task("relu", device="cuda")
    tb.prefetch_baselines(t)
    r = tb.benchmark(t, "source")
    assert r.measured and ("benchmark", False) in kinds
