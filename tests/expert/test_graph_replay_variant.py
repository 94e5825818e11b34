"""The mapping stage's host variant: a forward of many kernel groups replayed as one CUDA graph
(nodes/expert/hostgraph.py). On a GPU it is the first variant of the mapping round, with the
other moves after it; its file keeps the kernels and wraps forward in graph_call; it passes the
real sandboxed check (on the CPU the helper takes its eager path, which is the same kernels);
and it is not offered for a forward of few groups, for random ops, on the CPU, or twice."""

from __future__ import annotations

import pytest
from expert_helpers import describe_many, request, stage, task
from fakes import best_from_reply

from graph.records import Attempt, Candidate, CheckReport, CompileReport, Diagnosis, TaskSpec, TimingReport
from nodes.expert import ExpertCode
from nodes.expert.hostgraph import GRAPH_REPLAY, HOST_PARAM

toolbox = pytest.importorskip("tools.toolbox")

NET = task(
    "c",
    "self.c1 = nn.Conv2d(3, c, 3, padding=1)\nself.bn = nn.BatchNorm2d(c)\nself.c2 = nn.Conv2d(c, c, 3, padding=1)",
    # an average pool: a max pool would join the norm's group (batchnorm's pooled pass), and the
    # forward must keep four groups
    "y = F.relu(self.bn(self.c1(x)))\ny = F.avg_pool2d(y, 2)\ny = torch.tanh(self.c2(y)) + y\n"
    "return torch.softmax(y.flatten(1), dim=-1)",
    "torch.randn(2, 3, 18, 14)",
    "8",
)
NOISY = NET.replace(
    "return torch.softmax(y.flatten(1), dim=-1)",
    "return torch.softmax(y.flatten(1), dim=-1) + torch.rand(2, 504, device=x.device)",
)
SMALL = task("", "", "return torch.softmax(x, dim=-1)", "torch.randn(8, 100)")


@pytest.fixture(scope="module")
def descs():
    names = {"net": NET, "noisy": NOISY, "small": SMALL}
    found = describe_many([(s, {}) for s in names.values()])
    return {k: d.model_copy(update={"device": "cuda"}) for k, d in zip(names, found, strict=True)}


def _round(desc, best, name="mapping", n=3):
    code = ExpertCode()
    return [
        code.write(request(desc, mode="tune", stage=stage(name), best=best, seed_index=i, n_seeds=n))
        for i in range(n)
    ]


def test_many_groups_get_the_graph_replay_first_in_the_mapping_round(descs):
    seed = ExpertCode().write(request(descs["net"], seed_index=0, n_seeds=4))
    first, second, third = _round(descs["net"], best_from_reply(seed))
    assert first.origin == f"tune:{HOST_PARAM}={GRAPH_REPLAY}", first.origin
    assert first.params == {**seed.params, HOST_PARAM: GRAPH_REPLAY}
    assert "kernel groups launched one by one" in first.note
    src = first.source
    assert "def forward_eager(self, x):" in src and "return graph_call(self, self.forward_eager, (x,))" in src
    assert src.count("def graph_call(") == 1 and src.count("@triton.jit") == seed.source.count("@triton.jit")
    # the round's other variants are the coordinate moves, as without the host variant
    assert second.origin.startswith("tune:g") and third.origin.startswith("tune:g")
    assert second.origin != third.origin
    # tuned further (tiling, memory), a graph-replay best keeps replaying
    replay_best = best_from_reply(first)
    tiled = _round(descs["net"], replay_best, "tiling", 2)
    assert all(r.params.get(HOST_PARAM) == GRAPH_REPLAY and "graph_call" in r.source for r in tiled)
    # and the mapping round does not offer it again
    again = _round(descs["net"], replay_best, "mapping", 1)[0]
    assert again.origin != first.origin and again.params.get(HOST_PARAM) == GRAPH_REPLAY


