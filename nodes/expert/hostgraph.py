"""The host side of a candidate: launches one by one, or one CUDA graph replay per call.

A forward of many groups (a partitioned network: a library conv, a batch norm's two kernels and
its apply kernel per layer) can spend more time launching than computing: on the H200 a
ResNet-18 candidate took 6.48 ms a call while its CUDA-graph replay, which the final benchmark
also measures, took 0.56 ms (eager PyTorch 1.75 ms). The mapping stage then offers the same
kernels with `host=graph`: ModelNew.forward replays the forward as one CUDA graph per input
signature (kernels/graphreplay.py), and the timing decides whether that is faster. Where the
forward's body is a plain sequence of statements, only its prefix is replayed and the launches
that make the outputs run after the replay each call, so the outputs are fresh memory instead
of copies out of the graph's (with_graph_replay). The verification is unchanged: every trial,
both shapes and the timing go through the replaying forward, and the judge counts the kernels a
replay launches (tools/worker/common.py).
"""

from __future__ import annotations

import ast

from graph.records import TaskDescription, TimingReport

from .graphview import Unsupported, forward_arg_names
from .kernelfiles import kernel_source

HOST_PARAM = "host"
GRAPH_REPLAY = "graph"
# Kernel groups from which the launches of one forward likely cost the host more than a replay's
# own overhead (the replay and a copy of the outputs: about 10 us; the inputs are read in place).
MIN_GROUPS = 4
# A call this many times longer than its CUDA-graph replay is host-bound (the profiler says so).
HOST_BOUND_RATIO = 1.25
# Host time of one launch from a generated forward (Python launcher, Triton's launch path), on
# the low side: the H200's ResNet-18 candidate spent (6.48 - 0.56) ms on about 70 launches, some
# 85 us each.
LAUNCH_MS = 0.05
# GPU rates for the seed-time estimate of a forward's GPU work (H200: fp32 FMA and HBM): flops at
# the fp32 FMA rate, bytes at the HBM rate, whichever takes longer.
FP32_FLOPS_PER_MS = 67e9
HBM_BYTES_PER_MS = 4.3e9
# Ops whose eager result differs from call to call: a replay would still draw new numbers from
# PyTorch's generator, but a kernel seeded from the host would repeat its draws.
RANDOM_OPS = frozenset(
    {"rand", "randn", "randint", "rand_like", "randn_like", "bernoulli", "normal", "multinomial"}
    | {"dropout", "dropout1d", "dropout2d", "dropout3d", "alpha_dropout", "feature_alpha_dropout"}
)
HELPERS = kernel_source("graphreplay.py")


def host_bound(timing: TimingReport | None) -> float | None:
    """How many times longer a call takes than its GPU work (the runner's CUDA-graph replay of the
    same forward, timed for forwards of many launches), or None when that was not measured."""
    if timing is None or not timing.measured or not timing.candidate_ms or not timing.cudagraph_ms:
        return None
    return timing.candidate_ms / timing.cudagraph_ms


def _launches_negligible(timing: TimingReport | None) -> bool:
    """A timed call too long for its few launches to matter (no replay was measured: fewer
    launches than the runner's probe needs): at LAUNCH_MS each, under a tenth of the call."""
    if timing is None or not timing.measured or not timing.candidate_ms or not timing.candidate_launches:
        return False
    return timing.candidate_launches * LAUNCH_MS < 0.1 * timing.candidate_ms


def graph_replay_offered(
    desc: TaskDescription, kernel_groups: int, timing: TimingReport | None = None
) -> str | None:
    """Why replaying this forward as a CUDA graph is worth a variant, or None when it is not:
    a forward of many groups whose replay was not timed, or any forward whose replay took well
    under its call (`timing`: the kernel's stage timing). A measured replay counts whatever the
    groups: one recurrent group launches a kernel per time step (KernelBench's level-3 LSTMs on
    an H100: 1.5x-2.9x their replay, with two groups each)."""
    if not replay_possible(desc):
        return None
    ratio = host_bound(timing)
    if ratio is not None and ratio < HOST_BOUND_RATIO:
        return None
    if ratio is None and (kernel_groups < MIN_GROUPS or _launches_negligible(timing)):
        return None
    launches = timing.candidate_launches if timing is not None else 0
    if ratio is not None and kernel_groups < MIN_GROUPS and launches:
        why = f"{launches} kernel launches from Python each call"
    else:
        why = f"{kernel_groups} kernel groups launched one by one from Python each call"
    if ratio is not None:
        assert timing is not None
        why += (
            f"; a call takes {timing.candidate_ms:.4f} ms, its CUDA-graph replay {timing.cudagraph_ms:.4f} ms"
        )
    return why + ": replaying them as one CUDA graph removes the host's launch cost"


