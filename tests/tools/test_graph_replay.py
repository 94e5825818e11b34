"""CUDA-graph replays of a candidate's forward, without a GPU.

1. The judge counts a replay as launching the kernels its graph captured, so a forward that
   replays its own kernels passes `runtime.no_launch` and one that replays PyTorch ops alone does
   not (tools/worker/common.py install_graph_hooks), on a stand-in graph class.
2. The candidate-side helper (nodes/expert/kernels/graphreplay.py graph_call): eager on the first
   call of a signature and on tensors at addresses not seen before, capture on the caller's own
   tensors when their addresses come again, replay alone after that; a copy of the outputs each
   call (the graph's own outputs with copy_outputs=False, for a prefix whose outputs the caller
   consumes at once); eager again when a parameter is replaced, the module switches train/eval,
   autograd records, or the forward writes into its inputs. A stand-in graph re-runs what was
   "captured" on the captured buffers, as a real replay does.

Both run in child processes (Triton's interpreter, CPU torch); the GPU test in
tests/expert/test_expert_gpu.py replays real graphs.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

from childproc import script_json

ROOT = Path(__file__).resolve().parents[2]

HOOKS = textwrap.dedent(
    """
    import json
    import torch
    import triton
    import triton.language as tl
    from tools.worker import common

    @triton.jit
    def bump(x_ptr, n, BLOCK: tl.constexpr):
        offs = tl.arange(0, BLOCK)
        m = offs < n
        tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=m) + 1.0, mask=m)

    class StandInGraph:
        def capture_begin(self, *a, **k):
            pass

        def capture_end(self, *a, **k):
            pass

        def replay(self, *a, **k):
            pass

    common.install_graph_hooks(StandInGraph)
    x = torch.zeros(8)
    own, torch_only = StandInGraph(), StandInGraph()
    with common.launch_log() as during:
        own.capture_begin()
        bump[(1,)](x, 8, BLOCK=8)
        own.capture_end()
        # the call's own log is still the active one (the capture's log records the same
        # launches, so it compares equal to it)
        assert len(common._ACTIVE) == 1 and common._ACTIVE[0] is during
    torch_only.capture_begin()
    x.add_(1.0)
    torch_only.capture_end()
    with common.launch_log() as replays:
        own.replay()
        own.replay()
    with common.launch_log() as torch_replay:
        torch_only.replay()
    with common.launch_log(record_args=True) as recording:
        own.replay()
    print(json.dumps({
        "during_capture": during.count(), "replays": replays.count(),
        "names": [l.name for l in replays.launches], "torch_only": torch_replay.count(),
        "recording": recording.count(), "outside_any_log": len(common._ACTIVE),
    }))
    """
)

REPLAY = textwrap.dedent(
    """
    import contextlib, json
    import torch
    import torch.nn as nn
    from nodes.expert.kernels import graphreplay as gr

    # Stand-ins for a GPU: any tensor may be replayed; a graph re-runs its captured thunk.
    gr.graph_signature = lambda args: tuple((tuple(a.shape), a.dtype) for a in args)
    CAPTURING = []

    class StandInGraph:
        def replay(self):
            self.thunk()

    @contextlib.contextmanager
    def capture(g):
        CAPTURING.append(g)
        try:
            yield
        finally:
            CAPTURING.pop()

    torch.cuda.CUDAGraph = StandInGraph
    torch.cuda.graph = capture
    torch.cuda.synchronize = lambda: None
    torch.cuda.is_current_stream_capturing = lambda: False

    runs = []

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.w = nn.Parameter(torch.full((4,), 2.0))
            self.mutate = False
            self.copy_outputs = True

        def forward_eager(self, x):
            runs.append(1)
            if self.mutate:
                x.add_(0.0)
            y = x * self.w + 1.0
            if CAPTURING:  # what a real capture records: the same work on the same buffers
                w = self.w
                CAPTURING[-1].thunk = lambda: y.copy_(x * w + 1.0)
            return y

        def forward(self, x):
            return gr.graph_call(self, self.forward_eager, (x,), copy_outputs=self.copy_outputs)

    def call(net, x, v=None):
        # net(x) after filling x with v (the same tensor, new values): whether forward's
        # Python ran and whether the answer is right
        if v is not None:
            x.fill_(float(v))
        n = len(runs)
        with torch.no_grad():
            out = net(x)
        ok = torch.equal(out, x * net.w.detach() + 1.0)
        return {"ran_eagerly": len(runs) - n, "right": bool(ok), "out": out}

    def full(v):
        return torch.full((4,), float(v))

    net = Net()
    steps = {}
    xa, xb = full(1), full(2)  # both alive: two addresses
    steps["first"] = call(net, xa)
    steps["new_address"] = call(net, xb)
    steps["seen_again"] = call(net, xb, 3)  # captured on xb itself and replayed
    third = steps["seen_again"]
    fourth = call(net, xb, 4)  # replayed: reads xb's new values in place
    steps["replay"] = fourth
    statics = [e["out"] for e in net.egg_graphs.values()]
    steps["copied"] = all(fourth["out"].data_ptr() != s.data_ptr() for s in statics)
    steps["fresh_outputs"] = {"ran_eagerly": 0, "right": bool(torch.equal(third["out"], torch.full((4,), 7.0)))}
    steps["other_seen"] = call(net, xa, 5)  # xa was seen by the first call: its own graph
    steps["other_replay"] = call(net, xa, 6)
    steps["back_to_b"] = call(net, xb, 7)
    unseen = [full(v) for v in range(8, 13)]  # all alive: five new addresses
    steps["unseen"] = [call(net, x)["ran_eagerly"] for x in unseen]
    steps["unseen_right"] = all(call(net, x)["right"] for x in unseen[:1])
    with torch.no_grad():
        net.w.mul_(0.5)  # in place: the graph reads the same memory
    steps["weights_in_place"] = call(net, xb, 13)
    net.w = nn.Parameter(torch.full((4,), 3.0))  # replaced: eager, then captured anew
    steps["replaced"] = call(net, xb, 14)
    steps["replaced_next"] = call(net, xb, 15)
    steps["replaced_replay"] = call(net, xb, 16)
    net.eval()
    steps["eval"] = call(net, xb, 17)
    x = full(18)
    n = len(runs)
    net(x)  # autograd records: eager
    steps["grad"] = {"ran_eagerly": len(runs) - n, "right": True}
    many = Net()
    for n in range(1, 12):  # eleven signatures: the oldest graphs are dropped
        x = torch.ones(n, 4)
        with torch.no_grad():
            many(x)
            many(x)
    steps["kept_graphs"] = len(many.egg_graphs)
    prefix = Net()
    prefix.copy_outputs = False  # a prefix's outputs, consumed at once: the graph's own tensors
    xp = full(1)
    steps["prefix_first"] = call(prefix, xp)
    captured = call(prefix, xp, 2)
    replayed = call(prefix, xp, 3)
    steps["prefix_replay"] = replayed
    static = next(iter(prefix.egg_graphs.values()))["out"]
    steps["prefix_static"] = captured["out"] is static and replayed["out"] is static
    writer = Net()
    writer.mutate = True
    xw = full(1)
    steps["writer"] = [call(writer, xw, v)["ran_eagerly"] for v in (1, 2, 3)]
    print(json.dumps({k: ({kk: vv for kk, vv in v.items() if kk != "out"} if isinstance(v, dict) else v)
                      for k, v in steps.items()}))
    """
)


def _child(script: str) -> dict:
    return script_json(script, env={"TRITON_INTERPRET": "1"})


def test_a_replay_counts_the_kernels_its_graph_captured():
    r = _child(HOOKS)
    assert r["during_capture"] == 1  # the capture itself is a launch of the call that captures
    assert r["replays"] == 2 and r["names"] == ["bump", "bump"]
    assert r["torch_only"] == 0  # a graph of PyTorch ops launches none of the candidate's kernels
    assert r["recording"] == 0  # a recording log (compile) only takes launches it can compile
    assert r["outside_any_log"] == 0


def test_graph_call_replays_a_graph_captured_on_the_callers_own_tensors():
    r = _child(REPLAY)
    assert all(v["right"] for k, v in r.items() if isinstance(v, dict)), r
    assert r["unseen_right"]
    assert r["first"]["ran_eagerly"] == 1  # the first call of a signature is eager
    assert r["new_address"]["ran_eagerly"] == 1  # tensors at an address not seen before: eager
    assert r["seen_again"]["ran_eagerly"] == 1  # the capture runs forward's Python once
    assert r["replay"]["ran_eagerly"] == 0  # replayed, reading the tensor's new values in place
    assert r["fresh_outputs"]["right"]  # the third call's output survived the fourth replay
    assert r["copied"]  # a replay returns copies, not the graph's own output
    assert r["other_seen"]["ran_eagerly"] == 1 and r["other_replay"]["ran_eagerly"] == 0
    assert r["back_to_b"]["ran_eagerly"] == 0  # both graphs kept
    assert r["unseen"] == [1, 1, 1, 1, 1]  # never captured on addresses seen once
    assert r["weights_in_place"]["ran_eagerly"] == 0
    assert r["replaced"]["ran_eagerly"] == 1 and r["replaced_next"]["ran_eagerly"] == 1
    assert r["replaced_replay"]["ran_eagerly"] == 0
    assert r["eval"]["ran_eagerly"] == 1
    assert r["grad"]["ran_eagerly"] == 1
    assert r["writer"] == [1, 1, 1]  # a forward that writes into its inputs is never replayed
    assert r["kept_graphs"] == 8
    # copy_outputs=False: the replay hands back the graph's own output tensor, no copy
    assert r["prefix_first"]["ran_eagerly"] == 1 and r["prefix_replay"]["ran_eagerly"] == 0
    assert r["prefix_static"]
