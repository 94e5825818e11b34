"""Under the strict policy the expert never offers a library-call algorithm."""

from expert_helpers import request

from nodes.expert import ExpertCode


def _algorithms(desc, policy: str) -> list[str]:
    code = ExpertCode()
    out = []
    for i in range(8):
        r = code.write(request(desc, seed_index=i, n_seeds=8, policy=policy))
        if r.source is None:
            break
        out.append(r.algorithm)
    return out


def test_strict_policy_drops_library_seeds(descs):
    mixed = _algorithms(descs["linear_gelu"], "mixed")
    strict = _algorithms(descs["linear_gelu"], "strict")
    assert any(a.startswith("library") for a in mixed)
    assert strict and not any(a.startswith("library") for a in strict)
    assert strict == [a for a in mixed if not a.startswith("library")]


def test_attention_scale_follows_the_run_time_head_dim(descs):
    """A constant 1/sqrt(head_dim) scale is computed from the run-time head dim, not baked in:
    the checker's second-shape trial changes HEAD_DIM (and with it Model's scale)."""
    desc = descs["attention"]
    reply = ExpertCode().write(request(desc, seed_index=0, n_seeds=2))
    assert reply.source is not None
    assert "1.0 / math.sqrt(q.shape[-1])" in reply.source
    assert repr(1 / 24**0.5) not in reply.source
