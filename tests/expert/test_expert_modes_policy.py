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