def replay_possible(desc: TaskDescription | None) -> bool:
    """Whether a replay of this task's forward can be offered at all, whatever the kernel: the
    conditions of graph_replay_offered that depend on the task only (a GPU, no random op in its
    graph, a forward whose arguments are plain names). The algorithm stage also counts a
    host-bound seed at its replay's time only then (nodes/boundary.py replay_reachable)."""
    if desc is None or desc.device != "cuda" or not desc.op_graph:
        return False
    if any(n.op in RANDOM_OPS for n in desc.op_graph):
        return False
    try:
        forward_arg_names(desc.source)
    except Unsupported:
        return False
    return True


def host_bound_at_seed(desc: TaskDescription, kernel_groups: int) -> str | None:
    """Why the forward is likely host-bound before anything was timed, or None: launching its
    kernel groups one by one (LAUNCH_MS each) costs the host more than its GPU work is estimated
    to take (the task's flops at the fp32 FMA rate, its bytes at the HBM rate). ResNet-18 at
    batch 2 has about 7 GFLOP for some 50 groups (0.11 ms of GPU work, 2.5 ms of launches); VGG-16
    at batch 10 has 310 GFLOP for about 20 (4.6 ms against 1 ms): only the first is host-bound."""
    if not desc.flops and not desc.bytes_moved:
        return None
    gpu_ms = max((desc.flops or 0.0) / FP32_FLOPS_PER_MS, (desc.bytes_moved or 0.0) / HBM_BYTES_PER_MS)
    host_ms = kernel_groups * LAUNCH_MS
    if host_ms < gpu_ms:
        return None
    return (
        f"launching {kernel_groups} kernel groups one by one costs the host about {host_ms:.2f} ms a "
        f"call, more than the {gpu_ms:.3f} ms its GPU work is estimated to take"
    )


