"""Elementwise/activation chains: one fused pass over the output (or, as a distinct seed, one
kernel per op). Broadcast operands are read in place: a tensor whose non-1 dims form one
contiguous block of the output's dims is indexed as (i // inner) % size, a one-element tensor is
loaded once, anything else is refused at launch with a clear error.

A triangular mask the op graph reports as a constant (`tri_mask`: `~torch.tril(torch.ones(T, T))`
over the output's last two dims, e.g. a segment-sum's `masked_fill(~mask, -inf)`) is computed
from each element's row and column in the kernel, at the run's own sizes: it is never stored."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from graph.records import OpNode, TaskDescription

from .. import ewops
from ..chain import Chain, collect_chain
from ..graphview import GraphView, Leaf, Unsupported, assemble, flit
from ..kernelfiles import jit_source, kernel_source

BCAST_HELPER = kernel_source("ew.py", "_bcast")


@dataclass
class EwPlan:
    chain: Chain
    out_node: str
    # tri_mask nodes the chain reads: computed from (row, col) of the output's last two dims
    masks: list[OpNode] = field(default_factory=list)


def match(view: GraphView) -> EwPlan | None:
    nodes = view.compute_nodes()
    masks = [n for n in nodes if n.op == "tri_mask"]
    ops = [n for n in nodes if n.op != "tri_mask"]
    if not ops or not all(ewops.is_elementwise(n) for n in ops):
        return None
    out = view.resolve(view.output)
    if masks:
        shape = view.nodes[out].shape or []
        for m in masks:
            if shape[-2:] != [m.kwargs.get("rows"), m.kwargs.get("cols")] or len(m.shape or []) > len(shape):
                raise Unsupported("a triangular mask that is not over the output's last two dims")
    chain = collect_chain(view, ops, internal={m.name for m in masks})
    if not chain.tensor_leaves:
        raise Unsupported("elementwise graph without tensor inputs")
    return EwPlan(chain=chain, out_node=out, masks=masks)


def _mask_lines(masks: list[OpNode], env: dict[str, str]) -> list[str]:
    """Each tri_mask as a value of (row, col) of the output's last two dims (fill or 0)."""
    if not masks:
        return []
    lines = ["tri_col = offs % tri_cols", "tri_row = (offs // tri_cols) % tri_rows"]
    for m in masks:
        d = int(m.kwargs["diagonal"])
        cmp = ">=" if m.kwargs.get("upper") else "<="
        fill = flit(m.kwargs.get("fill", 1.0))
        var = f"m_{m.name}"
        lines.append(f"{var} = tl.where(tri_col - tri_row {cmp} {d}, {fill}, 0.0)")
        env[m.name] = var
    return lines


def algorithms(plan: EwPlan) -> list[str]:
    algos = ["fused"]
    if len(plan.chain.nodes) > 1:
        algos.append("kernel-per-op")
    return algos


def _kernel(kname: str, chain: Chain, params: dict[str, Any], masks: list[OpNode] | None = None) -> str:
    """One fused kernel over the flattened output for `chain`."""
    masks = masks or []
    tl_args = ["out_ptr"]
    for lf in chain.tensor_leaves:
        P = f"l_{lf.name}"
        tl_args += [f"{P}_ptr", f"{P}_inner", f"{P}_size"]
    tl_args += [f"l_{lf.name}_val" for lf in chain.scalar_leaves]
    if masks:
        tl_args += ["tri_rows", "tri_cols"]
    tl_args.append("n_elements")
    tl_args += [f"l_{lf.name}_MODE: tl.constexpr" for lf in chain.tensor_leaves]
    tl_args.append("BLOCK: tl.constexpr")
    evict = params.get("EVICT", "")
    ev = f', eviction_policy="{evict}"' if evict else ""

    def inner(masked: bool) -> list[str]:
        """The chain over one block of offsets; `masked` only for the block the end cuts."""
        env: dict[str, str] = {}
        m = ", mask=mask, other=0.0" if masked else ""
        loads: list[str] = []
        for lf in chain.tensor_leaves:
            P = f"l_{lf.name}"
            v = f"x_{lf.name}"
            loads += [
                f"if {P}_MODE == 1:",
                f"    {v} = tl.load({P}_ptr).to(tl.float32)",
                f"elif {P}_MODE == 2:",
                f"    {v} = tl.load({P}_ptr + (offs // {P}_inner) % {P}_size{m}).to(tl.float32)",
                f"elif {P}_MODE == 3:",
                f"    {v} = tl.load({P}_ptr + (offs // {P}_inner) * {P}_size + offs % {P}_inner{m}{ev}).to(tl.float32)",
                "else:",
                f"    {v} = tl.load({P}_ptr + offs{m}{ev}).to(tl.float32)",
            ]
            env[lf.name] = v
        for lf in chain.scalar_leaves:
            env[lf.name] = f"l_{lf.name}_val"
        loads += _mask_lines(masks, env)
        body, last = chain.body(env)
        sm = ", mask=mask" if masked else ""
        return [*loads, *body, f"tl.store(out_ptr + offs, {last}.to(out_ptr.dtype.element_ty){sm})"]

    # Whole blocks load and store without a mask: a mask against a size that is not a multiple
    # of 16 (Triton's specialisation) makes every access scalar, a ragged size's whole tensor
    # then moves at a fraction of the bandwidth. Only the last block is masked.
    split = [
        "if start + BLOCK <= n_elements:",
        *["    " + ln for ln in inner(False)],
        "else:",
        "    mask = offs < n_elements",
        *["    " + ln for ln in inner(True)],
    ]
    if params.get("PERSISTENT"):
        head = [
            # int64 start/step: grid-stride offsets can pass 2**31 on large tensors
            "first = tl.program_id(0).to(tl.int64) * BLOCK",
            "step = tl.num_programs(0).to(tl.int64) * BLOCK",
            "for start in range(first, n_elements, step):",
            "    offs = start + tl.arange(0, BLOCK)",
        ]
        lines = head + ["    " + ln for ln in split]
    else:
        lines = [
            "start = tl.program_id(0).to(tl.int64) * BLOCK",
            "offs = start + tl.arange(0, BLOCK)",
            *split,
        ]
    return jit_source(kname, ", ".join(tl_args), lines)


