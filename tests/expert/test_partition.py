"""The partition planner on captured graphs: group boundaries, values crossing groups, host lines,
namespaced parameters, unsupported ops named with their place; each family on a group's
sub-view. Pure Python: the graphs are captured once in a subprocess (session fixture), and the
candidates of a few compositions are checked under the interpreter."""

from __future__ import annotations

import pytest
from expert_helpers import check_jobs, describe_many, request, run_jobs, stage, task

from graph.records import BestKernel, Candidate, CheckReport
from nodes.expert import ExpertCode
from nodes.expert.graphview import GraphView, Unsupported
from nodes.expert.lowering import lower
from nodes.expert.partition import partition, sub_view

MLP = task(
    "d, h",
    "self.fc1 = nn.Linear(d, h)\nself.fc2 = nn.Linear(h, d)",
    "return self.fc2(F.gelu(self.fc1(x)))",
    "torch.randn(13, 24)",
    "24, 40",
)
# y is read by the GEMM epilogue's group and by the residual add: it crosses groups.
RESIDUAL = task(
    "d",
    "self.fc = nn.Linear(d, d)\nself.ln = nn.LayerNorm(d)",
    "y = self.fc(x)\nreturn self.ln(y) + torch.relu(y)",
    "torch.randn(9, 30)",
    "30",
)
CNN = task(
    "",
    "self.conv = nn.Conv2d(3, 8, 3, padding=1)\nself.bn = nn.BatchNorm2d(8)\nself.fc = nn.Linear(8 * 4 * 4, 5)",
    "x = F.max_pool2d(torch.relu(self.bn(self.conv(x))), 2)\nx = x.view(x.size(0), -1)\nreturn self.fc(x)",
    "torch.randn(2, 3, 8, 8)",
)
SCAN_DIV = task(
    "", "", "return torch.cumsum(x, dim=1) / x.sum(dim=1, keepdim=True)", "torch.rand(6, 33) + 0.1"
)
NORM_MAX = task("", "self.ln = nn.LayerNorm(29)", "return self.ln(x).amax(dim=-1)", "torch.randn(7, 29)")
SORT_IN_MIDDLE = task("", "", "y = torch.relu(x)\nreturn torch.sort(y, dim=1)[0] * 2.0", "torch.randn(4, 9)")
# A shifted-window pad after a norm, cropped back by a slice around a residual, then a module
# pad in another mode: pads are groups of their own between the norm and the tail.
PAD = task(
    "",
    "self.ln = nn.LayerNorm(5)\nself.rp = nn.ReflectionPad2d((1, 2, 2, 1))",
    'y = F.pad(self.ln(x), [0, 0, 2, 1, 1, 3], "constant", 0)\n'
    "y = y[:, 1:-3, 2:-1, :].contiguous() + x\n"
    "return torch.relu(self.rp(y.permute(0, 3, 1, 2))) * 2.0",
    "torch.randn(3, 7, 9, 5)",
)

TASKS = {
    "mlp": MLP,
    "residual": RESIDUAL,
    "cnn": CNN,
    "scan_div": SCAN_DIV,
    "norm_max": NORM_MAX,
    "sort": SORT_IN_MIDDLE,
    "pad": PAD,
}


@pytest.fixture(scope="module")
def pdescs():
    names = list(TASKS)
    return dict(zip(names, describe_many([(TASKS[n], {}) for n in names]), strict=True))


def _groups(desc):
    part = partition(GraphView.of(desc))
    return part, [
        (g.family if not g.host else "host", [desc_op(desc, n) for n in g.nodes]) for g in part.groups
    ]


def desc_op(desc, name):
    return next(n.op for n in desc.op_graph if n.name == name)


def test_mlp_is_two_gemm_groups_with_the_activation_fused(pdescs):
    part, groups = _groups(pdescs["mlp"])
    assert groups == [("gemm", ["linear", "gelu"]), ("gemm", ["linear"])]
    g0, g1 = part.groups
    assert g1.inputs == [g0.output]  # the hidden activation crosses from g0 to g1


def test_a_value_read_by_two_groups_is_materialised_once(pdescs):
    part, groups = _groups(pdescs["residual"])
    fc = next(g for g in part.groups if desc_op(pdescs["residual"], g.output) == "linear")
    readers = [g for g in part.groups if fc.output in g.inputs]
    assert fc.nodes == [fc.output]  # nothing fused past a value other groups also read
    assert len(readers) >= 1 and all(r.index > fc.index for r in readers)
    assert sum(len(g.nodes) for g in part.groups) == len(GraphView.of(pdescs["residual"]).compute_nodes())


