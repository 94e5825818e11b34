"""Frozen value records that flow through the graph and over the sandbox wire.

Every record is a frozen pydantic model holding JSON-able data, so it can live in LangGraph
state, be checkpointed to SQLite, be written into a report, and cross a process boundary
unchanged. This module imports neither torch nor LangGraph.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

Device = Literal["cpu", "cuda"]
Role = Literal["code", "profiler", "debugger"]
Policy = Literal["strict", "mixed"]
# What the code role is asked for: a new algorithm (seed), a refinement of the best one, a tuning
# step, or the repair of a failed attempt.
CodeMode = Literal["seed", "refine", "tune", "fix"]
# The mode of a stage's attempt loop (a repair is a step inside it, not a mode of the loop).
LoopMode = Literal["seed", "refine", "tune"]
# Where a run stands; "interrupted" is never stored: `egg threads` derives it from a dead owner.
RunStatus = Literal["running", "verified", "no_kernel", "bad_input"]
# The sizes a run asks for (tools/sizes.py): the file's own, or its int size constants >= 8
# changed to smaller non-power-of-two values (the first set of the ragged rule the task runs with).
Shapes = Literal["as-written", "ragged"]


class Record(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


# ---------------------------------------------------------------------------------------------
# The task
# ---------------------------------------------------------------------------------------------


class TaskSpec(Record):
    """What the user asked for: a KernelBench-format file and how to run it."""

    path: str
    name: str
    source: str
    device: Device = "cpu"
    # Module-level size constants to override (e.g. {"N": 256}); applied in the worker before
    # get_inputs()/get_init_inputs() run. Empty means "as written in the file".
    size_overrides: dict[str, int] = Field(default_factory=dict)
    # "ragged": the describe job changes the sizes (after the user's overrides, and after the CPU
    # shrinking) by the ragged rule, and prepare makes its choice the run's size_overrides.
    shapes: Shapes = "as-written"


class TensorInfo(Record):
    shape: list[int]
    dtype: str  # torch dtype name without the "torch." prefix, e.g. "float32"
    stride: list[int] | None = None


class ScalarInfo(Record):
    value: float | int | bool | None
    type: str  # "int" | "float" | "bool" | "none"


class ParamInfo(Record):
    name: str  # dotted state_dict name, e.g. "fc.weight"
    shape: list[int]
    dtype: str
    is_buffer: bool = False


class OpNode(Record):
    """One node of the reference's captured computation at the torch level (torch.fx, or an ATen
    trace mapped back to torch-level ops: tools/worker/atencapture.py)."""

    name: str
    kind: Literal["placeholder", "get_attr", "call_function", "call_method", "call_module", "output"]
    # Canonical op name, e.g. "relu", "softmax", "linear", "matmul", "add", "sum", "conv2d".
    op: str
    # Raw target as text (e.g. "torch.nn.functional.gelu", "fc" for a module, "sum" for a method).
    target: str
    # Arguments: node references are {"node": name}; constants are JSON values; lists nest.
    args: list[Any] = Field(default_factory=list)
    kwargs: dict[str, Any] = Field(default_factory=dict)
    # For call_module: the module's class name and its constructor-relevant attributes.
    module_type: str | None = None
    module_attrs: dict[str, Any] = Field(default_factory=dict)
    shape: list[int] | None = None
    dtype: str | None = None


class TaskDescription(Record):
    """What the worker learned by loading and running the reference (sizes as used)."""

    name: str
    source: str
    init_args: list[Any] = Field(default_factory=list)
    inputs: list[TensorInfo | ScalarInfo]
    outputs: list[TensorInfo]
    params: list[ParamInfo] = Field(default_factory=list)
    # Module-level int/float constants of the file as written, and as used in this run.
    constants: dict[str, Any] = Field(default_factory=dict)
    sizes_used: dict[str, Any] = Field(default_factory=dict)
    # The shapes sizes_used follow: "ragged" when a ragged set ran, else "as-written" (also when
    # ragged was asked for and no set ran: shapes_note then says so).
    shapes: Shapes = "as-written"
    shapes_note: str | None = None
    op_graph: list[OpNode] = Field(default_factory=list)
    capture_error: str | None = None  # why op_graph is empty, when it is
    # Model's int attributes as used in this run (`self.n_head`): host views that baked one of
    # these numbers read it from self instead, so other sizes keep working.
    module_ints: dict[str, int] = Field(default_factory=dict)
    flops: float | None = None
    bytes_moved: float | None = None
    degenerate: list[str] = Field(default_factory=list)  # e.g. "output is constant"
    device: Device = "cpu"
    # The checker's estimated peak GPU memory for this task (from shapes): GPU jobs on the task
    # reuse it for memory admission instead of estimating again per candidate.
    check_peak_bytes: float | None = None
    # On a GPU: that estimate as shares of the GPU's memory (tools/worker/gpumem.py).
    check_memory_units: int | None = None
    # Shares for a screened job before its check: compile and timing only (gpumem.estimate_timing_bytes).
    screen_memory_units: int | None = None

    def size_overrides(self) -> dict[str, int]:
        """The int sizes this description ran with that differ from the file's: the overrides
        every later job of the run uses."""
        return {
            k: v
            for k, v in self.sizes_used.items()
            if isinstance(v, int) and not isinstance(v, bool) and self.constants.get(k) != v
        }

    @property
    def capture_path(self) -> str | None:
        """Which tracer captured op_graph: "fx", "fx-concrete" (fx with concrete shapes) or "aten"
        (make_fx at the ATen level, when neither fx trace works); the output node records it.
        None without a graph (or for a description older than the record)."""
        for n in reversed(self.op_graph):
            if n.kind == "output":
                return n.module_attrs.get("capture")
        return None


# ---------------------------------------------------------------------------------------------
# Candidates and their reports
# ---------------------------------------------------------------------------------------------


class Candidate(Record):
    id: str
    source: str  # the whole candidate file (defines ModelNew)
    stage: str
    origin: str  # the model's own label for the change (e.g. "tune:BLOCK_K=64"); never parsed
    # What the code role was asked for when it wrote this candidate. The code node always sets
    # it; the default only serves records built by hand (tests, checkpoints older than the field).
    mode: CodeMode = "seed"
    # The parallel branch that wrote it (algorithm seed or variant of a tuning round), None for
    # a step of the sequential loop.
    branch: int | None = None
    family: str | None = None
    algorithm: str | None = None
    params: dict[str, Any] = Field(default_factory=dict)  # tunables baked into the source
    parent_id: str | None = None
    prompt: dict[str, str] | None = None  # {"id", "version", "sha256"} when an LLM wrote it


class KernelCompileInfo(Record):
    name: str
    num_warps: int | None = None
    num_stages: int | None = None
    registers: int | None = None
    spills: int | None = None
    shared_bytes: int | None = None
    # What its dots compiled to on sm_90: "wgmma" (Hopper tensor cores), "mma.sync", or None.
    mma: str | None = None
    constants: dict[str, Any] = Field(default_factory=dict)


class CompileReport(Record):
    ok: bool
    target: str = "cuda:90"
    error: str | None = None
    error_kind: str | None = None  # "syntax" | "import" | "triton" | "no_kernel" | "timeout" | "crash"
    error_line: int | None = None  # 1-based line in the candidate file
    kernels: list[KernelCompileInfo] = Field(default_factory=list)
    seconds: float | None = None


class CheckReport(Record):
    accepted: bool
    # Each reason is "<rule>: <message>", e.g. "mismatch: trial 2 max_abs_err 3.1e-2 > tol 1e-4".
    reasons: list[str] = Field(default_factory=list)
    max_abs_err: float | None = None
    max_rel_err: float | None = None
    trials: int = 0
    policy: Policy = "mixed"
    delegated_ops: list[str] = Field(default_factory=list)
    tolerance: dict[str, float] = Field(default_factory=dict)
    tolerance_widened: bool = False
    shapes_checked: list[dict[str, Any]] = Field(default_factory=list)
    degenerate: list[str] = Field(default_factory=list)
    device: Device = "cpu"
    seconds: float | None = None
    # How the candidate's process was confined: mechanisms applied and missing (tools/worker/confine.py)
    isolation: dict[str, list[str]] = Field(default_factory=dict)

    @property
    def first_rule(self) -> str | None:
        return self.reasons[0].split(":", 1)[0] if self.reasons else None


class Environment(Record):
    gpu: str | None = None
    driver: str | None = None
    sm_clock_mhz: int | None = None
    mem_clock_mhz: int | None = None
    torch: str | None = None
    triton: str | None = None
    cuda: str | None = None
    python: str | None = None


# A final benchmark further than this from the choosing stage's timing of the same kernel did not
# reproduce in another process: finalize takes it once more (nodes/lifecycle.py) and the eval's
# metrics flag a row still past it (evals/metrics.py). On the H200 (eighth sitting) 8 of 9 tasks
# reproduced within 1.3%, and a library ConvTranspose3d's forward went from 4.83 ms in its stage
# to 6.36 ms in the final benchmark (cuDNN chose differently in another process); on the H100
# suite of 2026-12-06, 8 of 99 finals ran 15-179% over their stage figures while their CUDA-graph
# replays matched them (host jitter in that one benchmark).
IRREPRODUCIBLE = 0.10


class TimingReport(Record):
    measured: bool
    reason: str | None = None  # why not measured, or why rejected
    candidate_ms: float | None = None
    candidate_p20_ms: float | None = None
    candidate_p80_ms: float | None = None
    eager_ms: float | None = None
    eager_p20_ms: float | None = None
    eager_p80_ms: float | None = None
    compile_ms: float | None = None
    compile_p20_ms: float | None = None
    compile_p80_ms: float | None = None
    # torch.compile's own output against the checker's bar on the timed inputs
    # (tools/worker/timing.py compile_accuracy): {"within_bar": bool, ...}, or why it was not held to it
    compile_check: dict[str, Any] | None = None
    # where eager/compile figures came from: "measured" in this job, or "cached <when>" (same
    # task, sizes, GPU and versions, measured earlier on this machine)
    baseline: str | None = None
    # the judge's own clock over many back-to-back calls: the check on the candidate's claimed median
    wall_ms: float | None = None
    # how candidate_ms was taken: None (CUDA events in the candidate's process, confirmed by the
    # judge's clock), "events, second try", or "judge_wall" (the judge's wall-clock figure, when
    # the candidate's median stayed unconfirmed twice by a small margin; then claimed_ms is it)
    timed_by: str | None = None
    claimed_ms: float | None = None
    # the final benchmark's first median, when it was further than IRREPRODUCIBLE from the stage's
    # timing of the same kernel and was taken again (nodes/lifecycle.py; the second stands)
    first_benchmark_ms: float | None = None
    cudagraph_ms: float | None = None
    # Host CPUs busy (0-1) during the timed section, and the timing processes' priority there
    # (tools/worker/timing.py timing_priority): a host-bound forward's median depends on both.
    host_cpu_busy: float | None = None
    host_priority: str | None = None
    noise: float | None = None  # relative spread (p80 - p20) / median of the candidate
    candidate_launches: int | None = None
    env: Environment | None = None
    seconds: float | None = None

    @property
    def speedup_vs_eager(self) -> float | None:
        if self.measured and self.candidate_ms and self.eager_ms:
            return self.eager_ms / self.candidate_ms
        return None

    @property
    def speedup_vs_compile(self) -> float | None:
        if self.measured and self.candidate_ms and self.compile_ms:
            return self.compile_ms / self.candidate_ms
        return None

    @property
    def speedup_vs_best(self) -> float | None:
        """Against the faster of eager and torch.compile, both timed in this run: what a user
        would run instead. Never above either ratio, so a baseline that one run measured slow
        (a host-bound call on a busy host) cannot inflate it."""
        if self.measured and self.candidate_ms and self.eager_ms and self.compile_ms:
            return min(self.eager_ms, self.compile_ms) / self.candidate_ms
        return None


Bottleneck = Literal["memory", "compute", "latency", "unknown"]


class ProfileReport(Record):
    flops: float | None = None
    bytes_moved: float | None = None
    achieved_gbps: float | None = None
    achieved_tflops: float | None = None
    roofline_fraction: float | None = None
    bottleneck: Bottleneck = "unknown"
    evidence: list[str] = Field(default_factory=list)
    suggestion: str | None = None
    ncu_skipped: str | None = None  # Nsight Compute is not run: why (no GPU, no permission)


class Diagnosis(Record):
    """The debugger's output: what went wrong and how to fix it."""

    rule: str  # the failing rule / error kind
    diagnosis: str
    fix_plan: str
    source: Literal["expert", "llm", "deterministic"] = "expert"
    prompt: dict[str, str] | None = None  # {"id", "version", "sha256", ...} when an LLM wrote it


