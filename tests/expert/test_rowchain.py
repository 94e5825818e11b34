"""Row chains (several row anchors over the last dim: sums, maxima, cumsum, layer norm, softmax
and the elementwise ops between them) lowered as one kernel that reads each row once: the
rowchain seed comes before the partition's, launches one kernel per forward, compiles for sm_90
and verifies through the real sandboxed check on ragged sizes; rows longer than a block are
left to the partition, and rows that turn out longer at run time take the multi-pass kernel of
the same file."""

from __future__ import annotations

import pytest
from expert_helpers import check_jobs, describe_many, request, run_jobs
from expert_helpers import task as module_task

from graph.records import TaskSpec
from nodes.expert import ExpertCode
from nodes.expert.decompose import decompose
from nodes.expert.families import rowchain
from nodes.expert.graphview import GraphView, Unsupported
from nodes.expert.lowering import lower

toolbox = pytest.importorskip("tools.toolbox")


def task(forward: str, inputs: str, init: str = "", body: str = "", init_args: str = "") -> str:
    return module_task(init, body, forward, inputs, init_args)


LN_AFFINE = "self.norm = nn.LayerNorm(d)\nnn.init.uniform_(self.norm.weight, 0.5, 1.5)\n"
LN_AFFINE += "nn.init.uniform_(self.norm.bias, -1.0, 1.0)"
# the two measured compositions, at small ragged sizes
ONE_KERNEL = {
    "scan_div": task(
        "return torch.cumsum(x, dim=1) / x.sum(dim=1, keepdim=True)", "torch.rand(64, 999) + 0.1"
    ),
    "ln_rowmax": task(
        "return self.norm(x).amax(dim=-1)", "torch.randn(64, 1000)", "d", LN_AFFINE, init_args="1000"
    ),
}
# other compositions of the same ops (row-shaped and per-row outputs, keepdim or not)
OTHERS = {
    "softmax_times_sum": task("return x.softmax(-1) * x.sum(-1, keepdim=True)", "torch.randn(33, 777)"),
    "centered_cumsum": task("return (x - x.mean(-1, keepdim=True)).cumsum(-1)", "torch.randn(4, 7, 301)"),
    "ln_plain_sum": task("return F.layer_norm(x, (301,)).abs().sum(-1)", "torch.randn(3, 11, 301)"),
    "logsoftmax_min": task(
        "y = F.log_softmax(x * 2.0, dim=-1)\nreturn y.amin(-1, keepdim=True) + 1.0", "torch.randn(17, 500)"
    ),
    "ln_softmax_cumsum": task(
        "y = torch.softmax(self.norm(x), dim=-1)\nreturn torch.cumsum(y, dim=-1) - y.amax(-1, keepdim=True)",
        "torch.randn(9, 129)",
        "d",
        LN_AFFINE,
        init_args="129",
    ),
    # the normalised shape written from the input's size: host lines, the chain one group
    # (a plain sum of a layer norm is 0 up to rounding, so its check would hinge on cancellation
    # noise from random inputs: these two sum values that do not cancel)
    "ln_size_arg": task("return (F.layer_norm(x, (x.shape[-1],)) * x).sum(-1)", "torch.randn(5, 257)"),
}
LONG = task("return torch.cumsum(x, dim=1) / x.sum(dim=1, keepdim=True)", "torch.rand(3, 20001) + 0.1")
# a per-row sum without keepdim broadcast against the rows (square, so torch accepts it)
MISALIGNED = task("return x * x.sum(-1) + x.amax(-1, keepdim=True)", "torch.randn(40, 40)")


@pytest.fixture(scope="module")
def descs():
    tasks = {**ONE_KERNEL, **OTHERS, "long": LONG, "misaligned": MISALIGNED}
    return dict(zip(tasks, describe_many([(s, {}) for s in tasks.values()]), strict=True))


def _seeds(desc, n=4, policy="mixed"):
    out = []
    for i in range(n):
        r = ExpertCode().write(request(desc, seed_index=i, n_seeds=n, policy=policy))
        if r.source is None:
            break
        out.append(r)
    return out


