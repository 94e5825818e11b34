"""Static (AST) integrity rules for a candidate file. Pure: imports neither torch nor triton,
so the agent side could run it too. Each finding is "<rule>: <message> (line N)"."""

from __future__ import annotations

import ast
import builtins
import symtable

from tools.pysource import dotted_name

ALLOWED_IMPORTS = {
    "torch",
    "triton",
    "math",
    "typing",
    "__future__",
    "functools",
    "itertools",
    "operator",
    "dataclasses",
    "enum",
    "collections",
}
# Host-side compute escapes both Triton and the PyTorch-op policy: not allowed in a candidate.
_HOST_MODULES = {"numpy", "scipy", "numba", "cupy", "jax", "tensorflow"}
_HOST_ATTRS = {"numpy", "tolist", "__array__", "__array_interface__", "__cuda_array_interface__"}
_THREAD_MODULES = {
    "threading",
    "_thread",
    "multiprocessing",
    "concurrent",
    "subprocess",
    "asyncio",
    "signal",
    "queue",
}
_TIMER_MODULES = {"time", "timeit"}
_ACCESS_MODULES = {
    "sys",
    "inspect",
    "gc",
    "importlib",
    "builtins",
    "os",
    "pathlib",
    "io",
    "pickle",
    "ctypes",
    "__main__",
    "runpy",
    "shutil",
    "tempfile",
    "glob",
    "linecache",
    "traceback",
}
_PATCHABLE_ROOTS = {"torch", "triton", "tl", "F", "nn", "time", "math", "np", "numpy", "builtins"}
_STREAM_ATTRS = {"Stream", "stream", "set_stream", "ExternalStream", "StreamContext", "default_stream"}
_TIMER_ATTRS = {
    "Event",
    "perf_counter",
    "perf_counter_ns",
    "do_bench",
    "do_bench_cudagraph",
    "elapsed_time",
    "monotonic",
    "process_time",
}
_ACCESS_NAMES = {
    "globals",
    "locals",
    "vars",
    "__import__",
    "exec",
    "eval",
    "compile",
    "open",
    "getattr_static",
    "setattr",
    "delattr",
    "__builtins__",
    "breakpoint",
    "exit",
    "quit",
}
# Reached through torch or triton, these give what the import rules forbid: files, processes,
# the network, native code, other modules (`torch.serialization.os`, `torch.hub`, `torch.load`).
_LIBRARY_BACKDOORS = {
    "os",
    "sys",
    "subprocess",
    "builtins",
    "importlib",
    "serialization",
    "hub",
    "distributed",
    "multiprocessing",
    "cpp_extension",
    "load_library",
    "library",
    "_C",
    "_dynamo",
    "package",
    "jit",
    "save",
    "load",
    "from_file",
    "_utils_internal",
    "_library",
    "_ops",
    "ops",
    "socket",
    "urllib",
    "request",
    "environ",
}
_CACHE_DECORATORS = {"lru_cache", "cache", "cached_property", "memoize"}
_REFERENCE_NAMES = {"Model", "get_inputs", "get_init_inputs"}
_MUTATORS = {"__setitem__", "setdefault", "update", "append", "add", "extend", "insert"}


def _root_name(node: ast.AST) -> str | None:
    while isinstance(node, (ast.Attribute, ast.Subscript, ast.Call)):
        node = node.value if not isinstance(node, ast.Call) else node.func
    return node.id if isinstance(node, ast.Name) else None


def _is_jit_decorator(d: ast.AST) -> bool:
    target = d.func if isinstance(d, ast.Call) else d
    name = dotted_name(target)
    return name.endswith("jit") or name.endswith("autotune") or name.endswith("heuristics")


_MODULE_DUNDERS = {"__name__", "__file__", "__doc__", "__spec__", "__loader__", "__package__", "__builtins__"}


