"""Host-side launch helper: a forward of many launches replayed as one CUDA graph.

A forward of tens of small kernels and library calls (ResNet-style networks at small batch) costs
the host more than the GPU: on the H200 a ResNet-18 forward of about 60 launches took 6.5 ms of
wall time for 0.56 ms of GPU work. `graph_call` runs such a forward as one CUDA graph replay.
Generators paste these functions into a candidate (kernelfiles.kernel_source); ModelNew's
forward then reads `return graph_call(self, self.forward_eager, (x, ...))`.
"""

import torch


def graph_call(module, forward, args, max_graphs=8):
    """forward(*args), replayed as a CUDA graph once it has run eagerly for the same inputs'
    shapes, strides, dtypes and scalars.

    The first call of a signature runs eagerly: it compiles the kernels, and it is that call's
    answer. The second captures forward on copies of the inputs and replays it; every later call
    copies its inputs into those buffers, replays, and returns copies of the graph's outputs, so
    a caller never holds memory the next replay writes. One replay per call, so state the
    forward updates on the GPU (batch norm's running statistics) moves as it would eagerly.
    The eager path is taken, and the graph dropped, when the module changed since the capture
    (a parameter or buffer replaced or moved, a train/eval switch); it is taken always for CPU
    tensors, with autograd recording (a replay would not rebuild its graph), inside another
    capture, and where a replay could differ from an eager call: a
    forward that writes into its inputs, or outputs that are not tensors. One module's calls must
    not overlap from several threads (they share the graph's input and output buffers)."""
    sig = graph_signature(args)
    if sig is None or torch.is_grad_enabled() or torch.cuda.is_current_stream_capturing():
        return forward(*args)
    if not hasattr(module, "egg_graphs"):
        module.egg_graphs = {}
    entry = module.egg_graphs.get(sig)
    if entry is not None and not graph_guards_hold(entry["guards"]):
        entry = None
    if entry is None:
        if sig not in module.egg_graphs and len(module.egg_graphs) >= max_graphs:
            # at most max_graphs signatures: the oldest one's graph and memory pool go first
            module.egg_graphs.pop(next(iter(module.egg_graphs)))
        tensors = [a for a in args if isinstance(a, torch.Tensor)]
        before = [t._version for t in tensors]
        out = forward(*args)
        replayable = before == [t._version for t in tensors] and graph_outputs(out) is not None
        module.egg_graphs[sig] = {"guards": graph_guards(module), "graph": None, "eager": not replayable}
        return out
    if entry["eager"]:
        return forward(*args)
    if entry["graph"] is None:
        static = [a.clone() if isinstance(a, torch.Tensor) else a for a in args]
        graph = torch.cuda.CUDAGraph()
        torch.cuda.synchronize()
        with torch.cuda.graph(graph):
            entry["out"] = forward(*static)
        entry["graph"] = graph
        entry["static"] = static
    for dst, src in zip(entry["static"], args, strict=True):
        if isinstance(src, torch.Tensor):
            dst.copy_(src)
    entry["graph"].replay()
    out = entry["out"]
    if isinstance(out, torch.Tensor):
        return out.clone()
    return type(out)(o.clone() for o in out)


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
