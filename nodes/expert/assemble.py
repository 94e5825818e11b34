"""Writing candidate files from pieces: name, deduplicate, prune and import what is used.

A family's generator returns a `Piece` (its kernels, its launchers and the lines of `forward`
that compute its value, ending in `return <expr>`). One piece is a whole-graph candidate; a
partitioned graph gives one piece per group plus host lines (views, shape arithmetic). `render`
joins them into one file:

- every top-level function of a piece is named per group (`g2_gemm_kernel`) when there are
  several groups; helpers (names starting with `_`) are shared when their text is the same;
- a function nothing reaches from `ModelNew` is left out (no unused helpers);
- the task's imports are kept only when a name they bind is used (an unused `import os` in the
  task never reaches the candidate); its module-level constants and the helper classes/functions
  `Model.__init__` needs come along, the helper classes without their `forward` (never called);
- `ModelNew` repeats Model's `__init__` (and the methods it calls) so state_dict names match.

Nothing here imports torch or triton: it only reads and writes text.
"""

from __future__ import annotations

import ast
import re
import symtable
from collections import Counter
from dataclasses import dataclass, field

from graph.records import TaskDescription

from .graphview import Unsupported
from .kernelfiles import kernel_source

HEADER_IMPORTS = [
    # host lines of forward may compute a scale (1 / math.sqrt(head dim)) the task never imported
    "import math",
    "import torch",
    "import torch.nn as nn",
    "import triton",
    "import triton.language as tl",
]
_REFERENCE_NAMES = {"Model", "get_inputs", "get_init_inputs"}
# Host code's calls of these (Triton's constexpr functions, PyTorch's Python broadcast) become
# calls of the plain helpers of kernels/hostmath.py: several microseconds less per call each.
_HOST_SWAPS = {
    "triton.cdiv": "_host_cdiv",
    "triton.next_power_of_2": "_host_next_pow2",
    "torch.broadcast_shapes": "_host_broadcast",
}
_HOST_SWAP = re.compile(r"(?<![\w.])(" + "|".join(re.escape(k) for k in _HOST_SWAPS) + r")\(")
HOST_MATH = {name: kernel_source("hostmath.py", name) for name in _HOST_SWAPS.values()}


def host_math(text: str) -> str:
    """`text` (host code of a candidate) calling kernels/hostmath.py's helpers instead of
    triton.cdiv, triton.next_power_of_2 and torch.broadcast_shapes."""
    return _HOST_SWAP.sub(lambda m: _HOST_SWAPS[m.group(1)] + "(", text)


_IDENT = re.compile(r"(?<![\w.])([A-Za-z_]\w*)")


@dataclass
class Piece:
    """What one family generator writes for one group (or for the whole graph)."""

    kernels: str  # top-level @triton.jit functions
    launchers: str  # top-level Python functions (launchers and their helpers)
    forward: str  # forward() lines; the last is `return <expr>`
    doc: str = ""


class Assembled(str):
    """A rendered candidate file that also carries the piece it was rendered from."""

    piece: Piece

    def __new__(cls, text: str, piece: Piece) -> Assembled:
        obj = super().__new__(cls, text)
        obj.piece = piece
        return obj


@dataclass
class Part:
    """A piece placed in a file: its group tag (None for a whole-graph piece) and the variable
    its value is bound to (None: the piece's `return` ends forward)."""

    piece: Piece
    tag: str | None = None
    binds: str | None = None


@dataclass
class _Def:
    name: str
    text: str
    owner: str | None  # group tag that introduced it