class ProfilerAdvice(Record):
    bottleneck: Bottleneck
    evidence: list[str]
    plan: str
    source: Literal["expert", "llm", "deterministic"] = "expert"
    prompt: dict[str, str] | None = None  # {"id", "version", "sha256", ...} when an LLM wrote it


class Attempt(Record):
    """One candidate's journey through the tool nodes of one stage."""

    candidate: Candidate
    compile: CompileReport | None = None
    check: CheckReport | None = None
    timing: TimingReport | None = None
    profile: ProfileReport | None = None
    advice: ProfilerAdvice | None = None
    diagnosis: Diagnosis | None = None
    # Why it was not checked: timed first against the incumbent (a tuning or refinement step on a
    # GPU) and not faster beyond noise, so never a contender (tools/worker/evaluate.py). Not a
    # failure: nothing for the debugger, and never a result.
    screened: str | None = None
    # wall seconds of its tool jobs (compile, check, time or evaluate): what the next one may cost
    seconds: float = 0.0

    @property
    def verified(self) -> bool:
        return bool(self.compile and self.compile.ok and self.check and self.check.accepted)

    @property
    def outcome(self) -> str:
        if self.compile is None:
            return "pending"
        if not self.compile.ok:
            return f"compile_error:{self.compile.error_kind}"
        if self.check is None:
            if self.screened and self.timing is not None and self.timing.candidate_ms is not None:
                return f"screened:{self.timing.candidate_ms:.4f}ms"
            return "compiled"
        if not self.check.accepted:
            return f"rejected:{self.check.first_rule}"
        if self.timing is None or not self.timing.measured:
            return "verified"
        return f"verified:{self.timing.candidate_ms:.4f}ms"