def test_views_and_size_arithmetic_are_host_lines(pdescs):
    part, groups = _groups(pdescs["cnn"])
    kinds = [k for k, _ in groups]
    assert kinds.count("host") >= 2  # x.size(0) and x.view(...)
    assert kinds[-1] == "gemm"
    src = ExpertCode().write(request(pdescs["cnn"])).source
    assert ".size(0)" in src and ".reshape(" in src  # the reference's own run-time shapes


def test_reduction_after_norm_and_scan_feeding_a_broadcast(pdescs):
    _, groups = _groups(pdescs["norm_max"])
    assert [k for k, _ in groups] == ["rownorm", "reduction"]
    _, groups = _groups(pdescs["scan_div"])
    fams = sorted(k for k, _ in groups)
    assert "scan" in fams and len(groups) >= 2


def test_pads_are_gather_groups_between_norm_and_tail(pdescs):
    _, groups = _groups(pdescs["pad"])
    kernels = [(k, ops) for k, ops in groups if k != "host"]
    assert [k for k, _ in kernels] == ["rownorm", "pad", "elementwise", "pad", "elementwise"]
    assert [ops for k, ops in kernels if k == "pad"] == [["pad"], ["reflection_pad2d"]]


def test_unsupported_names_the_op_and_its_place(pdescs):
    with pytest.raises(Unsupported) as e:
        partition(GraphView.of(pdescs["sort"]))
    msg = str(e.value)
    assert "`sort`" in msg and "node `sort`" in msg and " of " in msg
    r = ExpertCode().write(request(pdescs["sort"]))
    assert r.source is None and "sort" in (r.unsupported or "") and "combination" not in r.unsupported


def test_params_are_namespaced_per_group_and_tuning_moves_one_group(pdescs):
    code = ExpertCode()
    seed = code.write(request(pdescs["mlp"]))
    keys = set(seed.params)
    assert {"g0.algorithm", "g1.algorithm", "g0.BLOCK_M", "g1.BLOCK_M"} <= keys
    assert seed.params["algorithm"] == "partition"
    best = BestKernel(
        candidate=Candidate(
            id="c", source=seed.source, stage="algorithm", origin=seed.origin, params=seed.params
        ),
        check=CheckReport(accepted=True),
    )
    r = code.write(request(pdescs["mlp"], mode="tune", stage=stage("tiling"), best=best))
    diff = {k for k in r.params if r.params[k] != seed.params.get(k)}
    assert len(diff) == 1 and next(iter(diff)).split(".")[0] in ("g0", "g1")
    assert r.origin.startswith("tune:g")


def test_each_family_matches_its_group_sub_view(pdescs):
    """A group's sub-view on its own: the family sees outside values as leaves and plans it."""
    for name in ("mlp", "residual", "cnn", "norm_max", "scan_div", "pad"):
        view = GraphView.of(pdescs[name])
        for g in partition(view).kernel_groups():
            sv = sub_view(view, g.nodes, g.output)
            assert {sv.origin[n.name] for n in sv.compute_nodes()} == set(g.nodes), (name, g.tag)
            leaves = {sv.origin[k]: lf for k, lf in sv.leaves.items()}
            for r in g.inputs:
                assert r in leaves and leaves[r].expr in (f"v_{r}", view.leaves.get(r, leaves[r]).expr)
            assert g.fam.match(sv) is not None, (name, g.tag)


def test_whole_graph_family_still_wins_where_it_matches(pdescs, descs):
    assert lower(descs["linear_gelu"]).kind == "whole"
    assert lower(pdescs["mlp"]).kind == "partition"


def test_partitioned_candidates_verify(pdescs):
    code = ExpertCode()
    jobs, keys = [], []
    for name in ("mlp", "residual", "cnn", "norm_max", "scan_div", "pad"):
        r = code.write(request(pdescs[name]))
        assert r.source is not None, (name, r.unsupported)
        jobs += check_jobs(TASKS[name], {}, [r], trials=2)
        keys.append(name)
    for name, res in zip(keys, run_jobs(jobs), strict=True):
        assert res.get("ok"), f"{name}: {res.get('error')}\n{res.get('traceback', '')}"


def _attempt(reply, **reports):
    from graph.records import Attempt

    cand = Candidate(id="c", source=reply.source, stage="algorithm", origin=reply.origin, params=reply.params)
    return Attempt(candidate=cand, **reports)