@dataclass
class _Linker:
    defs: dict[str, _Def] = field(default_factory=dict)
    order: list[str] = field(default_factory=list)
    imports: list[str] = field(default_factory=list)
    by_text: dict[str, str] = field(default_factory=dict)  # text with its own name blanked -> name

    def add(self, text: str, tag: str | None, rename_all: bool) -> dict[str, str]:
        """Add the top-level functions of `text`; returns the renames applied to this piece.

        A function whose text (after renaming what it calls) is already in the file is not
        added again: the piece calls the existing one. Groups with the same epilogue then share
        one kernel, which is compiled once."""
        found: dict[str, str] = {}
        for name, src in top_level_defs(text):
            if name.startswith("import "):
                if src not in self.imports:
                    self.imports.append(src)
            else:
                found[name] = src
        mapping: dict[str, str] = {}
        for name in _dependency_order(found):
            body = rename(found[name], mapping)
            blank = rename(body, {name: "__self__"})
            have = self.by_text.get(blank)
            if have is not None:
                mapping[name] = have
                continue
            if name.startswith("_") or not (rename_all and tag is not None):
                new = name
            else:
                new = f"{tag}_{name}"
            k = 1
            while new in self.defs:
                k += 1
                new = f"_{tag or 'x'}{k}{name}" if name.startswith("_") else f"{tag or 'x'}{k}_{name}"
            mapping[name] = new
            self.defs[new] = _Def(new, rename(body, {name: new}), tag)
            self.order.append(new)
            self.by_text[blank] = new
        return mapping


def _dependency_order(found: dict[str, str]) -> list[str]:
    """Function names with every function before those that call it (stable otherwise)."""
    deps = {n: (names_in(src) & set(found)) - {n} for n, src in found.items()}
    out: list[str] = []
    seen: set[str] = set()

    def visit(n: str) -> None:
        if n in seen:
            return
        seen.add(n)
        for d in sorted(deps[n], key=list(found).index):
            visit(d)
        out.append(n)

    for n in found:
        visit(n)
    return out


def top_level_defs(text: str) -> list[tuple[str, str]]:
    """(name, source with decorators) of each top-level function/class in `text`, in order;
    an import statement is returned as ("import ...", its text)."""
    text = text.strip("\n")
    if not text.strip():
        return []
    tree = ast.parse(text)
    lines = text.splitlines()
    out: list[tuple[str, str]] = []
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            start = min([d.lineno for d in node.decorator_list] + [node.lineno])
            out.append((node.name, "\n".join(lines[start - 1 : node.end_lineno])))
        elif isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            continue  # a docstring between helpers
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            out.append(("import " + ast.unparse(node), ast.unparse(node)))
        else:
            raise ValueError(f"generated code has a top-level {type(node).__name__} (line {node.lineno})")
    return out


def rename(text: str, mapping: dict[str, str]) -> str:
    """Rename identifiers (not attributes: `x.name` stays) of `text` by `mapping`."""
    if not mapping:
        return text
    return _IDENT.sub(lambda m: mapping.get(m.group(1), m.group(1)), text)


def names_in(text: str) -> set[str]:
    """Every identifier of `text` that is not an attribute (a superset of the names it uses)."""
    return set(_IDENT.findall(text))


def free_names(text: str) -> set[str]:
    """Global names `text` reads: module-level references and the free names of its functions
    and classes (a function's own locals and parameters are not uses of module names)."""
    out: set[str] = set()

    def walk(t: symtable.SymbolTable) -> None:
        kind = t.get_type()
        module = getattr(kind, "value", kind) == "module"
        for s in t.get_symbols():
            if s.is_referenced() and (module or s.is_global()):
                out.add(s.get_name())
        for c in t.get_children():
            walk(c)

    walk(symtable.symtable(text, "<candidate>", "exec"))
    return out


# ---------------------------------------------------------------------------------------------
# The reference's own code that ModelNew needs: __init__, its helper methods and classes
# ---------------------------------------------------------------------------------------------


def _model_class(tree: ast.Module) -> ast.ClassDef:
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == "Model":
            return node
    raise Unsupported("the task file has no class Model")


class _RenameSuper(ast.NodeTransformer):
    def visit_Call(self, node: ast.Call) -> ast.AST:
        self.generic_visit(node)
        if isinstance(node.func, ast.Name) and node.func.id == "super" and node.args:
            first = node.args[0]
            if isinstance(first, ast.Name) and first.id == "Model":
                node.args[0] = ast.Name(id="ModelNew", ctx=ast.Load())
        return node