def undefined_globals(source: str, tree: ast.Module) -> list[str]:
    """Names the file reads from its module scope that it never imports, defines or assigns (and
    that are no builtins), sorted. Such a file fails with NameError on a GPU, yet can pass on the
    CPU: Triton's interpreter puts `math` (and more) into a kernel's module globals when it runs
    a kernel. A star import makes the question unanswerable: nothing is reported then."""
    if any(isinstance(n, ast.ImportFrom) and any(a.name == "*" for a in n.names) for n in ast.walk(tree)):
        return []
    top = symtable.symtable(source, "<candidate>", "exec")
    bound = {
        s.get_name() for s in top.get_symbols() if s.is_assigned() or s.is_imported() or s.is_namespace()
    }
    known = bound | set(dir(builtins)) | _MODULE_DUNDERS
    read: set[str] = set()

    def walk(t: symtable.SymbolTable) -> None:
        for s in t.get_symbols():
            if not s.is_referenced():
                continue
            if t.get_type() == "module" or s.is_global():
                read.add(s.get_name())
            elif t.get_type() == "class" and not (
                s.is_assigned() or s.is_imported() or s.is_parameter() or s.is_free() or s.is_namespace()
            ):
                read.add(s.get_name())  # a class body reads unbound names from the module
        for c in t.get_children():
            walk(c)

    walk(top)
    return sorted(read - known)


