"""Builders for LLM-role tests: requests over the scale+tanh task (imported by tests/llm/test_llm_*.py)."""

from __future__ import annotations

import sys
from pathlib import Path

from graph.records import (
    Attempt,
    BestKernel,
    Candidate,
    CheckReport,
    CompileReport,
    OpNode,
    ProfileReport,
    StageDecision,
    TaskDescription,
    TaskSpec,
    TensorInfo,
    TimingReport,
)
from nodes.models import AttemptSummary, CodeRequest, DebuggerRequest, ProfilerRequest, StageBrief

HERE = Path(__file__).resolve().parent
DATA = HERE / "data"
sys.path.insert(0, str(HERE))  # fake_openai is a script as well as a module

from fake_openai import FakeOpenAI  # noqa: E402, F401 - re-exported for the tests

TASK_SOURCE = (DATA / "scale_tanh.py").read_text()
KERNEL_SOURCE = (DATA / "scale_tanh_new.py").read_text()
KERNEL_REPLY = (DATA / "scale_tanh_reply.md").read_text()
STAGE_NAMES = ("algorithm", "mapping", "tiling", "memory")

_BRIEFS = {
    "algorithm": (
        "find the fastest correct algorithm",
        ["fusion", "one-pass forms"],
        ["results"],
        ["accumulate in fp32"],
    ),
    "mapping": ("choose the grid and work per program", ["grid shape"], ["the algorithm"], ["fill 132 SMs"]),
    "tiling": (
        "choose block sizes by timing",
        ["BLOCK_* sizes"],
        ["the algorithm", "the mapping"],
        ["powers of two"],
    ),
    "memory": ("tune data movement", ["num_warps", "num_stages"], ["block sizes"], ["coalesced access"]),
}


def brief(stage: str) -> StageBrief:
    obj, may, must, pr = _BRIEFS[stage]
    return StageBrief(name=stage, objective=obj, may_change=may, must_keep=must, principles=pr)


def task() -> TaskSpec:
    return TaskSpec(path=str(DATA / "scale_tanh.py"), name="scale_tanh", source=TASK_SOURCE)


def desc() -> TaskDescription:
    return TaskDescription(
        name="scale_tanh",
        source=TASK_SOURCE,
        init_args=[4096, 1.5],
        inputs=[TensorInfo(shape=[64, 4096], dtype="float32")],
        outputs=[TensorInfo(shape=[64, 4096], dtype="float32")],
        constants={"BATCH": 64, "FEATURES": 4096},
        sizes_used={"BATCH": 64, "FEATURES": 4096},
        op_graph=[
            OpNode(name="x", kind="placeholder", op="placeholder", target="x"),
            OpNode(name="mul", kind="call_function", op="mul", target="operator.mul"),
            OpNode(name="add", kind="call_function", op="add", target="operator.add"),
            OpNode(name="tanh", kind="call_function", op="tanh", target="torch.tanh"),
            OpNode(name="output", kind="output", op="output", target="output"),
        ],
        flops=3 * 64 * 4096,
        bytes_moved=2 * 4 * 64 * 4096,
    )


def candidate(
    i: int, source: str = KERNEL_SOURCE, origin: str = "seed:llm-0", params: dict | None = None
) -> Candidate:
    return Candidate(id=f"c{i}", source=source, stage="algorithm", origin=origin, params=params or {})


def best(source: str = KERNEL_SOURCE, params: dict | None = None, ms: float = 0.0123) -> BestKernel:
    return BestKernel(
        candidate=candidate(
            0, source, params=params if params is not None else {"BLOCK_SIZE": 1024, "NUM_WARPS": 4}
        ),
        check=CheckReport(accepted=True, max_abs_err=2e-7, trials=3),
        timing=TimingReport(measured=True, candidate_ms=ms, eager_ms=0.03, compile_ms=0.02, noise=0.01),
    )


def summary(i: int, note_len: int = 120) -> AttemptSummary:
    return AttemptSummary(
        candidate_id=f"c{i}",
        origin=f"refine:llm-{i}",
        params={"BLOCK_SIZE": 2 ** (8 + i % 4)},
        outcome="rejected:mismatch" if i % 3 == 0 else f"verified:{0.01 + i / 1000:.4f}ms",
        candidate_ms=None if i % 3 == 0 else 0.01 + i / 1000,
        speedup_vs_eager=None if i % 3 == 0 else 2.0 + i / 10,
        note=("mismatch: trial 2 max_abs_err 3.1e-2 > tol 1e-4 " * 20)[:note_len] if i % 3 == 0 else None,
    )


def decision(stage: str) -> StageDecision:
    return StageDecision(
        stage=stage,
        outcome="improved",
        changed=f"{stage}: fused kernel with BLOCK_SIZE 1024",
        why="median 0.0123 ms vs 0.0150 ms, noise 1%",
        speedup_entry=1.5,
        speedup_exit=2.4,
        attempts=4,
        verified_attempts=3,
    )


def code_request(
    stage: str = "algorithm",
    mode: str = "seed",
    *,
    iteration: int = 0,
    recent: list[AttemptSummary] | None = None,
    decisions: list[StageDecision] | None = None,
    with_best: bool | None = None,
    best_params: dict | None = None,
) -> CodeRequest:
    failed = None
    if mode == "fix":
        failed = Attempt(
            candidate=candidate(7, KERNEL_SOURCE.replace("mask=mask, other=0.0", "other=0.0")),
            compile=CompileReport(ok=True),
            check=CheckReport(accepted=False, reasons=["mismatch: trial 1 max_abs_err 4.2e-1 > tol 1e-4"]),
        )
    b = None
    if with_best or (with_best is None and mode != "seed"):
        b = best(params=best_params)
    return CodeRequest(
        mode=mode,  # type: ignore[arg-type]
        stage=brief(stage),
        task=task(),
        desc=desc(),
        seed_index=0,
        n_seeds=4,
        best=b,
        failed=failed,
        recent=recent or [],
        decisions=decisions or [],
        iteration=iteration,
    )


def profiler_request(stage: str = "memory") -> ProfilerRequest:
    a = Attempt(
        candidate=candidate(3),
        compile=CompileReport(ok=True),
        check=CheckReport(accepted=True, max_abs_err=1e-7),
        timing=TimingReport(measured=True, candidate_ms=0.0123, eager_ms=0.03),
    )
    prof = ProfileReport(
        bytes_moved=2 * 4 * 64 * 4096,
        achieved_gbps=1700.0,
        roofline_fraction=0.4,
        bottleneck="memory",
        evidence=["achieved 1700 GB/s of ~4300 GB/s"],
    )
    return ProfilerRequest(
        stage=brief(stage), desc=desc(), attempt=a, profile=prof, best=best(), recent=[summary(1)]
    )


def debugger_request(stage: str = "algorithm") -> DebuggerRequest:
    a = Attempt(
        candidate=candidate(5, KERNEL_SOURCE.replace("tl.arange(0, BLOCK_SIZE)", "tl.arange(0, 1000)")),
        compile=CompileReport(
            ok=False, error="arange's range must be a power of 2", error_kind="triton", error_line=16
        ),
    )
    return DebuggerRequest(stage=brief(stage), desc=desc(), attempt=a, recent=[summary(2)])