def test_a_timing_that_shows_the_gpu_busy_is_not_given_the_graph_variant(descs):
    """Where the stage timing measured the forward's CUDA-graph replay, the variant is offered
    only when the call took well over that (host-bound), and its note quotes both figures."""
    seed = ExpertCode().write(request(descs["net"], seed_index=0, n_seeds=4))
    busy = best_from_reply(seed).model_copy(
        update={"timing": TimingReport(measured=True, candidate_ms=0.60, cudagraph_ms=0.56)}
    )
    assert HOST_PARAM not in _round(descs["net"], busy, n=1)[0].params
    waiting = busy.model_copy(
        update={"timing": TimingReport(measured=True, candidate_ms=6.48, cudagraph_ms=0.56)}
    )
    first = _round(descs["net"], waiting, n=1)[0]
    assert first.params.get(HOST_PARAM) == GRAPH_REPLAY
    assert "a call takes 6.4800 ms, its CUDA-graph replay 0.5600 ms" in first.note
    # no replay measured (fewer launches than the probe needs): a long call of few launches
    # gains nothing from a replay, a short one may
    long_call = busy.model_copy(
        update={"timing": TimingReport(measured=True, candidate_ms=5.0, candidate_launches=6)}
    )
    assert HOST_PARAM not in _round(descs["net"], long_call, n=1)[0].params
    short = busy.model_copy(
        update={"timing": TimingReport(measured=True, candidate_ms=0.5, candidate_launches=6)}
    )
    assert _round(descs["net"], short, n=1)[0].params.get(HOST_PARAM) == GRAPH_REPLAY


def test_the_graph_variant_passes_the_sandboxed_check(descs):
    seed = ExpertCode().write(request(descs["net"], seed_index=0, n_seeds=4))
    first = _round(descs["net"], best_from_reply(seed), n=1)[0]
    chk = toolbox.Toolbox().check(
        TaskSpec(path="net.py", name="net", source=NET), first.source, policy="mixed"
    )
    assert chk.accepted, chk.reasons
    assert len(chk.shapes_checked) >= 2


@pytest.mark.parametrize("name", ["noisy", "small"])
def test_not_offered_for_random_ops_or_few_groups(descs, name):
    seed = ExpertCode().write(request(descs[name], seed_index=0, n_seeds=4))
    assert seed.source is not None, seed.note
    for r in _round(descs[name], best_from_reply(seed), n=2):
        assert r.source is None or HOST_PARAM not in r.params, r.origin


def test_a_measured_host_bound_forward_of_few_groups_gets_the_graph_replay(descs):
    """Few groups can still launch many kernels (a recurrent layer: one per time step): where the
    stage timing measured the call well over its replay, the variant is offered anyway."""
    seed = ExpertCode().write(request(descs["small"], seed_index=0, n_seeds=4))
    best = best_from_reply(seed)
    host = best.model_copy(
        update={
            "timing": TimingReport(measured=True, candidate_ms=3.0, cudagraph_ms=1.0, candidate_launches=1024)
        }
    )
    first = _round(descs["small"], host, n=1)[0]
    assert first.params == {**seed.params, HOST_PARAM: GRAPH_REPLAY}, first.origin
    assert "1024 kernel launches from Python each call" in first.note
    assert "a call takes 3.0000 ms, its CUDA-graph replay 1.0000 ms" in first.note
    # the algorithm stage's refinement replays it first too
    code = ExpertCode()
    refine = code.write(request(descs["small"], mode="refine", best=host))
    assert refine.params.get(HOST_PARAM) == GRAPH_REPLAY, refine.origin
    # a replay barely faster than the call is no reason
    busy = best.model_copy(
        update={
            "timing": TimingReport(measured=True, candidate_ms=1.1, cudagraph_ms=1.0, candidate_launches=1024)
        }
    )
    assert HOST_PARAM not in _round(descs["small"], busy, n=1)[0].params


def test_not_offered_on_the_cpu(descs):
    cpu = descs["net"].model_copy(update={"device": "cpu"})
    seed = ExpertCode().write(request(cpu, seed_index=0, n_seeds=4))
    first = _round(cpu, best_from_reply(seed), n=1)[0]
    assert HOST_PARAM not in first.params, first.origin


