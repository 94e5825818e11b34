"""The built-in deterministic `expert` model: code, profiler and debugger roles.

It pattern-matches the captured op graph into a family plan and generates Triton candidate files
from per-family generators and tuning spaces kept as data (spaces.py). Families (families/):
elementwise, softmax, gemm (+epilogue), reduction (+losses), rownorm (layer/RMS/instance/L1/L2
norms), libconv (library conv + fused epilogue, mixed policy), scan, attention, batchnorm
(training mode), xent (cross-entropy), rowchain (several row reductions / scans / norms over the
last dim in one kernel, offered before the partition). Same request, same reply: replays rely on it.
"""

from .code import ExpertCode, plan_for
from .debugger import ExpertDebugger
from .profiler import ExpertProfiler

__all__ = ["ExpertCode", "ExpertDebugger", "ExpertProfiler", "plan_for"]
