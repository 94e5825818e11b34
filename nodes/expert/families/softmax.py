"""Softmax / log-softmax over any dim, with scalar elementwise prologue/epilogue fused in.

Last-dim reductions (inner == 1 at run time) use a row kernel whose algorithm is the seed:
  online      one pass keeping a running max and rescaled sum, one pass to write (2 reads); with
              ORDER_CH (memory stage, few long rows) one ticket-ordered launch over chunks of the
              rows instead, whose write pass finds its chunk in L2 (_ordered_kernel)
  resident    long rows: one program a chunk of RESIDENT elements, kept in registers from its
              read to its write while it waits for its row's other chunks (_resident_kernel):
              one read, one write
  whole-row   the row lives in registers: one read, one write (short rows; long rows at run time
              go to the online kernel, which the file also contains)
  three-pass  max, then sum, then write (3 reads; the simplest, and the safest fallback)
Other dims (inner > 1) use a column-tiled online kernel over the (outer, R, inner) view; when its
column tiles are too few for the GPU the reduced dim is split in chunks too (_col_split_kernels).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from graph.records import TaskDescription

from .. import ewops
from ..chain import Chain, collect_chain
from ..graphview import GraphView, Unsupported, arg_value, assemble, is_node
from ..kernelfiles import COLUMN_TILE_HEAD, jit_source, ticket_count, ticket_head, ticket_wait
from ..spaces import distinct_launches, next_pow2

WHOLE_ROW_MAX = 16384  # beyond this a register-resident row spills; the launcher uses online


@dataclass
class SmPlan:
    x: Any  # Leaf
    log: bool
    dim: int
    prologue: Chain
    epilogue: Chain
    sm_node: str
    row_len: int  # as captured (for ordering the seeds only; kernels read it at run time)
    inner: int = 1  # product of the dims after `dim`, as captured
    # Further prologue tensors of the softmax input's own shape (e.g. a masked_fill mask), loaded
    # at the same offsets as x.
    aux: list[Any] = field(default_factory=list)


def match(view: GraphView) -> SmPlan | None:
    nodes = view.compute_nodes()
    sm = [n for n in nodes if n.op in ("softmax", "log_softmax")]
    if len(sm) != 1:
        return None
    s = sm[0]
    i = nodes.index(s)
    pro, epi = nodes[:i], nodes[i + 1 :]
    dim = arg_value(s, 1, "dim")
    if dim is None or is_node(dim):
        raise Unsupported("softmax without an explicit constant dim")
    if s.kwargs.get("dtype") not in (None,):
        raise Unsupported("softmax with a dtype argument")
    src = view.refs(s)
    if len(src) != 1:
        raise Unsupported("softmax input is not a single tensor")
    prologue = collect_chain(view, pro, internal=set())
    aux: list[Any] = []
    if pro:
        if not prologue.tensor_leaves or src[0] != pro[-1].name:
            raise Unsupported("softmax prologue does not end in the softmax input")
        x, aux = prologue.tensor_leaves[0], list(prologue.tensor_leaves[1:])
        if any(lf.shape != s.shape for lf in prologue.tensor_leaves):
            raise Unsupported("softmax prologue reads tensors of another shape (broadcast)")
    else:
        x = view.leaves.get(src[0])
        if x is None or x.is_scalar:
            raise Unsupported("softmax input is not a forward argument or parameter")
    epilogue = collect_chain(view, epi, internal={s.name})
    if epilogue.tensor_leaves:
        raise Unsupported("softmax epilogue reads other tensors")
    if any(n.shape != s.shape for n in pro + epi):
        raise Unsupported("softmax prologue/epilogue changes the shape")
    shape = s.shape or []
    d = int(dim) % max(len(shape), 1)
    return SmPlan(
        x=x,
        log=s.op == "log_softmax",
        dim=int(dim),
        prologue=prologue,
        epilogue=epilogue,
        sm_node=s.name,
        row_len=shape[d] if shape else 1,
        inner=_prod(shape[d + 1 :]),
        aux=aux,
    )


def _prod(xs: list[int]) -> int:
    p = 1
    for x in xs:
        p *= x
    return p


def algorithms(plan: SmPlan) -> list[str]:
    if plan.inner > 1:
        # Not the last dim: one column-tiled online kernel; the row algorithms would not run.
        return ["column-online"]
    if plan.row_len <= WHOLE_ROW_MAX:
        return ["whole-row", "online", "three-pass"]
    # Long rows: whole-row would run the online kernel at run time (a duplicate seed); the
    # register-resident chunks read each element once (H100, 4096 x 393216: 4.50 ms against the
    # online kernel's 6.46 and torch.compile's 6.51, evals/h200/membw_probe.py smrow)
    return ["resident", "online", "three-pass"]


def defaults(plan: SmPlan, algorithm: str) -> dict[str, Any]:
    if algorithm == "whole-row":
        # 0 = chosen at run time from the actual row length (the captured sizes may be the
        # shrunk CPU ones): several short rows per program, warps scaled with the tile.
        return {"ROWS": 0, "num_warps": 0}
    if algorithm == "column-online":
        # BLOCK_I columns per program (a cap: narrower tensors take their power of two), warps of
        # the column kernels; BLOCK_N sizes only the row kernel kept for a last dim at run time
        return {"ROWS": 1, "BLOCK_N": 4096, "BLOCK_I": 128, "num_warps": 4}
    if algorithm == "online":
        # ORDER_CH 0: one program a row (sm_row_kernel); > 0 the ordered launch (_ordered_kernel)
        return {"ROWS": 1, "BLOCK_N": 4096, "num_warps": 8, "ORDER_CH": 0}
    if algorithm == "resident":
        # RESIDENT elements a program; warps 0: from the chunk, about 32 elements a thread (the
        # probe's best: 16384 at 16 warps, 4096 at 4); BLOCK_N: the online kernel's, which the
        # launcher falls back to for rows of more than 4096 chunks
        return {"ROWS": 1, "BLOCK_N": 4096, "num_warps": 0, "RESIDENT": 16384}
    return {"ROWS": 1, "BLOCK_N": 4096, "num_warps": 8}


def valid(plan: SmPlan, params: dict[str, Any]) -> str | None:
    if params["algorithm"] != "whole-row" and params.get("ROWS", 1) != 1:
        return "ROWS applies to the whole-row algorithm only"
    if params["algorithm"] not in ("whole-row", "resident") and params.get("num_warps") == 0:
        return "automatic warps apply to the whole-row and resident algorithms only"
    if "BLOCK_I" in params and params["algorithm"] != "column-online":
        return "BLOCK_I applies to the column-online algorithm only"
    bi = params.get("BLOCK_I", 128)
    if not isinstance(bi, int) or bi < 16 or bi & (bi - 1):
        return "BLOCK_I must be a power of two >= 16"
    oc = params.get("ORDER_CH", 0)
    if not isinstance(oc, int) or oc < 0:
        return "ORDER_CH must be an int >= 0"
    if oc and params["algorithm"] != "online":
        return "ORDER_CH applies to the online algorithm only"
    res = params.get("RESIDENT", 0)
    if (
        not isinstance(res, int)
        or res < 0
        or res & (res - 1)
        or bool(res) != (params["algorithm"] == "resident")
        or 0 < res < 16
    ):
        return "RESIDENT (chunk elements, a power of two >= 16) is set for the resident algorithm, and only there"
    lag = params.get("ORDER_LAG", 0)
    if not isinstance(lag, int) or lag < 0 or (lag and not oc):
        return "ORDER_LAG is an int >= 0 and applies to the ordered launch (ORDER_CH) only"
    return None


def _order_chunk(order_ch: int, block_n: int, row_len: int) -> int:
    """The chunk the launcher makes of ORDER_CH on rows of `row_len` (0: off): whole tiles of
    the row kernel's block, at most 4096 chunks a row."""
    if not order_ch:
        return 0
    block = max(16, min(block_n, next_pow2(row_len)))
    return max(-(-order_ch // block), -(-row_len // (4096 * block))) * block


def space(plan: SmPlan, params: dict[str, Any], stage: str, sp: dict[str, list]) -> dict[str, list]:
    sp = dict(sp)
    if params["algorithm"] == "whole-row":
        sp.pop("BLOCK_N", None)  # the row length fixes the block
    elif params["algorithm"] == "column-online":
        # the row kernel's BLOCK_N never runs for a middle dim: the column tile and the column
        # kernels' warps are what change the launch
        sp.pop("ROWS", None)
        sp.pop("BLOCK_N", None)
        if stage == "tiling":
            sp["BLOCK_I"] = [64, 256, 32]
        if stage == "memory":
            sp["num_warps"] = [8, 2]
    elif params["algorithm"] == "resident":
        # the chunk is the tile; BLOCK_N sizes only the fallback row kernel
        sp.pop("ROWS", None)
        sp.pop("BLOCK_N", None)
        if stage == "tiling":
            sp["RESIDENT"] = [v for v in (4096, 8192, 16384) if v != int(params.get("RESIDENT", 0))]
        if stage == "memory":
            # a program holds its chunk in registers: few warps would spill it
            sp["num_warps"] = [v for v in (16, 8, 4) if v != int(params.get("num_warps", 0))]
    else:
        sp.pop("ROWS", None)
        if params["algorithm"] == "online" and stage == "memory" and plan.inner == 1:
            if plan.row_len > WHOLE_ROW_MAX:
                # few long rows: the ordered one-launch variant (the write pass reads its chunk
                # from L2), by chunk size; values the launcher makes the same chunk of are left out
                block, r = int(params.get("BLOCK_N", 4096)), plan.row_len
                sp["ORDER_CH"] = distinct_launches(
                    [16384, 8192],
                    int(params.get("ORDER_CH", 0)),
                    lambda v: _order_chunk(v, block, r),
                )
    return sp


def refinements(plan: SmPlan, params: dict[str, Any]) -> list[tuple[str, dict[str, Any], str]]:
    out = []
    if params["algorithm"] == "three-pass":
        p = dict(params, algorithm="online")
        out.append(("refine:online-max-sum", p, "merge the max and sum passes (one read fewer)"))
    if params["algorithm"] in ("online", "three-pass") and plan.row_len <= WHOLE_ROW_MAX:
        p = dict(params, algorithm="whole-row")
        p.update(defaults(plan, "whole-row"))
        for k in ("BLOCK_N", "ORDER_CH", "ORDER_LAG"):  # the online kernel's, not whole-row's
            p.pop(k, None)
        out.append(("refine:row-in-registers", p, "the row fits in registers: read it once"))
    return out


# ---------------------------------------------------------------------------------------------
# code generation
# ---------------------------------------------------------------------------------------------


def _scalar_args(plan: SmPlan) -> list[str]:
    names: list[str] = []
    for lf in plan.prologue.scalar_leaves + plan.epilogue.scalar_leaves:
        if f"l_{lf.name}" not in names:
            names.append(f"l_{lf.name}")
    return names


def _aux_ptrs(plan: SmPlan) -> str:
    return "".join(f"a_{lf.name}_ptr, " for lf in plan.aux)


def _pro(plan: SmPlan, xvar: str, mask: str | None, tag: str, offs: str = "offs") -> list[str]:
    """Load-side transform: prologue chain, then masked lanes to -inf (no mask: a whole chunk)."""
    env = {plan.x.name: xvar}
    for lf in plan.prologue.scalar_leaves:
        env[lf.name] = f"l_{lf.name}"
    loads = []
    m = f", mask={mask}, other=0" if mask else ""
    for lf in plan.aux:
        # other=0 (not 0.0) so bool / integer tensors load too; the math is fp32 either way.
        loads.append(f"a{tag}_{lf.name} = tl.load(a_{lf.name}_ptr + {offs}{m}).to(tl.float32)")
        env[lf.name] = f"a{tag}_{lf.name}"
    lines, last = plan.prologue.body(env, var_prefix=f"p{tag}_")
    lines = loads + lines
    if mask:
        lines.append(f"{xvar} = tl.where({mask}, {last or xvar}, -float('inf'))")
    elif last:
        lines.append(f"{xvar} = {last}")
    return lines


def _epi(plan: SmPlan, yvar: str, tag: str) -> tuple[list[str], str]:
    env = {plan.sm_node: yvar}
    for lf in plan.epilogue.scalar_leaves:
        env[lf.name] = f"l_{lf.name}"
    lines, last = plan.epilogue.body(env, var_prefix=f"e{tag}_")
    return lines, last or yvar


def _ind(lines: list[str], n: int) -> list[str]:
    return [" " * n + ln for ln in lines]


def _normalize(plan: SmPlan, xvar: str, m: str, d: str) -> str:
    return f"{xvar} - {m} - tl.log({d})" if plan.log else f"tl.exp({xvar} - {m}) / {d}"


def _chunk(plan: SmPlan, tag: str, step: list[str], store: bool, ev: str) -> list[str]:
    """The tile of BLOCK_N elements at `start` of the range [lo, hi), whole (unmasked) or cut by
    the range's ends (masked): loaded, prologue applied, then `step`; `store`: normalised with
    `m` and `d`, epilogue applied and stored."""
    epi, last = _epi(plan, "y", "")
    out = ["offs = tl.multiple_of(start, 16) + cols", "if (start >= lo) & (start + BLOCK_N <= hi):"]
    for masked in (False, True):
        mk = "mask" if masked else None
        sm = ", mask=mask" if masked else ""
        body = ["mask = (offs >= lo) & (offs < hi)"] if masked else []
        other = ", other=0.0" if masked else ""
        body.append(f"x = tl.load(x_ptr + offs{sm}{other}{ev}).to(tl.float32)")
        body += _pro(plan, "x", mk, tag + ("m" if masked else "w"), "offs")
        body += step
        if store:
            body += [
                f"y = {_normalize(plan, 'x', 'm', 'd')}",
                *epi,
                f"tl.store(out_ptr + offs, {last}.to(out_ptr.dtype.element_ty){sm})",
            ]
        out += _ind(body, 4)
        if not masked:
            out.append("else:")
    return out


def _tiles(plan: SmPlan, tag: str, step: list[str], store: bool, ev: str) -> list[str]:
    """A loop over [lo, hi) in tiles of BLOCK_N. The tiles start at 16-element boundaries of the
    whole tensor (from `first`), not of the range, and only a tile the range's ends cut is
    masked: with a row length that is not a multiple of 16, range-relative masked tiles would
    make every load and store scalar (Triton vectorizes only accesses it can prove aligned and
    unmasked in 4s)."""
    return ["for start in range(first, hi, BLOCK_N):", *_ind(_chunk(plan, tag, step, store, ev), 4)]


_ONLINE_STEP = [
    "m_new = tl.maximum(m, tl.max(x, 0))",
    "d = d * tl.exp(m - m_new) + tl.sum(tl.exp(x - m_new), 0)",
    "m = m_new",
]


def _row_kernel(plan: SmPlan, algo: str, name: str, ev: str) -> str:
    """Rows streamed in tiles of BLOCK_N (_tiles), one program a row."""
    sargs = "".join(f", {s}" for s in _scalar_args(plan))
    sig = f"x_ptr, {_aux_ptrs(plan)}out_ptr, n_cols{sargs}, BLOCK_N: tl.constexpr"
    L = [
        "row = tl.program_id(0).to(tl.int64)",
        "lo = row * n_cols",
        "hi = lo + n_cols",
        "first = lo // 16 * 16",
        "cols = tl.arange(0, BLOCK_N)",
    ]
    if algo == "online":
        L += [
            "m = tl.full([], -float('inf'), tl.float32)",
            "d = tl.zeros([], dtype=tl.float32)",
            *_tiles(plan, "a", _ONLINE_STEP, False, ev),
        ]
    elif algo == "three-pass":
        L += [
            "m = tl.full([], -float('inf'), tl.float32)",
            *_tiles(plan, "a", ["m = tl.maximum(m, tl.max(x, 0))"], False, ev),
            "d = tl.zeros([], dtype=tl.float32)",
            *_tiles(plan, "b", ["d += tl.sum(tl.exp(x - m), 0)"], False, ev),
        ]
    else:
        raise Unsupported(algo)
    L += _tiles(plan, "c", [], True, ev)
    return jit_source(name, sig, L)


# The ordered online kernel: one launch over chunks of CH elements of each row. Programs take
# tickets from cnt_ptr[0] and map them row by row: a row's NSPLIT partial programs (k < NSPLIT),
# then its NSPLIT output programs. A partial program stores its chunk's max and sum of
# exp(x - max) to ws (planes [2, n_rows, NSPLIT]) and counts it in cnt_ptr[1 + row] with release
# semantics; an output program waits (acquire) until the row's count reaches NSPLIT, combines the
# row's partials (read past L1: a line cached while another row's were read may be stale) and
# writes its chunk. Tickets make a program wait only for programs that took theirs earlier and
# so already run: no deadlock whatever order the hardware starts programs in. The write pass
# follows a chunk's first read within about a row of traffic, so with chunks small enough that a
# row's programs fill about one wave it re-reads the chunk from L2, not HBM (one program a row
# streaming a 1.5 MB row re-reads it from HBM: the GPU's rows in flight outgrow L2).
_ORDERED_HEAD = [
    *ticket_head(2, lag="LAG"),
    "lo = row * n_cols + sid * CH",
    "hi = tl.minimum(row * n_cols + n_cols, lo + CH)",
    "first = lo // 16 * 16",
    "cols = tl.arange(0, BLOCK_N)",
]

# A chunk's online max and sum. A chunk may be all -inf (a masked run of a long row): its max
# stays -inf and its sum 0 (the shift is 0 then, not -inf, so no -inf - -inf NaN).
_GUARDED_STEP = [
    "m_new = tl.maximum(m, tl.max(x, 0))",
    "m_s = tl.where(m_new == -float('inf'), 0.0, m_new)",
    "d = d * tl.exp(m - m_s) + tl.sum(tl.exp(x - m_s), 0)",
    "m = m_new",
]


# A row's chunk partials in ws_ptr's planes [2, n_rows, NSPLIT]: the maxima, then the sums.
_WS = "ws_ptr + row * NSPLIT"
_WD = "ws_ptr + (n_rows + row) * NSPLIT"


def _row_stats() -> list[str]:
    """The row's max `m` and sum `d` from its chunks' partials (_WS, _WD), read past L1
    (partials of the same launch: a line cached for a neighbouring row is stale)."""
    return [
        "kk = tl.arange(0, SPLIT_BLOCK)",
        "kmask = kk < NSPLIT",
        f"pm = tl.load({_WS} + kk, mask=kmask, other=-float('inf'), cache_modifier='.cg')",
        f"pd = tl.load({_WD} + kk, mask=kmask, other=0.0, cache_modifier='.cg')",
        "m = tl.max(pm, 0)",
        # all -inf (the whole row: torch gives NaN, as this does): no chunk adds to the sum
        "d = tl.sum(tl.where(pm == -float('inf'), 0.0, pd * tl.exp(pm - m)), 0)",
    ]


def _ordered_kernel(plan: SmPlan, name: str, ev: str) -> str:
    sargs = "".join(f", {s}" for s in _scalar_args(plan))
    sig = (
        f"x_ptr, {_aux_ptrs(plan)}out_ptr, ws_ptr, cnt_ptr, n_rows, n_cols, CH, NSPLIT{sargs}, "
        "SPLIT_BLOCK: tl.constexpr, BLOCK_N: tl.constexpr, LAG: tl.constexpr"
    )
    cnt = "cnt_ptr + 1 + row"
    partial = [
        "m = tl.full([], -float('inf'), tl.float32)",
        "d = tl.zeros([], dtype=tl.float32)",
        # the first read keeps its lines in L2 for the write pass (whatever EVICT the write
        # pass's loads use)
        *_tiles(plan, "a", _GUARDED_STEP, False, ', eviction_policy="evict_last"'),
        f"tl.store({_WS} + k, m)",
        f"tl.store({_WD} + k, d)",
        *ticket_count(cnt),
    ]
    output = [*ticket_wait(cnt), *_row_stats(), *_tiles(plan, "c", [], True, ev)]
    # ORDER_LAG: a row's output chunks run LAG rows after its partial chunks (ticket_head)
    body = ["if k < NSPLIT:", *_ind(partial, 4), "else:", *_ind(output, 4)]
    L = [*_ORDERED_HEAD, "if (row >= 0) & (row < n_rows):", *_ind(body, 4)]
    return jit_source(name, sig, L)


# The register-resident kernel (RESIDENT): one program a chunk of BLOCK_N elements of a row, which
# it loads once, keeps in registers while it waits for its row's other chunks' partials, and
# writes: one HBM read and one write an element. A program waits only for its own row's chunks,
# whose tickets are adjacent to its own; the launcher uses the single launch (PHASE 2) only where
# a row has at most one chunk per SM, so a row's programs always fit on the GPU together and the
# ones that wait never keep the others from starting. Otherwise, and under the Triton
# interpreter (which runs programs one after another, so a waiting program would wait for
# ever), the same program runs as two launches: PHASE 0 stores the partials, PHASE 1 re-reads
# its chunk and writes it. Tickets: cnt_ptr[0] (PHASE 0 and 2), cnt_ptr[1] (PHASE 1); counts:
# cnt_ptr[2 + row].
def _resident_kernel(plan: SmPlan, name: str, ev: str) -> str:
    sargs = "".join(f", {s}" for s in _scalar_args(plan))
    sig = (
        f"x_ptr, {_aux_ptrs(plan)}out_ptr, ws_ptr, cnt_ptr, n_rows, n_cols, NSPLIT{sargs}, "
        "SPLIT_BLOCK: tl.constexpr, BLOCK_N: tl.constexpr, PHASE: tl.constexpr"
    )
    cnt = "cnt_ptr + 2 + row"
    epi, last = _epi(plan, "y", "")
    partial = [
        "m = tl.max(x, 0)",
        "m_s = tl.where(m == -float('inf'), 0.0, m)",
        f"tl.store({_WS} + k, m)",
        f"tl.store({_WD} + k, tl.sum(tl.exp(x - m_s), 0))",
        *ticket_count(cnt),
    ]
    write = [
        *ticket_wait(cnt),
        *_row_stats(),
        f"y = {_normalize(plan, 'x', 'm', 'd')}",
        *epi,
        f"tl.store(out_ptr + offs, {last}.to(out_ptr.dtype.element_ty), mask=mask)",
    ]
    L = [
        "t = tl.atomic_add(cnt_ptr + PHASE % 2, 1)",
        "row = t // NSPLIT",
        "k = t % NSPLIT",
        "lo = row.to(tl.int64) * n_cols + k * BLOCK_N",
        "offs = lo + tl.arange(0, BLOCK_N)",
        "mask = offs < tl.minimum(row.to(tl.int64) * n_cols + n_cols, lo + BLOCK_N)",
        f"x = tl.load(x_ptr + offs, mask=mask, other=0.0{ev}).to(tl.float32)",
        *_pro(plan, "x", "mask", "r", "offs"),
        "if PHASE != 1:",
        *_ind(partial, 4),
        "if PHASE != 0:",
        *_ind(write, 4),
    ]
    return jit_source(name, sig, L)


def _whole_row_kernel(plan: SmPlan, name: str, ev: str) -> str:
    sargs = "".join(f", {s}" for s in _scalar_args(plan))
    epi, last = _epi(plan, "y", "")
    norm = "y = x - m[:, None] - tl.log(s)[:, None]" if plan.log else "y = e / s[:, None]"
    L = [
        "rows = tl.program_id(0).to(tl.int64) * ROWS + tl.arange(0, ROWS)",
        "cols = tl.arange(0, BLOCK_N)",
        "mask = (rows < n_rows)[:, None] & (cols < n_cols)[None, :]",
        "offs = rows[:, None] * n_cols + cols[None, :]",
        f"x = tl.load(x_ptr + offs, mask=mask, other=0.0{ev}).to(tl.float32)",
        *_pro(plan, "x", "mask", "a"),
        "m = tl.max(x, 1)",
        "e = tl.exp(x - m[:, None])",
        "s = tl.sum(e, 1)",
        norm,
        *epi,
        f"tl.store(out_ptr + offs, {last}.to(out_ptr.dtype.element_ty), mask=mask)",
    ]
    sig = f"x_ptr, {_aux_ptrs(plan)}out_ptr, n_rows, n_cols{sargs}, ROWS: tl.constexpr, BLOCK_N: tl.constexpr"
    return jit_source(name, sig, L)


def _col_load(bound: str, ev: str) -> list[str]:
    """A [BLOCK_R, BLOCK_I] tile of rows start.. below `bound` (R, or a chunk's end)."""
    return [
        "r = start + rr",
        f"mask = (r < {bound})[:, None] & cmask[None, :]",
        "offs = base + r[:, None] * inner + ci[None, :]",
        f"x = tl.load(x_ptr + offs, mask=mask, other=0.0{ev}).to(tl.float32)",
    ]


# Columns past `inner` hold 0 instead of -inf so their running max stays finite (no NaN).
_FIX_COLS = ["x = tl.where(cmask[None, :], x, 0.0)"]


def _col_stats(plan: SmPlan, lo: str, hi: str, ev: str) -> list[str]:
    """The online max and rescaled sum of each column over rows lo..hi."""
    return [
        "m = tl.full([BLOCK_I], -float('inf'), tl.float32)",
        "d = tl.zeros([BLOCK_I], dtype=tl.float32)",
        f"for start in range({lo}, {hi}, BLOCK_R):",
        *_ind(_col_load(hi, ev) + _pro(plan, "x", "mask", "a") + _FIX_COLS, 4),
        "    m_new = tl.maximum(m, tl.max(x, 0))",
        "    d = d * tl.exp(m - m_new) + tl.sum(tl.exp(x - m_new[None, :]), 0)",
        "    m = m_new",
    ]


def _col_write(plan: SmPlan, lo: str, hi: str, ev: str) -> list[str]:
    """Rows lo..hi normalised with the columns' m and d, epilogue applied, stored."""
    epi, last = _epi(plan, "y", "")
    return [
        f"for start in range({lo}, {hi}, BLOCK_R):",
        *_ind(_col_load(hi, ev) + _pro(plan, "x", "mask", "c") + _FIX_COLS, 4),
        "    y = "
        + ("x - m[None, :] - tl.log(d)[None, :]" if plan.log else "tl.exp(x - m[None, :]) / d[None, :]"),
        *_ind(epi, 4),
        f"    tl.store(out_ptr + offs, {last}.to(out_ptr.dtype.element_ty), mask=mask)",
    ]


def _col_kernel(plan: SmPlan, name: str, ev: str) -> str:
    """Reduction over the middle dim of (outer, R, inner): tiles of [BLOCK_R, BLOCK_I] columns."""
    sargs = "".join(f", {s}" for s in _scalar_args(plan))
    L = [*COLUMN_TILE_HEAD, *_col_stats(plan, "0", "R", ev), *_col_write(plan, "0", "R", ev)]
    sig = f"x_ptr, {_aux_ptrs(plan)}out_ptr, R, inner{sargs}, BLOCK_R: tl.constexpr, BLOCK_I: tl.constexpr"
    return jit_source(name, sig, L)


def _col_split_kernels(plan: SmPlan, ev: str) -> list[str]:
    """The column reduction with the reduced dim split in chunks too, for grids of few column
    tiles (a short outer and a narrow inner: softmax over dim 0 of (4096, 8192) has 64 tiles of
    128 columns for 132 SMs). The first kernel writes each chunk's max and rescaled sum to
    ws[0 | 1, chunk, column]; the second combines a column's chunks and writes its own chunk."""
    sargs = "".join(f", {s}" for s in _scalar_args(plan))
    chunk = [
        "s = tl.program_id(1)",
        "lo = s * chunk",
        "hi = tl.minimum(lo + chunk, R)",
        "col = o * inner + ci",
    ]
    part = [
        *COLUMN_TILE_HEAD,
        *chunk,
        *_col_stats(plan, "lo", "hi", ev),
        "w = s.to(tl.int64) * total + col",
        "tl.store(ws_ptr + w, m, mask=cmask)",
        "tl.store(ws_ptr + n_split * total + w, d, mask=cmask)",
    ]
    combine = [
        *COLUMN_TILE_HEAD,
        *chunk,
        "sj = tl.arange(0, BLOCK_S)",
        "wmask = (sj < n_split)[:, None] & cmask[None, :]",
        "w = sj.to(tl.int64)[:, None] * total + col[None, :]",
        "pm = tl.load(ws_ptr + w, mask=wmask, other=-float('inf'))",
        "pm = tl.where(cmask[None, :], pm, 0.0)",
        "pd = tl.load(ws_ptr + n_split * total + w, mask=wmask, other=0.0)",
        "m = tl.max(pm, 0)",
        "d = tl.sum(pd * tl.exp(pm - m[None, :]), 0)",
        *_col_write(plan, "lo", "hi", ev),
    ]
    common = "R, inner, chunk, n_split, total"
    consts = "BLOCK_R: tl.constexpr, BLOCK_I: tl.constexpr"
    return [
        jit_source("sm_col_part_kernel", f"x_ptr, {_aux_ptrs(plan)}ws_ptr, {common}{sargs}, {consts}", part),
        jit_source(
            "sm_col_split_kernel",
            f"x_ptr, {_aux_ptrs(plan)}out_ptr, ws_ptr, {common}{sargs}, {consts}, BLOCK_S: tl.constexpr",
            combine,
        ),
    ]


def generate(desc: TaskDescription, view: GraphView, plan: SmPlan, params: dict[str, Any]) -> str:
    algo = params["algorithm"]
    ev = f', eviction_policy="{params["EVICT"]}"' if params.get("EVICT") else ""
    warps = int(params["num_warps"])
    # the column kernels' warps: the tuned ones for column-online, 4 when a row algorithm's file
    # meets a middle dim at run time
    col_warps = warps if algo == "column-online" else 4
    kernels = [ewops.HELPERS, _col_kernel(plan, "sm_col_kernel", ev), *_col_split_kernels(plan, ev)]
    if algo == "whole-row":
        kernels.append(_whole_row_kernel(plan, "sm_whole_row_kernel", ev))
        kernels.append(_row_kernel(plan, "online", "sm_row_kernel", ev))
    elif algo in ("online", "three-pass", "column-online", "resident"):
        # column-online still carries the row kernel: the reduced dim may be last at run time.
        kernels.append(
            _row_kernel(plan, "three-pass" if algo == "three-pass" else "online", "sm_row_kernel", ev)
        )
        if algo == "online" and int(params.get("ORDER_CH", 0)):
            kernels.append(_ordered_kernel(plan, "sm_ordered_kernel", ev))
        if algo == "resident":
            kernels.append(_resident_kernel(plan, "sm_resident_kernel", ev))
    else:
        raise Unsupported(f"unknown softmax algorithm {algo}")
    scal = _scalar_args(plan)
    sargs = "".join(f", {s}" for s in scal)
    scall = "".join(f", float({s})" for s in scal)
    block_n = int(params.get("BLOCK_N", 4096))
    aux = [f"a_{lf.name}" for lf in plan.aux]
    aargs = "".join(f", {a}" for a in aux)
    L = [
        f"def launch_softmax(x{aargs}{sargs}):",
        "    x = x.contiguous()",
        *[f"    {a} = {a}.contiguous()" for a in aux],
        *[
            f"    if {a}.shape != x.shape:\n        raise ValueError('softmax prologue operand shape differs from x')"
            for a in aux
        ],
        "    out = torch.empty_like(x)",
        "    if x.numel() == 0:",
        "        return out",
        f"    d = {plan.dim} % x.dim()",
        "    R = x.shape[d]",
        "    inner = 1",
        "    for s in x.shape[d + 1:]:",
        "        inner *= s",
        "    outer = x.numel() // (R * inner)",
        "    if inner > 1:",
        f"        block_i = min({int(params.get('BLOCK_I', 128))}, triton.next_power_of_2(inner))",
        "        block_r = max(1, min(64, 4096 // block_i))",
        "        n_cols = outer * triton.cdiv(inner, block_i)",
        # Few column tiles for the GPU's SMs: the reduced dim is split in chunks as well (at
        # least four row blocks each), partial statistics combined by the writing kernel.
        "        sms = torch.cuda.get_device_properties(x.device).multi_processor_count if x.is_cuda else 4",
        "        split = 1",
        "        if n_cols < 2 * sms:",
        "            split = max(1, min(triton.cdiv(4 * sms, n_cols), R // (4 * block_r)))",
        "        if split > 1:",
        "            chunk = triton.cdiv(triton.cdiv(R, split), block_r) * block_r",
        "            split = triton.cdiv(R, chunk)",
        "            ws = torch.empty((2 * split * outer * inner,), device=x.device, dtype=torch.float32)",
        "            args = (R, inner, chunk, split, outer * inner)",
        f"            sm_col_part_kernel[(n_cols, split)](x{aargs}, ws, *args{scall}, BLOCK_R=block_r, "
        f"BLOCK_I=block_i, num_warps={col_warps})",
        f"            sm_col_split_kernel[(n_cols, split)](x{aargs}, out, ws, *args{scall}, BLOCK_R=block_r, "
        f"BLOCK_I=block_i, BLOCK_S=triton.next_power_of_2(split), num_warps={col_warps})",
        "            return out",
        f"        sm_col_kernel[(n_cols,)](x{aargs}, out, R, inner{scall}, BLOCK_R=block_r, BLOCK_I=block_i, "
        f"num_warps={col_warps})",
        "        return out",
    ]
    if algo == "whole-row":
        rows = int(params.get("ROWS", 0))
        rows_expr = (
            "max(1, min(16, 2048 // block_n))" if rows == 0 else f"max(1, min({rows}, 32768 // block_n))"
        )
        warps_expr = (
            "4 if rows * block_n <= 2048 else (8 if rows * block_n <= 8192 else 16)"
            if warps == 0
            else str(warps)
        )
        L += [
            "    block_n = triton.next_power_of_2(R)",
            f"    if block_n <= {WHOLE_ROW_MAX}:",
            f"        rows = {rows_expr}",
            f"        warps = {warps_expr}",
            f"        sm_whole_row_kernel[(triton.cdiv(outer, rows),)](x{aargs}, out, outer, R{scall}, "
            "ROWS=rows, BLOCK_N=block_n, num_warps=warps)",
            "        return out",
            # Rows too long for registers: the online kernel (same file) streams them.
            f"    sm_row_kernel[(outer,)](x{aargs}, out, R{scall}, BLOCK_N=4096, num_warps=8)",
            "    return out",
        ]
    else:
        # at least 16: the row kernel's chunks start at multiples of 16 (its alignment hint)
        L.append(f"    block_n = max(16, min({block_n}, triton.next_power_of_2(R)))")
        order_ch = int(params.get("ORDER_CH", 0)) if algo == "online" else 0
        lag = int(params.get("ORDER_LAG", 0))
        resident = int(params.get("RESIDENT", 0)) if algo == "resident" else 0
        if resident:
            # warps 0: about 32 elements a thread, 4 to 16 warps
            res_warps = "max(4, min(16, rb // 1024))" if warps == 0 else str(warps)
            L += [
                f"    rb = max(16, min({resident}, triton.next_power_of_2(R)))",
                "    split = triton.cdiv(R, rb)",
                "    sms = torch.cuda.get_device_properties(x.device).multi_processor_count if x.is_cuda else 0",
                "    if outer * split < 2**31 and split <= 4096:",
                "        ws = torch.empty((2, outer, split), device=x.device, dtype=torch.float32)",
                "        cnt = torch.zeros(2 + outer, device=x.device, dtype=torch.int32)",
                # one launch where a row's chunks fit one per SM (_resident_kernel), else two
                "        for ph in (2,) if split <= sms else (0, 1):",
                f"            sm_resident_kernel[(outer * split,)](x{aargs}, out, ws, cnt, outer, R, split{scall}, "
                f"SPLIT_BLOCK=triton.next_power_of_2(split), BLOCK_N=rb, PHASE=ph, num_warps={res_warps})",
                "        return out",
            ]
        if order_ch:
            L += [
                # chunks of about ORDER_CH elements (whole tiles), at most 4096 a row (_order_chunk)
                f"    ch = max(triton.cdiv({order_ch}, block_n), triton.cdiv(R, 4096 * block_n)) * block_n",
                "    split = triton.cdiv(R, ch)",
                # tickets and the grid are int32: beyond, one program a row
                f"    if (outer + {lag}) * 2 * split < 2**31:",
                "        ws = torch.empty((2, outer, split), device=x.device, dtype=torch.float32)",
                "        cnt = torch.zeros(1 + outer, device=x.device, dtype=torch.int32)",
                f"        sm_ordered_kernel[((outer + {lag}) * 2 * split,)](x{aargs}, out, ws, cnt, outer, R, ch, split"
                f"{scall}, SPLIT_BLOCK=triton.next_power_of_2(split), BLOCK_N=block_n, LAG={lag}, "
                f"num_warps={warps})",
                "        return out",
            ]
        L += [
            f"    sm_row_kernel[(outer,)](x{aargs}, out, R{scall}, BLOCK_N=block_n, num_warps={warps or 8})",
            "    return out",
        ]
    # Scalar leaves deduplicated in the same order as _scalar_args.
    seen: list[str] = []
    call = [plan.x.expr] + [lf.expr for lf in plan.aux]
    for lf in plan.prologue.scalar_leaves + plan.epilogue.scalar_leaves:
        if lf.name not in seen:
            seen.append(lf.name)
            call.append(lf.expr)
    kind = "log_softmax" if plan.log else "softmax"
    doc = f"EGG expert: softmax family ({kind}, dim={plan.dim}), algorithm {algo}."
    return assemble(
        desc, "\n\n".join(kernels), "\n".join(L) + "\n", f"return launch_softmax({', '.join(call)})", doc
    )