def _self_calls(fn: ast.AST) -> set[str]:
    out = set()
    for n in ast.walk(fn):
        if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == "self":
            out.add(n.attr)
    return out


def model_members(source: str) -> list[str]:
    """Model's class-body statements ModelNew repeats: __init__, the methods it (transitively)
    calls and class attributes; never forward."""
    cls = _model_class(ast.parse(source))
    methods = {f.name: f for f in cls.body if isinstance(f, ast.FunctionDef)}
    keep: set[str] = set()
    stack = ["__init__"] if "__init__" in methods else []
    while stack:
        m = stack.pop()
        if m in keep or m == "forward":
            continue
        keep.add(m)
        stack += [a for a in _self_calls(methods[m]) if a in methods]
    out = []
    for item in cls.body:
        if isinstance(item, ast.FunctionDef):
            if item.name not in keep:
                continue
            item = _RenameSuper().visit(ast.parse(ast.unparse(item)).body[0])
            ast.fix_missing_locations(item)
        elif isinstance(item, ast.Expr) and isinstance(item.value, ast.Constant):
            continue  # docstring
        out.append(ast.unparse(item))
    if "__init__" not in keep:
        out.insert(0, "def __init__(self):\n    super().__init__()")
    return out


def forward_signature(source: str) -> str:
    """Model.forward's parameter list as written (defaults included: forward(self, x, mask=None)
    is called with x alone), without annotations."""
    cls = _model_class(ast.parse(source))
    for item in cls.body:
        if isinstance(item, ast.FunctionDef) and item.name == "forward":
            args = item.args
            for a in args.posonlyargs + args.args + args.kwonlyargs:
                a.annotation = None
            for a in (args.vararg, args.kwarg):
                if a is not None:
                    a.annotation = None
            return ast.unparse(args)
    raise Unsupported("class Model has no forward")


def _strip_forward(node: ast.ClassDef) -> str:
    body = [
        b
        for b in node.body
        if not (isinstance(b, ast.FunctionDef) and b.name == "forward")
        and not (isinstance(b, ast.Expr) and isinstance(b.value, ast.Constant))
    ]
    new = ast.ClassDef(
        name=node.name,
        bases=node.bases,
        keywords=node.keywords,
        body=body or [ast.Pass()],
        decorator_list=node.decorator_list,
        type_params=getattr(node, "type_params", []),
    )
    return ast.unparse(ast.fix_missing_locations(new))


def _binds(node: ast.stmt) -> list[str]:
    if isinstance(node, ast.Import):
        return [(a.asname or a.name).split(".")[0] for a in node.names]
    if isinstance(node, ast.ImportFrom):
        return [a.asname or a.name for a in node.names]
    if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
        return [node.name]
    if isinstance(node, ast.Assign):
        return [n.id for t in node.targets for n in ast.walk(t) if isinstance(n, ast.Name)]
    if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
        return [node.target.id]
    return []


def task_prelude(source: str, used: set[str]) -> list[str]:
    """The task's module-level statements the candidate needs, in file order: imports binding a
    used name, assignments of used names, and helper classes/functions reached from `used`
    (helper classes without forward). Never Model, get_inputs or get_init_inputs."""
    tree = ast.parse(source)
    stmts = [
        s
        for s in tree.body
        if not (isinstance(s, (ast.FunctionDef, ast.ClassDef)) and s.name in _REFERENCE_NAMES)
        and not (isinstance(s, ast.Expr))
    ]
    text: dict[int, str] = {}
    for i, s in enumerate(stmts):
        text[i] = _strip_forward(s) if isinstance(s, ast.ClassDef) else ast.unparse(s)
    need = set(used)
    keep: set[int] = set()
    changed = True
    while changed:
        changed = False
        for i, s in enumerate(stmts):
            if i in keep or not set(_binds(s)) & need:
                continue
            if isinstance(s, (ast.Import, ast.ImportFrom)):
                keep.add(i)
                continue
            if isinstance(s, (ast.Assign, ast.AnnAssign, ast.FunctionDef, ast.ClassDef)):
                keep.add(i)
                need |= free_names(text[i])
                changed = True
    return [text[i] for i in sorted(keep)]