def _uses_rowchain(reply) -> bool:
    return any(
        (k == "algorithm" or k.endswith(".algorithm")) and v == rowchain.ALGORITHM
        for k, v in reply.params.items()
    )


def _check(name: str, source: str) -> None:
    tb = toolbox.Toolbox()
    src = {**ONE_KERNEL, **OTHERS, "long": LONG}[name]
    chk = tb.check(TaskSpec(path=f"{name}.py", name=name, source=src), source, policy="mixed")
    assert chk.accepted, (name, chk.reasons)
    assert len(chk.shapes_checked) >= 2, chk.shapes_checked


@pytest.mark.parametrize("name", list(ONE_KERNEL))
def test_measured_chains_are_one_launch_first_and_verify(name, descs):
    seeds = _seeds(descs[name])
    first, rest = seeds[0], seeds[1:]
    assert (first.family, first.algorithm) == ("rowchain", rowchain.ALGORITHM), first.note
    # the partition's seeds stay as the alternatives
    assert rest and all(r.family == "partition" and not _uses_rowchain(r) for r in rest)
    # one kernel launched per forward (the file's multi-pass kernel is for rows past a block)
    res = run_jobs(
        [dict(j, kind="compile") for j in check_jobs(ONE_KERNEL[name], {}, [first])], interpret=False
    )
    assert res[0].get("ok"), res[0].get("error")
    assert [k["kernel"] for k in res[0]["kernels"]] == ["rn_whole_row_kernel"], res[0]["kernels"]
    _check(name, first.source)


@pytest.mark.parametrize("name", list(OTHERS))
def test_other_compositions_take_the_chain_and_verify(name, descs):
    first = _seeds(descs[name], 2)[0]
    assert _uses_rowchain(first), (name, first.params)
    _check(name, first.source)


def test_strict_policy_keeps_the_chain_seed(descs):
    # all Triton: the strict policy offers it too, before the partition
    seeds = _seeds(descs["scan_div"], 2, policy="strict")
    assert seeds[0].family == "rowchain" and seeds[1].family == "partition"


def test_rows_longer_than_a_block_are_left_to_the_partition(descs):
    view = GraphView.of(decompose(descs["long"]))
    with pytest.raises(Unsupported, match="do not fit one block"):
        rowchain.match(view)
    assert lower(descs["long"]).fused is None
    seeds = _seeds(descs["long"])
    assert seeds and not any(_uses_rowchain(r) for r in seeds)
    _check("long", seeds[0].source)


def test_a_per_row_value_is_not_broadcast_along_the_row(descs):
    view = GraphView.of(decompose(descs["misaligned"]))
    with pytest.raises(Unsupported, match="without its reduced dims"):
        rowchain.match(view)
    assert all(not _uses_rowchain(r) for r in _seeds(descs["misaligned"]))


@pytest.mark.parametrize("name", ["scan_div", "ln_rowmax", "ln_softmax_cumsum", "logsoftmax_min"])
def test_rows_past_a_block_at_run_time_take_the_multi_pass_kernel(name, descs):
    """The whole-row branch switched off and small tiles: the multi-pass kernel streams each row
    in several ragged tiles, cumsums carried from tile to tile, per-row results stored once."""
    first = _seeds(descs[name], 1)[0]
    src = first.source
    assert src.count(f"if block <= {rowchain.WHOLE_ROW_MAX}:") == 1
    src = src.replace(f"if block <= {rowchain.WHOLE_ROW_MAX}:", "if block <= 0:")
    assert src.count("BLOCK_N=max(16, min(4096,") == 1
    src = src.replace("BLOCK_N=max(16, min(4096,", "BLOCK_N=max(16, min(128,")
    _check(name, src)


def test_row_warps_tune_the_whole_row_kernel(descs):
    low = lower(descs["scan_div"])
    params = dict(low.seed(0, "mixed"), ROW_WARPS=2)
    assert low.valid(params)
    src = low.generate(descs["scan_div"], params)
    assert "        warps = 2\n" in src
    _check("scan_div", src)
