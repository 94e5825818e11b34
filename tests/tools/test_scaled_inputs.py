"""The checker's scaled trial (x * 3 - 0.5) scales get_inputs()'s fresh tensors in place, so a
multi-GB input is not held twice over, with the same bits as before, and never touches memory
that is not this call's own input: a tensor two inputs share, a task's module-level tensor, an
expanded view, a tensor that requires grad."""

from types import SimpleNamespace

import pytest

torch = pytest.importorskip("torch")

from tools.worker.runner import scaled  # noqa: E402


def _old(xs):
    return [x * 3.0 - 0.5 if isinstance(x, torch.Tensor) and x.is_floating_point() else x for x in xs]


def test_fresh_inputs_are_scaled_in_place_to_the_same_bits():
    xs = [torch.randn(64, 33), torch.randint(0, 9, (5,)), 2.5, torch.randn(7, dtype=torch.float64)]
    want = _old([x.clone() if isinstance(x, torch.Tensor) else x for x in xs])
    ptrs = [x.data_ptr() for x in xs if isinstance(x, torch.Tensor)]
    got = scaled(xs)
    assert [x.data_ptr() for x in got if isinstance(x, torch.Tensor)] == ptrs  # no copy made
    for g, w in zip(got, want, strict=True):
        if isinstance(w, torch.Tensor):
            assert g.dtype == w.dtype and torch.equal(g, w)
        else:
            assert g == w
    assert got[1] is xs[1]  # integer tensors are not scaled


def test_shared_module_level_expanded_and_grad_tensors_are_copied_not_changed():
    base = torch.randn(6, 4)
    glob = torch.randn(8)
    module = SimpleNamespace(X=glob, CACHE={"k": torch.randn(3)}, N=4)
    expanded = torch.randn(1, 5).expand(4, 5)
    grad = torch.randn(3, requires_grad=True)
    xs = [base, base[2:], glob, expanded, grad, module.CACHE["k"]]
    before = [x.detach().clone() for x in xs]
    got = scaled(xs, module)
    for x, b in zip(xs, before, strict=True):
        assert torch.equal(x.detach(), b)  # the originals are untouched
    for g, b in zip(got, before, strict=True):
        assert torch.equal(g.detach(), b * 3.0 - 0.5)
    assert got[0].data_ptr() != base.data_ptr() and got[2].data_ptr() != glob.data_ptr()