# ---------------------------------------------------------------------------------------------
# Rendering
# ---------------------------------------------------------------------------------------------


def _indent(text: str, n: int) -> str:
    return "\n".join((" " * n + ln) if ln.strip() else "" for ln in text.splitlines())


def _bind_return(forward: str, var: str) -> str:
    """Turn a piece's final `return <expr>` into `<var> = <expr>`."""
    lines = forward.strip("\n").splitlines()
    for i in range(len(lines) - 1, -1, -1):
        if lines[i].startswith("return "):
            lines[i] = f"{var} = {lines[i][len('return ') :]}"
            return "\n".join(lines)
    raise ValueError("piece forward has no return")


def _epi_cl_params(text: str) -> list[int] | None:
    """Positions of a launcher's parameters that go through `_epi_mode_cl` (read in the layout of
    a channels-last output), or None when `text` is no such launcher."""
    if "epi_mode_cl(" not in text:
        return None
    fn = ast.parse(text).body[0]
    if not isinstance(fn, ast.FunctionDef) or fn.name.endswith("epi_mode_cl"):
        return None
    params = [a.arg for a in fn.args.args]
    through = {
        c.args[0].id
        for c in ast.walk(fn)
        if isinstance(c, ast.Call)
        and isinstance(c.func, ast.Name)
        and c.func.id.endswith("epi_mode_cl")
        and c.args
        and isinstance(c.args[0], ast.Name)
    }
    return [i for i, a in enumerate(params) if a in through]