def _capture_failed(reply, stage_name: str) -> Attempt:
    """`reply`'s candidate, compiled, whose check failed in the graph capture."""
    return Attempt(
        candidate=Candidate(
            id="g", source=reply.source, stage=stage_name, origin=reply.origin, params=reply.params
        ),
        compile=CompileReport(ok=True),
        check=CheckReport(accepted=False, reasons=["run.error: trial 2: RuntimeError: capture failed"]),
    )


def test_a_failed_graph_variant_is_not_repaired(descs):
    """The replay of a verified kernel failing (a host sync in forward, say) is not a kernel fault:
    fix mode gives up at once instead of spending the fix budget on tiles of the same kernels. A
    failed variant of a kernel that already replays is repaired as usual."""
    seed = ExpertCode().write(request(descs["net"], seed_index=0, n_seeds=4))
    graph = _round(descs["net"], best_from_reply(seed), n=1)[0]
    failed = _capture_failed(graph, "mapping")
    diag = Diagnosis(rule="runtime", diagnosis="x", fix_plan="y")
    best = best_from_reply(seed)
    fix = request(descs["net"], mode="fix", stage=stage("mapping"), best=best, failed=failed, diagnosis=diag)
    r = ExpertCode().write(fix)
    assert r.source is None and "CUDA-graph replay" in r.note
    # a tiling variant of a replaying best kernel that failed is repaired as any other
    replaying = best_from_reply(graph, stage="mapping")
    tiled = _round(descs["net"], replaying, "tiling", 1)[0]
    failed_tile = failed.model_copy(
        update={
            "candidate": failed.candidate.model_copy(update={"params": tiled.params, "source": tiled.source})
        }
    )
    r = ExpertCode().write(fix.model_copy(update={"best": replaying, "failed": failed_tile}))
    assert r.source is not None and r.params.get(HOST_PARAM) == GRAPH_REPLAY, r.note


def test_a_measured_host_bound_seed_is_replayed_first_by_the_algorithm_stage(descs):
    """With the replay measured well under the call, the algorithm stage's refinement offers the
    replay at once (a run out of time may never reach the mapping stage); without that
    measurement the refinements are the algorithm's own."""
    seed = ExpertCode().write(request(descs["net"], seed_index=0, n_seeds=4))
    plain = best_from_reply(seed)
    host = plain.model_copy(
        update={"timing": TimingReport(measured=True, candidate_ms=6.48, cudagraph_ms=0.56)}
    )
    r = ExpertCode().write(request(descs["net"], mode="refine", best=host))
    assert r.origin == f"refine:{HOST_PARAM}={GRAPH_REPLAY}" and r.params[HOST_PARAM] == GRAPH_REPLAY
    assert r.note.startswith("algorithm: ")
    r = ExpertCode().write(request(descs["net"], mode="refine", best=plain))
    assert r.source is None or HOST_PARAM not in r.params


def _seeds(desc, n):
    code = ExpertCode()
    return [code.write(request(desc, seed_index=i, n_seeds=n)) for i in range(n)]