def _launcher(kname: str, chain: Chain, params: dict[str, Any], masks: list[OpNode] | None = None) -> str:
    tensors = [f"l_{lf.name}" for lf in chain.tensor_leaves]
    scalars = [f"l_{lf.name}" for lf in chain.scalar_leaves]
    sig = ", ".join(tensors + scalars)
    lines = [
        f"def launch_{kname}({sig}):",
        f"    shape = torch.broadcast_shapes({', '.join(f'{t}.shape' for t in tensors)},)",
        f"    out = torch.empty(shape, device={tensors[0]}.device, dtype={tensors[0]}.dtype)",
        "    n = out.numel()",
        "    if n == 0:",
        "        return out",
    ]
    call_args = ["out"]
    consts = []
    for t in tensors:
        lines.append(f"    {t}_c, {t}_mode, {t}_inner, {t}_size = _bcast({t}, shape)")
        call_args += [f"{t}_c", f"{t}_inner", f"{t}_size"]
        consts.append(f"{t}_MODE={t}_mode")
    call_args += [f"float({s})" for s in scalars]
    if masks:
        call_args += ["shape[-2]", "shape[-1]"]
    call_args.append("n")
    block = int(params["BLOCK"])
    if params.get("PERSISTENT"):
        lines.append(
            "    sms = torch.cuda.get_device_properties(out.device).multi_processor_count "
            "if out.is_cuda else 4"
        )
        lines.append(f"    grid = (min(triton.cdiv(n, {block}), sms * 8),)")
    else:
        lines.append(f"    grid = (triton.cdiv(n, {block}),)")
    lines.append(
        f"    {kname}[grid]({', '.join(call_args)}, {', '.join(consts)}, BLOCK={block}, "
        f"num_warps={int(params['num_warps'])})"
    )
    lines.append("    return out")
    return "\n".join(lines) + "\n"


def generate(desc: TaskDescription, view: GraphView, plan: EwPlan, params: dict[str, Any]) -> str:
    algo = params["algorithm"]
    kernels = [ewops.HELPERS]
    launchers = [BCAST_HELPER]
    fwd: list[str] = []
    if algo == "fused":
        kernels.append(_kernel("ew_fused_kernel", plan.chain, params, plan.masks))
        launchers.append(_launcher("ew_fused_kernel", plan.chain, params, plan.masks))
        args = [lf.expr for lf in plan.chain.tensor_leaves + plan.chain.scalar_leaves]
        fwd.append(f"return launch_ew_fused_kernel({', '.join(args)})")
    elif algo == "kernel-per-op":
        # Each op is its own kernel: intermediates go through memory (the baseline the fused
        # seed should beat; also the safest variant when the fused kernel fails to compile).
        produced: dict[str, Leaf] = {}
        masks = {m.name: m for m in plan.masks}
        for i, n in enumerate(plan.chain.nodes):
            sub = _single_op_chain(view, n, produced, set(masks))
            own = [masks[r] for r in dict.fromkeys(view.refs(n)) if r in masks]
            kname = f"ew_op{i}_kernel"
            kernels.append(_kernel(kname, sub, params, own))
            launchers.append(_launcher(kname, sub, params, own))
            args = [
                (f"t_{lf.name}" if lf.name in produced else lf.expr)
                for lf in sub.tensor_leaves + sub.scalar_leaves
            ]
            fwd.append(f"t_{n.name} = launch_{kname}({', '.join(args)})")
            produced[n.name] = Leaf(n.name, f"t_{n.name}", n.shape)
        fwd.append(f"return t_{plan.chain.nodes[-1].name}")
    else:
        raise Unsupported(f"unknown elementwise algorithm {algo}")
    ops = ", ".join(n.op for n in plan.chain.nodes)
    doc = f"EGG expert: elementwise family, algorithm {algo} ({ops})."
    return assemble(desc, "\n\n".join(kernels), "\n\n".join(launchers), "\n".join(fwd), doc)


def _single_op_chain(view: GraphView, n: OpNode, produced: dict[str, Leaf], masks: set[str]) -> Chain:
    chain = Chain(nodes=[n])
    seen: set[str] = set()
    for r in view.refs(n):
        if r in seen or r in masks:
            continue
        seen.add(r)
        leaf = produced.get(r) or view.leaves.get(r)
        if leaf is None:
            raise Unsupported(f"{n.op} reads {r}")
        (chain.scalar_leaves if leaf.is_scalar else chain.tensor_leaves).append(leaf)
    if not chain.tensor_leaves:
        raise Unsupported(f"{n.op} has no tensor operand")
    return chain


def refinements(plan: EwPlan, params: dict[str, Any]) -> list[tuple[str, dict[str, Any], str]]:
    if params["algorithm"] == "kernel-per-op":
        return [
            (
                "refine:fuse-chain",
                dict(params, algorithm="fused"),
                "one kernel for the whole chain: intermediates stay in registers, one read and one write",
            )
        ]
    return []