def with_graph_replay(source: str, desc: TaskDescription) -> str:
    """`source` (a rendered candidate) with ModelNew.forward renamed forward_eager and a forward
    that replays it as a CUDA graph (kernels/graphreplay.py pasted before the class). Where the
    body splits (_tail_start) and the tail reads what the prefix made, forward replays only the
    prefix (forward_prefix, returning those names) and launches the tail itself: the tail's
    outputs are fresh tensors of each call, where a replay of the whole forward must copy its
    outputs out of the graph's memory (for the squeeze-excite candidate, about half its
    replay at the H200's bandwidth). forward_eager stays the whole forward."""
    names = forward_arg_names(desc.source)
    tree = ast.parse(source)
    cls = next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "ModelNew"), None)
    if cls is None:
        raise Unsupported("no class ModelNew to replay")
    fwd = next((n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "forward"), None)
    if fwd is None or fwd.decorator_list:
        raise Unsupported("ModelNew.forward cannot be wrapped for a graph replay")
    lines = source.splitlines()
    head = lines[fwd.lineno - 1]
    if "def forward(" not in head:
        raise Unsupported("ModelNew.forward's definition is not on one line")
    indent = head[: len(head) - len(head.lstrip())]
    first = lines[fwd.body[0].lineno - 1]
    # the body's own indentation (the file's style), four spaces more for a one-line forward
    inner = first[: len(first) - len(first.lstrip())] if fwd.body[0].lineno > fwd.lineno else indent + "    "
    signature = ast.unparse(fwd.args)
    call = ", ".join(names) + ("," if len(names) == 1 else "")
    functions = {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
    start = _tail_start(fwd.body, functions)
    live = _live_names(fwd.body[:start], fwd.body[start:]) if start is not None else []
    if not live:
        wrapper = [
            f"{indent}def forward({signature}):",
            f"{inner}# one CUDA graph replay per call once the kernels have run eagerly (graph_call)",
            f"{inner}return graph_call(self, self.forward_eager, ({call}))",
            "",
        ]
    else:
        prefix, tail = fwd.body[:start], fwd.body[start:]
        ret = tail[-1]
        assert isinstance(ret, ast.Return) and ret.value is not None
        outs = ", ".join(live) + ("," if len(live) == 1 else "")
        wrapper = [
            f"{indent}def forward({signature}):",
            f"{inner}# the prefix replayed as one CUDA graph (graph_call), the tail launched: fresh outputs",
            f"{inner}({outs}) = graph_call(self, self.forward_prefix, ({call}), copy_outputs=False)",
            *(f"{inner}{ast.unparse(s)}" for s in tail[:-1]),
            f"{inner}return graph_fresh({ast.unparse(ret.value)}, ({outs}))",
            "",
            f"{indent}def forward_prefix({signature}):",
            *(f"{inner}{ast.unparse(s)}" for s in prefix),
            f"{inner}return ({outs})",
            "",
        ]
    lines[fwd.lineno - 1] = head.replace("def forward(", "def forward_eager(", 1)
    lines[fwd.lineno - 1 : fwd.lineno - 1] = wrapper
    lines[cls.lineno - 1 : cls.lineno - 1] = [*HELPERS.rstrip("\n").splitlines(), "", ""]
    return "\n".join(lines) + "\n"


def _assigned(stmt: ast.stmt) -> list[str]:
    """The names a simple statement of a forward binds (none for an expression or a return)."""
    if not isinstance(stmt, ast.Assign):
        return []
    return [n.id for t in stmt.targets for n in ast.walk(t) if isinstance(n, ast.Name)]


def _simple(stmt: ast.stmt) -> bool:
    """An assignment to names (or tuples of names), an expression, or a return, binding no name
    inside (`:=`): a statement that runs once, in order, binding what _assigned says, so the body
    can be cut between any two of them."""
    if any(isinstance(n, ast.NamedExpr) for n in ast.walk(stmt)):
        return False
    if isinstance(stmt, ast.Assign):
        return all(
            isinstance(t, ast.Name)
            or (isinstance(t, ast.Tuple) and all(isinstance(e, ast.Name) for e in t.elts))
            for t in stmt.targets
        )
    return isinstance(stmt, (ast.Expr, ast.Return))


def _launch(stmt: ast.stmt, functions: set[str]) -> bool:
    """Whether the statement's value is a call of a function the file defines (a launch helper):
    its result is memory of its own, not a view of a tensor made before it."""
    value = getattr(stmt, "value", None)
    return isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.func.id in functions


def _tail_start(body: list[ast.stmt], functions: set[str]) -> int | None:
    """Where the tail of a forward's body starts, or None when the body does not split: the
    earliest statement that last binds a returned name, moved back while it is no launch of the
    file's own functions (`v[:, :, None]`, `v.view(-1)`, a PyTorch op: its result may be a view
    of a prefix tensor). Splits only a body of simple statements ending in `return name` or a
    tuple of names, all bound in the body, with at least one statement before the tail."""
    if not body or not all(_simple(s) for s in body):
        return None
    ret = body[-1]
    if not isinstance(ret, ast.Return) or any(isinstance(s, ast.Return) for s in body[:-1]):
        return None
    value = ret.value
    if isinstance(value, ast.Name):
        returned = [value.id]
    elif isinstance(value, ast.Tuple) and value.elts and all(isinstance(e, ast.Name) for e in value.elts):
        returned = [e.id for e in value.elts if isinstance(e, ast.Name)]
    else:
        return None
    last: dict[str, int] = {}
    for i, s in enumerate(body[:-1]):
        for name in _assigned(s):
            last[name] = i
    if any(name not in last for name in returned):
        return None
    start = min(last[name] for name in returned)
    while start > 0 and not _launch(body[start], functions):
        start -= 1
    return start or None


def _live_names(prefix: list[ast.stmt], tail: list[ast.stmt]) -> list[str]:
    """The names the prefix binds that the tail reads before binding them itself, in the order
    the tail first reads them: what forward_prefix returns."""
    bound = {name for s in prefix for name in _assigned(s)}
    live: list[str] = []
    own: set[str] = set()
    for s in tail:
        reads = [n for n in ast.walk(s) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)]
        for n in sorted(reads, key=lambda n: (n.lineno, n.col_offset)):
            if n.id in bound and n.id not in own and n.id not in live:
                live.append(n.id)
        own.update(_assigned(s))
    return live