def static_findings(source: str) -> list[str]:
    """All static rule violations, in a stable order. A syntax error is the only finding then."""
    try:
        tree = ast.parse(source)
    except SyntaxError as e:
        return [f"static.syntax: {e.msg} (line {e.lineno})"]
    out: list[str] = []

    def add(rule: str, msg: str, node: ast.AST | None = None) -> None:
        where = f" (line {node.lineno})" if node is not None and hasattr(node, "lineno") else ""
        item = f"{rule}: {msg}{where}"
        if item not in out:
            out.append(item)

    kernels: set[str] = set()
    model_new: ast.ClassDef | None = None
    module_mutables: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and any(_is_jit_decorator(d) for d in node.decorator_list):
            kernels.add(node.name)
        if isinstance(node, ast.ClassDef) and node.name == "ModelNew":
            model_new = node
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            value = node.value
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            mutable = isinstance(value, (ast.Dict, ast.List, ast.Set)) or (
                isinstance(value, ast.Call)
                and dotted_name(value.func).split(".")[-1]
                in {
                    "dict",
                    "list",
                    "set",
                    "OrderedDict",
                    "defaultdict",
                    "WeakKeyDictionary",
                    "WeakValueDictionary",
                }
            )
            if mutable:
                for t in targets:
                    if isinstance(t, ast.Name):
                        module_mutables.add(t.id)
    # Kernels may also be wrapped: `k = triton.jit(fn)`.
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Assign)
            and isinstance(node.value, ast.Call)
            and _is_jit_decorator(node.value)
        ):
            for t in node.targets:
                if isinstance(t, ast.Name):
                    kernels.add(t.id)

    if model_new is None:
        add("static.no_model", "candidate defines no `class ModelNew`")
    if not kernels:
        add("static.no_kernel", "candidate defines no @triton.jit kernel")

    jit_bodies: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and node.name in kernels:
            for sub in ast.walk(node):
                jit_bodies.add(id(sub))

    launched = False
    for node in ast.walk(tree):
        if id(node) in jit_bodies:
            continue
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Subscript)
            and _root_name(node.func.value) in kernels
        ):
            launched = True
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
            for full in names:
                top = full.split(".")[0]
                if top in _THREAD_MODULES:
                    add("static.threads", f"imports `{full}` (threads/processes are not allowed)", node)
                elif top in _TIMER_MODULES:
                    add("static.timer", f"imports `{full}` (candidates must not touch timers)", node)
                elif top in _HOST_MODULES:
                    add("static.host_compute", f"imports `{full}` (compute must run in Triton kernels)", node)
                elif top in _ACCESS_MODULES:
                    add(
                        "static.reference_access",
                        f"imports `{full}` (introspection/file access is not allowed)",
                        node,
                    )
                elif top not in ALLOWED_IMPORTS:
                    add("static.forbidden_import", f"imports `{full}`", node)
                if full.startswith("triton.testing"):
                    add("static.timer", "imports triton.testing (benchmark helpers)", node)
            if isinstance(node, ast.ImportFrom):
                for a in node.names:
                    if a.name in _CACHE_DECORATORS:
                        add("static.cache", f"imports `{a.name}` (memoizing outputs is not allowed)", node)
                    if a.name in _TIMER_ATTRS or a.name in _STREAM_ATTRS:
                        add(
                            "static.timer" if a.name in _TIMER_ATTRS else "static.stream",
                            f"imports `{a.name}`",
                            node,
                        )
        if isinstance(node, ast.Try) or (hasattr(ast, "TryStar") and isinstance(node, ast.TryStar)):
            add(
                "static.try_except",
                "try/except in the candidate (a fallback could hide a failing kernel)",
                node,
            )
        if isinstance(node, ast.Attribute):
            dotted = dotted_name(node)
            root = dotted.split(".")[0]
            parts = dotted.split(".")
            if root == "torch" and any(p in _LIBRARY_BACKDOORS for p in parts[1:]):
                add(
                    "static.reference_access",
                    f"uses `{dotted}` (file, process, network or native access through torch)",
                    node,
                )
            if root == "triton" and any(p in _LIBRARY_BACKDOORS - {"jit"} for p in parts[1:]):
                add(
                    "static.reference_access",
                    f"uses `{dotted}` (file, process, network or native access through triton)",
                    node,
                )
            if node.attr in _STREAM_ATTRS and root in {"torch", "triton"}:
                add("static.stream", f"uses `{dotted}` (work on other streams is invisible to timing)", node)
            if node.attr in _TIMER_ATTRS and root in {"torch", "triton", "time"}:
                add("static.timer", f"uses `{dotted}`", node)
            if node.attr in {
                "modules",
                "_getframe",
                "f_back",
                "f_globals",
                "__globals__",
                "__subclasses__",
                "__dict__",
                "gi_frame",
                "__code__",
                "__closure__",
            }:
                add("static.reference_access", f"uses `.{node.attr}` (introspection is not allowed)", node)
            if node.attr in _HOST_ATTRS:
                add("static.host_compute", f"uses `.{node.attr}` (moving data to host Python/NumPy)", node)
            if node.attr in {"Thread", "Process", "Pool", "fork", "spawn", "ThreadPoolExecutor"}:
                add("static.threads", f"uses `{dotted}`", node)
        if isinstance(node, ast.Name):
            if node.id in _ACCESS_NAMES:
                add(
                    "static.reference_access",
                    f"uses `{node.id}` (dynamic code/attribute access is not allowed)",
                    node,
                )
            if node.id in _REFERENCE_NAMES and isinstance(node.ctx, ast.Load):
                add("static.reference_access", f"refers to the reference's `{node.id}`", node)
            if node.id in _CACHE_DECORATORS:
                add("static.cache", f"uses `{node.id}` (memoizing outputs is not allowed)", node)
        if isinstance(node, ast.Global) or isinstance(node, ast.Nonlocal):
            add(
                "static.cache",
                "`global`/`nonlocal` state in the candidate (results must not persist across calls)",
                node,
            )
        if isinstance(node, (ast.Assign, ast.AugAssign, ast.Delete)):
            targets = node.targets if isinstance(node, (ast.Assign, ast.Delete)) else [node.target]
            for t in targets:
                flat = t.elts if isinstance(t, ast.Tuple) else [t]
                for x in flat:
                    if isinstance(x, ast.Attribute) and _root_name(x) in _PATCHABLE_ROOTS:
                        add(
                            "static.monkey_patch",
                            f"assigns `{dotted_name(x)}` (patching torch/triton/time)",
                            node,
                        )
                    if isinstance(x, ast.Subscript) and _root_name(x) in module_mutables:
                        add("static.cache", f"writes into module-level container `{_root_name(x)}`", node)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            if node.func.attr in _MUTATORS and _root_name(node.func) in module_mutables:
                add("static.cache", f"mutates module-level container `{_root_name(node.func)}`", node)
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            if "sys.modules" in node.value or "egg_task_" in node.value:
                add("static.reference_access", "string refers to other modules", node)

    if kernels and not launched:
        add(
            "static.not_launched",
            "no @triton.jit kernel is launched (`kernel[grid](...)`) outside the kernels",
        )
    if model_new is not None:
        methods = {f.name for f in model_new.body if isinstance(f, ast.FunctionDef)}
        if "forward" not in methods:
            add("static.no_model", "ModelNew defines no forward()", model_new)
    missing = undefined_globals(source, tree)
    if missing:
        first = min(
            (n for n in ast.walk(tree) if isinstance(n, ast.Name) and n.id in missing),
            key=lambda n: (n.lineno, n.col_offset),
            default=None,
        )
        add(
            "static.undefined_name",
            f"reads {', '.join(f'`{m}`' for m in missing[:8])}, which the file never imports or defines "
            "(NameError on a GPU; Triton's CPU interpreter would hide it)",
            first,
        )
    return out
