"""Host-side launch helper: a forward of many launches replayed as one CUDA graph.

A forward of tens of small kernels and library calls (ResNet-style networks at small batch) costs
the host more than the GPU: on the H200 a ResNet-18 forward of about 60 launches took 6.5 ms of
wall time for 0.56 ms of GPU work. `graph_call` runs such a forward as one CUDA graph replay.
Generators paste these functions into a candidate (kernelfiles.kernel_source); ModelNew's
forward then reads `return graph_call(self, self.forward_eager, (x, ...))`, or replays all but
the launches that make its outputs and launches those itself (`graph_call(..., copy_outputs=False)`
for the prefix, `graph_fresh` on what the tail returns; nodes/expert/hostgraph.py).
"""

import torch


def graph_call(module, forward, args, max_graphs=8, max_seen=4, copy_outputs=True):
    """forward(*args), replayed as a CUDA graph captured on these very input tensors.

    A graph reads its inputs where the capture found them, so it is captured on the caller's own
    tensors and replayed only for a call whose tensors have the same addresses, shapes, strides
    and dtypes (and the same scalars): the caller's memory is read in place, with no copy into
    buffers of the graph's own (the squeeze-excite candidate's 103 MB input: a copy reads and
    writes 206 MB, about 0.05 ms at the H200's bandwidth, half of its 0.097 ms replay). Inputs
    at addresses not seen before run eagerly, and addresses seen again (a loop over the same
    tensors, or the caching allocator handing back the same blocks) are captured then: the first
    call of a signature runs eagerly (it compiles the kernels, and it is that call's answer),
    the second call on the same tensors captures and replays. Every replay returns copies of the
    graph's outputs, so a caller never holds memory the next replay writes. With
    copy_outputs=False a replay returns the graph's own output tensors instead, saving a read
    and a write of each (for the squeeze-excite candidate's 103 MB output, the same half of its
    replay again): for a prefix of the forward whose outputs the caller consumes at once on the
    same stream (the next replay overwrites them only after that work), and the caller must not
    hand those tensors, or views of them, out (see graph_fresh). One replay per call, so state
    the forward updates on the GPU (batch norm's running statistics) moves as it would eagerly.
    The eager path is taken, and the graphs dropped, when the module changed since the capture
    (a parameter or buffer replaced or moved, a train/eval switch); it is taken always for CPU
    tensors, with autograd recording (a replay would not rebuild its graph), inside another
    capture, and where a replay could differ from an eager call: a forward that writes into its
    inputs, or outputs that are not tensors. One module's calls must not overlap from several
    threads (they share the graphs' output buffers). At most max_graphs graphs are kept (the
    oldest go first)."""
    sig = graph_signature(args)
    if sig is None or torch.is_grad_enabled() or torch.cuda.is_current_stream_capturing():
        return forward(*args)
    if not hasattr(module, "egg_graphs"):
        module.egg_graphs = {}  # (signature, addresses) -> the captured graph and its outputs
        module.egg_signatures = {}  # signature -> replayable?, addresses seen lately, guards
    tensors = [a for a in args if isinstance(a, torch.Tensor)]
    ptrs = tuple(t.data_ptr() for t in tensors)
    known = module.egg_signatures.get(sig)
    if known is not None and not graph_guards_hold(known["guards"]):
        # the module changed: every graph of this signature read the old parameters or flags
        for key in [k for k in module.egg_graphs if k[0] == sig]:
            del module.egg_graphs[key]
        del module.egg_signatures[sig]
        known = None
    if known is None:
        before = [t._version for t in tensors]
        out = forward(*args)
        replayable = before == [t._version for t in tensors] and graph_outputs(out) is not None
        module.egg_signatures[sig] = {"guards": graph_guards(module), "replay": replayable, "seen": [ptrs]}
        return out
    if not known["replay"]:
        return forward(*args)
    entry = module.egg_graphs.get((sig, ptrs))
    if entry is None:
        if ptrs not in known["seen"]:
            known["seen"] = [*known["seen"], ptrs][-max_seen:]
            return forward(*args)
        while len(module.egg_graphs) >= max_graphs:
            # the oldest graph and its memory pool go first
            module.egg_graphs.pop(next(iter(module.egg_graphs)))
        graph = torch.cuda.CUDAGraph()
        torch.cuda.synchronize()
        with torch.cuda.graph(graph):
            out = forward(*args)
        entry = module.egg_graphs[(sig, ptrs)] = {"graph": graph, "out": out}
    entry["graph"].replay()
    out = entry["out"]
    if not copy_outputs:
        return out
    if isinstance(out, torch.Tensor):
        return out.clone()
    return type(out)(o.clone() for o in out)


def graph_fresh(out, prefix):
    """`out` (a tensor, or a tuple or list of them) with a copy in place of each tensor that
    shares memory with a tensor of `prefix` (what graph_call returned with copy_outputs=False):
    a replay's outputs live in the graph's memory pool, which the next replay overwrites, so a
    tail that hands one of them (or a view of it) back must hand back a copy. An eager call's
    prefix tensors are that call's own and would not need it; the generated tail starts with a
    launch, so an output in the prefix's memory is rare either way."""
    pool = {p.untyped_storage().data_ptr() for p in prefix if isinstance(p, torch.Tensor)}

    def fresh(t):
        if isinstance(t, torch.Tensor) and t.untyped_storage().data_ptr() in pool:
            return t.clone()
        return t

    if isinstance(out, (tuple, list)):
        return type(out)(fresh(o) for o in out)
    return fresh(out)


def graph_signature(args):
    """What a captured graph is specialised on, or None when the call cannot be replayed: any
    tensor not on a GPU, or an argument that is neither a tensor nor a plain scalar."""
    sig = []
    for a in args:
        if isinstance(a, torch.Tensor):
            if not a.is_cuda:
                return None
            sig.append((tuple(a.shape), a.stride(), a.dtype, a.device))
        elif a is None or isinstance(a, (bool, int, float, str)):
            sig.append((type(a), a))
        else:
            return None
    return tuple(sig) if sig else None


def graph_outputs(out):
    """The output tensors when `out` is a tensor or a tuple or list of tensors, else None."""
    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, (tuple, list)) and all(isinstance(o, torch.Tensor) for o in out):
        return list(out)
    return None


def graph_guards(module):
    """Every submodule's train/eval flag and every parameter and buffer, with its storage, as
    the capture saw them."""
    flags = []
    tensors = []
    for _, m in module.named_modules():
        flags.append((m, m.training))
        for table in (m._parameters, m._buffers):
            for name, t in table.items():
                if t is not None:
                    tensors.append((table, name, t, t.data_ptr()))
    return flags, tensors


def graph_guards_hold(guards):
    flags, tensors = guards
    for m, training in flags:
        if m.training != training:
            return False
    for table, name, t, ptr in tensors:
        if table.get(name) is not t or t.data_ptr() != ptr:
            return False
    return True