def test_a_forward_of_little_gpu_work_gets_a_replayed_seed(descs):
    """Before anything ran, a forward whose launches cost more than its estimated GPU work (the
    task's flops and bytes at the GPU's rates) gets the first seed replayed as a CUDA graph among
    the algorithm stage's seeds: in a slot no plain seed fills, else the second. Not offered with
    one seed, for a forward of much GPU work, without the task's counts, or on the CPU."""
    # the describe job's counts at these sizes: a few MFLOP and bytes, microseconds of GPU work
    net = descs["net"].model_copy(update={"flops": 4e6, "bytes_moved": 2e6})
    plain = [r for r in _seeds(net.model_copy(update={"device": "cpu"}), 8) if r.source is not None]
    n = len(plain)
    assert n >= 2  # the net's groups have several algorithms each
    wide = _seeds(net, n + 1)  # one slot more than the plain seeds
    assert [r.params for r in wide[:n]] == [r.params for r in plain]
    assert wide[n].origin == f"seed:{HOST_PARAM}={GRAPH_REPLAY}"
    assert wide[n].params == {**plain[0].params, HOST_PARAM: GRAPH_REPLAY}
    assert "graph_call(self, self.forward_eager" in wide[n].source
    assert "more than the" in wide[n].note and "estimated to take" in wide[n].note
    full = _seeds(net, n)  # every slot taken: the replay is the second, the last plain seed waits
    assert full[0].params == plain[0].params and full[1].params.get(HOST_PARAM) == GRAPH_REPLAY
    assert [r.params for r in full[2:]] == [r.params for r in plain[1 : n - 1]]
    assert _seeds(net, 1)[0].params == plain[0].params
    heavy = net.model_copy(update={"flops": 1e12})  # some 15 ms of fp32 work: launches do not matter
    assert all(HOST_PARAM not in (r.params or {}) for r in _seeds(heavy, n + 1))
    uncounted = net.model_copy(update={"flops": None, "bytes_moved": None})
    assert all(HOST_PARAM not in (r.params or {}) for r in _seeds(uncounted, n + 1))


def test_a_failed_replayed_seed_is_not_repaired(descs):
    graph = _seeds(descs["net"].model_copy(update={"flops": 4e6, "bytes_moved": 2e6}), 2)[1]
    assert graph.params.get(HOST_PARAM) == GRAPH_REPLAY
    diag = Diagnosis(rule="runtime", diagnosis="x", fix_plan="y")
    r = ExpertCode().write(
        request(descs["net"], mode="fix", failed=_capture_failed(graph, "algorithm"), diagnosis=diag)
    )
    assert r.source is None and "CUDA-graph replay" in r.note


def _seed(branch: int, ms: float, replay_ms: float | None) -> Attempt:
    cand = Candidate(id=f"s{branch}", source="x", stage="algorithm", origin="seed", branch=branch)
    t = TimingReport(measured=True, candidate_ms=ms, cudagraph_ms=replay_ms, noise=0.01)
    return Attempt(candidate=cand, compile=CompileReport(ok=True), check=CheckReport(accepted=True), timing=t)


def test_seed_selection_counts_a_host_bound_seed_at_its_replay_when_the_mapping_stage_replays():
    """The algorithm stage picks among seeds by their timing; a seed whose call took 1.25x its
    CUDA-graph replay or more competes at the replay's time when the expert's mapping stage
    (which offers that replay) runs, and at its launched time otherwise."""
    from nodes.boundary import replay_reachable, select_seed

    gpu_bound = _seed(0, 0.329, 0.325)  # NCHW seed: its GPU work is the call
    host_bound = _seed(1, 0.370, 0.204)  # channels-last seed: less GPU work, launches cost more
    near = _seed(2, 0.300, 0.260)  # 1.15x its replay: not host-bound, launched time stands
    assert select_seed([gpu_bound, host_bound], replay=True).candidate.id == "s1"
    assert select_seed([gpu_bound, host_bound], replay=False).candidate.id == "s0"
    assert select_seed([gpu_bound, near], replay=True).candidate.id == "s2"
    assert replay_reachable(near.timing) is near.timing
    assert replay_reachable(host_bound.timing).candidate_ms == 0.204
    assert replay_reachable(_seed(3, 0.4, None).timing).candidate_ms == 0.4
    # the record itself keeps what was measured
    assert host_bound.timing.candidate_ms == 0.370


def test_replay_is_possible_only_where_the_mapping_stage_can_offer_it(descs):
    """Seed selection uses a replay's time only for tasks whose forward can be replayed at all."""
    from nodes.expert.hostgraph import replay_possible

    assert replay_possible(descs["net"])
    assert not replay_possible(descs["noisy"])  # draws random numbers each call
    assert not replay_possible(descs["net"].model_copy(update={"device": "cpu"}))
    assert not replay_possible(None)