def share_channels_last(forward_text: str, defs: dict[str, _Def]) -> str:
    """forward's lines with one channels-last copy per input instead of two.

    A library conv of the channels-last kind reads `to_channels_last(x)`, a fresh copy of its
    input in that layout; where a later channels-last launcher also reads `x` as a full-shape
    operand (a residual add after the block's last conv), `_epi_mode_cl` copied it into the
    layout again (PyTorch's copy: 0.038 ms of a ResNet basic block's 0.231 on the H100). Here the
    first copy is bound once, `x_cl = to_channels_last(x)`, and both read it: the same values in
    the same layout, one pass less. So are two convs of the same input (an Inception block's
    branches), also padded to the same channel count (a Fire module's expand convs of its
    6-channel squeeze output, padded to 8: two 268 MB copies a call at KernelBench's size). Only
    names forward never rebinds (its arguments) or binds once in a plain top-level assignment
    before the conversions (a group's output), and conv calls in plain top-level statements,
    are shared; anything else is left as written."""
    conv = {n for n in defs if n == "to_channels_last" or n.endswith("_to_channels_last")}
    launchers = {n: pos for n, d in defs.items() if (pos := _epi_cl_params(d.text))}
    if not conv:
        return forward_text
    tree = ast.parse(forward_text)
    stores = Counter(n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store))
    # a name bound once, by a plain top-level assignment (a group's output): converted after it,
    # every conversion reads the same tensor
    once = {
        stmt.targets[0].id: stmt.end_lineno or stmt.lineno
        for stmt in tree.body
        if isinstance(stmt, ast.Assign)
        and len(stmt.targets) == 1
        and isinstance(stmt.targets[0], ast.Name)
        and stores[stmt.targets[0].id] == 1
    }
    taken = names_in(forward_text)
    lines = forward_text.split("\n")
    edits: list[tuple[int, int, int, str]] = []  # (line index, start col, end col, text)
    inserts: list[tuple[int, str]] = []
    # each (name, constant channel padding) conversion, with the top-level statement holding it
    sites_of: dict[tuple[str, tuple[str, ...]], list[tuple[ast.stmt, ast.Call]]] = {}
    for stmt in tree.body:
        for c in ast.walk(stmt):
            if (
                isinstance(c, ast.Call)
                and isinstance(c.func, ast.Name)
                and c.func.id in conv
                and c.args
                and not c.keywords
                and isinstance(c.args[0], ast.Name)
                and all(isinstance(a, ast.Constant) for a in c.args[1:])
            ):
                x = c.args[0].id
                if stores[x] and not (x in once and stmt.lineno > once[x]):
                    continue
                extra = tuple(ast.unparse(a) for a in c.args[1:])
                sites_of.setdefault((x, extra), []).append((stmt, c))
    compound = ast.If | ast.For | ast.While | ast.With | ast.Try
    for (x, extra), found in sorted(sites_of.items()):
        if any(isinstance(stmt, compound) for stmt, _ in found):
            continue  # converted only under a branch or a loop: binding it first adds a pass
        first = found[0][0]
        sites = [c for _, c in found]
        # a padded copy has more channels than x: only another conversion can read it
        uses = [
            a
            for c in ast.walk(tree)
            if not extra
            and isinstance(c, ast.Call)
            and isinstance(c.func, ast.Name)
            and c.func.id in launchers
            for i, a in enumerate(c.args)
            if i in launchers[c.func.id] and isinstance(a, ast.Name) and a.id == x and a.lineno > first.lineno
        ]
        if not uses and len(sites) < 2:
            continue  # one conversion read by nothing else: nothing to share
        name, k = f"{x}_cl", 1
        while name in taken:
            k += 1
            name = f"{x}_cl{k}"
        taken.add(name)
        conv_name = sites[0].func.id  # type: ignore[attr-defined]
        inserts.append((first.lineno - 1, f"{name} = {conv_name}({', '.join((x, *extra))})"))
        for node in [*sites, *uses]:
            if node.lineno != node.end_lineno:
                return forward_text
            edits.append((node.lineno - 1, node.col_offset, node.end_col_offset or 0, name))
    for li, a, b, text in sorted(edits, key=lambda e: (e[0], -e[1])):
        lines[li] = lines[li][:a] + text + lines[li][b:]
    for li, text in sorted(inserts, reverse=True):
        lines.insert(li, text)
    return "\n".join(lines)


def _writes_into(text: str) -> bool:
    """A launcher whose last parameter is `out=None`: given `out`, a tensor shaped like its first
    argument, it writes its result there instead of into a new tensor (the conv tail)."""
    try:
        fn = ast.parse(text).body[0]
    except (SyntaxError, IndexError):
        return False
    if not isinstance(fn, ast.FunctionDef) or not fn.args.args or not fn.args.defaults:
        return False
    last = fn.args.defaults[-1]
    return fn.args.args[-1].arg == "out" and isinstance(last, ast.Constant) and last.value is None


def _reads_until_rebound(body: list[ast.stmt], j: int, name: str) -> int:
    """How many times statements j, j+1, ... read `name` before one binds it again."""
    n = 0
    for st in body[j:]:
        found = [x for x in ast.walk(st) if isinstance(x, ast.Name) and x.id == name]
        n += sum(isinstance(x.ctx, ast.Load) for x in found)
        if any(isinstance(x.ctx, ast.Store) for x in found):
            break
    return n