def test_profiler_names_the_group_with_the_most_work(pdescs):
    from graph.records import ProfileReport
    from nodes.expert import ExpertProfiler
    from nodes.models import ProfilerRequest

    seed = ExpertCode().write(request(pdescs["mlp"]))
    req = ProfilerRequest(stage=stage(), desc=pdescs["mlp"], attempt=_attempt(seed), profile=ProfileReport())
    advice, _ = ExpertProfiler().advise(req)
    # fc1 (24 -> 40, GELU) and fc2 (40 -> 24) on 13 rows: fc1 writes the larger output
    assert any(e.startswith("group g0 (gemm) holds ~") for e in advice.evidence), advice.evidence
    assert advice.plan.startswith("tune g0 first")


def test_debugger_and_fix_target_the_group_owning_the_failing_line(pdescs):
    from graph.records import CompileReport
    from nodes.expert import ExpertDebugger
    from nodes.models import DebuggerRequest

    code = ExpertCode()
    seed = code.write(request(pdescs["mlp"]))
    lines = seed.source.splitlines()
    line = next(i + 1 for i, ln in enumerate(lines) if ln.startswith("def g1_"))
    att = _attempt(
        seed, compile=CompileReport(ok=False, error="out of resource: shared memory", error_line=line)
    )
    diag, _ = ExpertDebugger().diagnose(DebuggerRequest(stage=stage(), desc=pdescs["mlp"], attempt=att))
    assert "in group g1's code" in diag.diagnosis
    fix = code.write(request(pdescs["mlp"], mode="fix", failed=att, diagnosis=diag))
    changed = {k.split(".")[0] for k in fix.params if fix.params[k] != seed.params.get(k)}
    assert changed == {"g1"} and fix.origin.endswith("@g1")


def test_refine_swaps_one_groups_algorithm_after_the_exact_refinements(pdescs):
    """A partition's seeds pair each group's k-th algorithm; the refinements then move one group
    (the most expensive first) to another of its algorithms, the others kept, and the swapped
    candidate verifies."""
    from nodes.expert.code import plan_for, units_by_cost
    from nodes.expert.lowering import own

    desc = pdescs["cnn"].model_copy(update={"device": "cuda"})
    code = ExpertCode()
    seed = code.write(request(desc, seed_index=1, n_seeds=4))
    low = plan_for(desc).at(seed.params)  # the lowering the seed came from (maybe the fused one)
    best = BestKernel(
        candidate=Candidate(
            id="c", source=seed.source, stage="algorithm", origin=seed.origin, params=seed.params
        ),
        check=CheckReport(accepted=True),
    )
    tried: list[dict] = []
    swaps = []
    for _ in range(30):
        r = code.write(request(desc, mode="refine", best=best, tried=tried))
        if r.source is None:
            break
        tried.append(r.params)
        if r.origin.startswith("refine:swap:"):
            swaps.append(r)
    assert swaps, "no swap offered"
    algos = lambda p: {u.tag: own(u.tag, p).get("algorithm") for u in low.units}  # noqa: E731
    for r in swaps:
        changed = {t for t, a in algos(r.params).items() if a != algos(seed.params)[t]}
        # one group (or a class of alike groups) on another algorithm, with that algorithm's defaults
        assert changed and r.origin.split("=")[0].removeprefix("refine:swap:").split("+") == sorted(changed)
        assert any(a not in ("library", "library-channels-last") for a in algos(r.params).values())
    # the alternatives of the most expensive group that has any come first
    first = next(u.tag for u in units_by_cost(low) if len(u.algorithms("mixed")) > 1)
    assert swaps[0].origin.startswith(f"refine:swap:{first}"), [s.origin for s in swaps]
    # every swap is a distinct candidate, and the first one verifies
    assert len({str(sorted(s.params.items())) for s in swaps}) == len(swaps)
    # near its roofline the best kernel gets no swap (a job that would buy little)
    from graph.records import ProfileReport

    near = best.model_copy(update={"profile": ProfileReport(roofline_fraction=0.9, bottleneck="memory")})
    r = code.write(request(desc, mode="refine", best=near, tried=tried[: -len(swaps)]))
    assert r.source is None or not r.origin.startswith("refine:swap:")
    # on the CPU nothing is timed: no swap
    cpu = code.write(request(pdescs["cnn"], mode="refine", best=best, tried=tried[: -len(swaps)]))
    assert cpu.source is None or not cpu.origin.startswith("refine:swap:")
    res = run_jobs(check_jobs(TASKS["cnn"], {}, [swaps[0]], trials=2))[0]
    assert res.get("ok"), res.get("error")
