"""Tuning moves over alike groups (nodes/expert/code.py alike_units): groups of one family with
the same shapes and parameters, as an unrolled recurrent cell's per-step GEMMs, change together
in one move; a group of other shapes or other parameters moves alone. The moved candidate passes
the sandboxed check under the interpreter."""

from __future__ import annotations

from expert_helpers import check_jobs, describe_many, request, run_jobs, stage, task
from fakes import best_from_reply

from nodes.expert import ExpertCode
from nodes.expert.lowering import lower, own

# Three steps of one cell (the same Linear on the same shapes) and a head of other shapes.
CELL = task(
    "d",
    "self.cell = nn.Linear(d, d)\nself.head = nn.Linear(d, 5)",
    "h = x\nfor _ in range(3):\n    h = torch.tanh(self.cell(h)) + h\nreturn self.head(h)",
    "torch.randn(12, 40)",
    "40",
)


def _gemm_tags(desc, params) -> tuple[list[str], str]:
    """The cell's three GEMM groups and the head's, from the lowering at `params`."""
    low = lower(desc, "mixed").at(params)
    gemms = [u for u in low.units if u.name == "gemm"]
    assert len(gemms) == 4, [(u.tag, u.name) for u in low.units]
    n = {u.tag: u.plan.n for u in gemms}
    cell = sorted(t for t, v in n.items() if v == 40)
    head = [t for t, v in n.items() if v == 5]
    assert len(cell) == 3 and len(head) == 1, n
    return cell, head[0]


def test_alike_groups_move_together_and_the_candidate_is_correct():
    (desc,) = describe_many([(CELL, {})])
    code = ExpertCode()
    seed = code.write(request(desc))
    cell, head = _gemm_tags(desc, seed.params)
    assert len({str(sorted(own(t, seed.params).items())) for t in cell}) == 1, "the seed's cell GEMMs differ"
    r = code.write(request(desc, mode="tune", stage=stage("tiling"), best=best_from_reply(seed)))
    changed = {k.split(".")[0] for k in r.params if r.params[k] != seed.params.get(k)}
    assert changed == set(cell), (changed, r.origin)
    assert len({str(sorted(own(t, r.params).items())) for t in cell}) == 1
    assert own(head, r.params) == own(head, seed.params)
    assert r.origin.startswith("tune:" + "+".join(cell) + "."), r.origin
    assert "move together" in r.note
    (res,) = run_jobs(check_jobs(CELL, {}, [r], trials=2))
    assert res.get("ok"), f"{res.get('error')}\n{res.get('traceback', '')}"


def test_a_group_with_other_parameters_moves_alone():
    (desc,) = describe_many([(CELL, {})])
    code = ExpertCode()
    seed = code.write(request(desc))
    cell, _ = _gemm_tags(desc, seed.params)
    # the last step's GEMM already took another tile: it is no longer alike the other two
    k = own(cell[-1], seed.params)["BLOCK_K"]
    best = best_from_reply(seed, **{f"{cell[-1]}.BLOCK_K": 16 if k != 16 else 64})
    rounds = [
        code.write(request(desc, mode="tune", stage=stage("tiling"), best=best, seed_index=i, n_seeds=6))
        for i in range(6)
    ]
    moved = [
        {k.split(".")[0] for k in r.params if r.params[k] != best.candidate.params.get(k)} for r in rounds
    ]
    assert set(cell[:2]) in moved, moved
    assert all(m in ({cell[-1]},) or cell[-1] not in m for m in moved), moved