def cat_in_place(forward_text: str, defs: dict[str, _Def]) -> str:
    """forward's lines with a concatenation of launcher outputs written in place.

    `v = launch_cat([a, b], dim)`, where `a = tail(t_a, ...)` and `b = tail(t_b, ...)` are read
    nowhere else and `tail` takes `out=` (_writes_into), becomes one buffer for the joined
    result (`cat_buffer`, shaped from t_a and t_b) and the tails writing their ranges of it:
    the branches of a Fire or Inception block are written once, never copied into the join
    (KernelBench's Fire module: 4.3 GB read and written again per call). The tails move down to
    the join, after the statements that made their inputs; an input name that a later statement
    rebinds (every libconv group binds t_n0) is renamed apart first. Anything else is left as
    written."""
    writers = {n for n, d in defs.items() if _writes_into(d.text)}
    buffers = {n: n[: -len("launch_cat")] + "cat_buffer" for n in defs if n.endswith("launch_cat")}
    buffers = {n: b for n, b in buffers.items() if b in defs}
    if not writers or not buffers:
        return forward_text
    tree = ast.parse(forward_text)
    body = tree.body
    if any(a.end_lineno is None or a.end_lineno >= b.lineno for a, b in zip(body, body[1:], strict=False)):
        return forward_text  # statements sharing a line: not cut apart by lines here
    lines = forward_text.split("\n")
    text = [
        "\n".join(lines[st.lineno - 1 : st.end_lineno]) for st in body
    ]  # each top-level statement's own lines
    names = [n for n in ast.walk(tree) if isinstance(n, ast.Name)]
    stores = Counter(n.id for n in names if isinstance(n.ctx, ast.Store))
    loads = Counter(n.id for n in names if isinstance(n.ctx, ast.Load))
    taken = names_in(forward_text)

    def assigned(st: ast.stmt) -> str | None:
        if isinstance(st, ast.Assign) and len(st.targets) == 1 and isinstance(st.targets[0], ast.Name):
            return st.targets[0].id
        return None

    def call_of(st: ast.stmt, funcs: set[str] | dict[str, str]) -> ast.Call | None:
        v = st.value if isinstance(st, ast.Assign) else None
        if isinstance(v, ast.Call) and isinstance(v.func, ast.Name) and v.func.id in funcs and not v.keywords:
            return v
        return None

    where = {assigned(st): i for i, st in enumerate(body) if assigned(st)}
    moved: set[int] = set()
    replace: dict[int, list[str]] = {}
    for ci, st in enumerate(body):
        cat = call_of(st, buffers)
        out = assigned(st)
        if cat is None or out is None or len(cat.args) != 2:
            continue
        items, dim = cat.args
        if not isinstance(items, ast.List) or len(items.elts) < 2 or not isinstance(dim, ast.Constant):
            continue
        if not all(isinstance(e, ast.Name) for e in items.elts):
            continue
        plan: list[tuple[int, ast.Call, str]] = []
        for e in items.elts:
            j = where.get(e.id)  # type: ignore[attr-defined]
            w = call_of(body[j], writers) if j is not None and j < ci else None
            if j is None or w is None or stores[e.id] != 1 or loads[e.id] != 1 or j in moved:  # type: ignore[attr-defined]
                break
            if (
                not w.args
                or not isinstance(w.args[0], ast.Name)
                or j == 0
                or assigned(body[j - 1]) != w.args[0].id
            ):
                break  # the tail's input is made by the statement just before it
            if _reads_until_rebound(body, j, w.args[0].id) != 1:
                break  # and read by the tail alone
            # what else the tail reads must mean the same at the join: names bound once before it
            others = {n.id for a in w.args[1:] for n in ast.walk(a) if isinstance(n, ast.Name)}
            if any(stores[n] and (stores[n] > 1 or where.get(n, ci) > j) for n in others):
                break
            plan.append((j, w, w.args[0].id))
        else:
            new: list[str] = []
            inputs: list[str] = []
            for j, _w, t in plan:
                if stores[t] > 1:  # rebound later: this tail's input gets a name of its own
                    k, name = 1, f"{t}_{out}"
                    while name in taken:
                        k += 1
                        name = f"{t}_{out}{k}"
                    taken.add(name)
                    head = text[j - 1]
                    text[j - 1] = re.sub(rf"^{re.escape(t)}(?=\s*=)", name, head, count=1)
                    t = name
                inputs.append(t)
            d = dim.value
            new.append(f"{out} = {buffers[cat.func.id]}([{', '.join(inputs)}], {d})")  # type: ignore[attr-defined]
            for i, ((j, w, _), t) in enumerate(zip(plan, inputs, strict=True)):
                offset = " + ".join(f"{u}.shape[{d}]" for u in inputs[:i]) or "0"
                args = ", ".join([t, *(ast.unparse(a) for a in w.args[1:])])
                new.append(f"{w.func.id}({args}, out={out}.narrow({d}, {offset}, {t}.shape[{d}]))")  # type: ignore[attr-defined]
                moved.add(j)
            replace[ci] = new
    if not replace:
        return forward_text
    out_lines: list[str] = []
    for i, seg in enumerate(text):
        if i in moved:
            continue
        out_lines += replace.get(i, [seg])
    return "\n".join(out_lines)


