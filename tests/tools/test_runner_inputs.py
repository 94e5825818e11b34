"""The runner's input copies during a checked call (tools/worker/runner.py op_call): the forward
runs with this call's inputs and the pristine copy alive and nothing more, also when the call
refills the last call's tensors with new values (the new values' own tensors are gone by then:
an 8 GiB input peaked at 24 GiB in the runner on the H200); a call on new tensors makes them while
the last call's are alive, so they never take the same addresses."""

import gc
import types
import weakref

import pytest

torch = pytest.importorskip("torch")

from tools.worker import runner as runner_mod  # noqa: E402


def _runner(monkeypatch, made: list, alive_in_forward: list, ptrs: list):
    r = runner_mod.Runner("cpu", slab=0, reply_fd=-1)
    r.mod = types.SimpleNamespace(__name__="egg_candidate_x")

    def inputs(seed, transform):
        x = torch.full((256,), float(seed))
        made.append(weakref.ref(x))
        return [x]

    class Model(torch.nn.Module):
        def forward(self, x):
            gc.collect()
            alive_in_forward.append(sum(w() is not None for w in made))
            ptrs.append(x.data_ptr())
            return x * 2

    r._inputs = inputs
    r.model = Model()
    monkeypatch.setattr(runner_mod.channel, "write_tensors", lambda slab, ts: [{} for _ in ts])
    return r


def test_a_refilled_call_runs_with_two_input_copies_and_new_tensors_get_new_addresses(monkeypatch):
    made: list = []
    alive: list[int] = []
    ptrs: list[int] = []
    r = _runner(monkeypatch, made, alive, ptrs)
    r.op_call({"input_seed": 1})
    r.op_call({"input_seed": 2})  # new tensors
    r.op_call({"input_seed": 3, "reuse": True})  # the same tensors, new values
    # made by _inputs and alive in the forward: this call's inputs only (the pristine copy is
    # clone_inputs', not counted here); the refill's own tensors are gone
    assert alive == [1, 1, 1], alive
    assert ptrs[1] != ptrs[0] and ptrs[2] == ptrs[1]
    assert float(r.inputs[0][0]) == 3.0


def test_fingerprints_catch_a_changed_or_moved_word_and_nothing_else():
    from tools.worker.common import fingerprint, same_fingerprint

    x = torch.randn(1000, 37)
    f = fingerprint(x, chunk=4096)  # several chunks
    assert same_fingerprint(f, fingerprint(x.clone(), chunk=4096))
    changed = x.clone()
    changed[500, 3] = torch.nextafter(changed[500, 3], torch.tensor(10.0))  # one ulp
    assert not same_fingerprint(f, fingerprint(changed, chunk=4096))
    swapped = x.clone()
    swapped[[0, 999]] = swapped[[999, 0]]  # the same words, moved
    assert not same_fingerprint(f, fingerprint(swapped, chunk=4096))
    odd = torch.arange(7, dtype=torch.uint8)  # 7 bytes: hashed a byte at a time
    assert same_fingerprint(fingerprint(odd), fingerprint(odd.clone()))
    bumped = odd.clone()
    bumped[6] += 1
    assert not same_fingerprint(fingerprint(odd), fingerprint(bumped))
    strided = x.t()  # not contiguous: a copy stands in
    assert same_fingerprint(fingerprint(strided), fingerprint(strided.clone()))
    assert not same_fingerprint(fingerprint(strided), fingerprint(changed.t()))


def test_the_mutation_claim_without_a_pristine_copy(monkeypatch):
    """Inputs not sent back: the runner claims them unchanged by fingerprints. A forward that
    writes its input is claimed mutated; one that does not, unchanged."""
    made: list = []
    r = _runner(monkeypatch, made, [], [])
    assert r.op_call({"input_seed": 1})["mutated"] is False

    class Writes(torch.nn.Module):
        def forward(self, x):
            x.add_(1.0)
            return x * 2

    r.model = Writes()
    assert r.op_call({"input_seed": 2})["mutated"] is True


def test_a_fingerprint_of_an_unaligned_view_hashes_its_bytes():
    """Before and after a forward the runner hashes the same tensor, so the same words."""
    from tools.worker.common import fingerprint

    base = torch.randn(9, dtype=torch.float64).to(torch.float16)
    view = base[1:]  # 8 halves at a 2-byte offset: not viewable as 4-byte words
    f = fingerprint(view)
    assert fingerprint(view) == f
    view[3] += 1
    assert fingerprint(view) != f
