"""Family registry: each family matches an op graph into a plan and generates candidate files.

A family module provides:
    match(view) -> plan | None            (raise Unsupported for a near-miss worth reporting)
    algorithms(plan) -> list[str]         distinct algorithms, best first (the seeds)
    generate(desc, view, plan, params) -> str
    defaults(plan, algorithm) -> dict     (optional) plan-dependent defaults over spaces.DEFAULTS
    valid(plan, params) -> str | None     (optional) why a parameter combination is invalid
    refinements(plan, params) -> list[tuple[str, dict]]  (optional) exact algorithm refinements
"""

from __future__ import annotations

from types import ModuleType

from . import (
    attention,
    batchnorm,
    cat,
    conv,
    convnorm,
    elementwise,
    gemm,
    groupnorm,
    libconv,
    pad,
    pooling,
    random,
    reduction,
    rnn,
    rowchain,
    rowloss,
    rownorm,
    scan,
    softmax,
    tri,
    xent,
)

# Tried in order; the first whose match() returns a plan wins.
FAMILIES: list[tuple[str, ModuleType]] = [
    ("elementwise", elementwise),
    ("softmax", softmax),
    ("gemm", gemm),
    ("reduction", reduction),
    ("rownorm", rownorm),
    # conv before libconv: a lone convolution becomes a Triton implicit-GEMM / direct kernel; conv
    # + elementwise tails fall through to libconv (which offers the same kernels as extra seeds).
    ("conv", conv),
    ("libconv", libconv),
    ("scan", scan),
    ("attention", attention),
    ("batchnorm", batchnorm),
    ("groupnorm", groupnorm),
    ("rowloss", rowloss),
    ("xent", xent),
    ("pooling", pooling),
    ("cat", cat),
    ("pad", pad),
    ("tri", tri),
    ("rnn", rnn),
    ("random", random),
]

# Families that fuse groups the planner above keeps apart (a library conv with the norm after it;
# a row chain of several row reductions / scans / norms, which no family above takes whole):
# the lowering plans the graph a second time with them and offers those seeds before the others
# (lowering.py), so the checker and timing choose between the fused and the separate groups.
FUSED_FAMILIES: list[tuple[str, ModuleType]] = [("convnorm", convnorm), ("rowchain", rowchain), *FAMILIES]
FUSED_NAMES = frozenset({"convnorm", "rowchain"})
FUSED_ALGORITHMS = frozenset(convnorm.ALGORITHMS) | frozenset(rowchain.ALGORITHMS)