def render(desc: TaskDescription, parts: list[Part], doc: str, tail: str = "") -> str:
    """One candidate file from `parts` (in forward order); `tail` ends forward when the last
    part binds a variable (e.g. `return v_out`)."""
    link = _Linker()
    body: list[str] = []
    several = sum(1 for p in parts if p.piece.kernels.strip() or p.piece.launchers.strip()) > 1
    for p in parts:
        mapping = link.add(p.piece.kernels + "\n\n" + p.piece.launchers, p.tag, several)
        fwd = rename(p.piece.forward, mapping)
        body.append(_bind_return(fwd, p.binds) if p.binds else fwd.strip("\n"))
    if tail:
        body.append(tail)
    forward_text = cat_in_place(share_channels_last("\n".join(b for b in body if b), link.defs), link.defs)
    members = model_members(desc.source)
    args = forward_signature(desc.source)
    cls = (
        "class ModelNew(nn.Module):\n"
        + "\n\n".join(_indent(m, 4) for m in members)
        + f"\n\n    def forward({args}):\n"
        + _indent(forward_text, 8)
        + "\n"
    )
    # Keep only the functions ModelNew reaches (directly or through other kept functions).
    reach = names_in(cls)
    keep: list[str] = []
    seen: set[str] = set()
    stack = [n for n in link.order if n in reach]
    while stack:
        n = stack.pop()
        if n in seen:
            continue
        seen.add(n)
        stack += [m for m in names_in(link.defs[n].text) if m in link.defs and m not in seen]
    keep = [n for n in link.order if n in seen]
    jit = [n for n in keep if "@triton.jit" in link.defs[n].text or "@triton." in link.defs[n].text]
    host = [n for n in keep if n not in jit]
    host_texts = [host_math(link.defs[n].text) for n in host]
    called = names_in("\n".join(host_texts))
    helpers = [t for name, t in HOST_MATH.items() if name in called]
    code = "\n\n\n".join([link.defs[n].text for n in jit] + helpers + host_texts)
    used = free_names(code + "\n" + cls)
    prelude = task_prelude(desc.source, used)
    imports = [i for i in HEADER_IMPORTS if i.split()[-1] in used or i == "import torch"]
    imports += [i for i in link.imports if i not in imports and i.split()[-1] in used]
    prelude = [s for s in prelude if s not in imports]
    head = "\n".join(imports + prelude)
    return f'"""{doc}"""\n\n' + head + "\n\n\n" + (code + "\n\n\n" if code else "") + cls


_TAGGED = re.compile(r"\b_?(g\d+)_\w+")


def group_at_line(source: str, line: int) -> str | None:
    """The group tag (`g3`) whose code holds 1-based `line` of a rendered candidate: the tagged
    function around it, or a tagged launcher called on that line of forward."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return None
    lines = source.splitlines()
    for node in tree.body:
        if not (node.lineno <= line <= (node.end_lineno or node.lineno)):
            continue
        if isinstance(node, ast.FunctionDef):
            m = _TAGGED.match(node.name)
            return m.group(1) if m else None
        if isinstance(node, ast.ClassDef) and 0 < line <= len(lines):
            m = _TAGGED.search(lines[line - 1])
            return m.group(1) if m else None
    return None