class BestKernel(Record):
    """The best verified kernel so far: the only kernel that crosses a stage boundary."""

    candidate: Candidate
    check: CheckReport
    timing: TimingReport | None = None
    profile: ProfileReport | None = None
    compile: CompileReport | None = None


class StageDecision(Record):
    stage: str
    outcome: Literal["improved", "kept", "failed", "skipped"]
    changed: str  # what the stage changed in the kernel ("nothing" when kept)
    why: str  # the evidence behind the decision
    best_candidate_id: str | None = None
    speedup_entry: float | None = None  # vs eager, of the kernel entering the stage
    speedup_exit: float | None = None
    attempts: int = 0
    verified_attempts: int = 0
    # timed before their check and not faster than the incumbent, so never checked
    screened_attempts: int = 0
    params: dict[str, Any] = Field(default_factory=dict)


class RoleUsage(Record):
    calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    seconds: float = 0.0


class Usage(Record):
    """Usage keyed by "<stage>/<role>"; tool time keyed by "<stage>/tools"."""

    by_key: dict[str, RoleUsage] = Field(default_factory=dict)

    def total(self) -> RoleUsage:
        t = RoleUsage()
        for u in self.by_key.values():
            t = RoleUsage(
                calls=t.calls + u.calls,
                input_tokens=t.input_tokens + u.input_tokens,
                output_tokens=t.output_tokens + u.output_tokens,
                seconds=t.seconds + u.seconds,
            )
        return t
