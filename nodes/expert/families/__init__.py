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
    elementwise,
    gemm,
    groupnorm,
    libconv,
    pad,
    pooling,
    random,
    reduction,
    rnn,
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
