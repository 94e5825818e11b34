"""The checker's consecutive candidate calls never hold two calls' tensors at once (the GPU peak
of a check on a multi-GB task would double, and the memory admission with it)."""

import gc
import weakref

import pytest

torch = pytest.importorskip("torch")

from tools.worker import check  # noqa: E402


class _Task:
    sizes: dict = {}


def _checker(monkeypatch, alive_at_reference: list[int]):
    ck = check.Checker.__new__(check.Checker)
    ck.tolerance, ck.steps, ck.shapes, ck.degenerate = None, {}, [], None
    ck._cuda, ck.memory = False, {}
    ck.stats = {"max_abs": 0.0, "max_rel": 0.0, "ref_err": 0.0, "widened": False, "notes": []}
    made: list[weakref.ref] = []

    def reference(task, weight_seed, inputs):
        gc.collect()
        alive_at_reference.append(sum(r() is not None for r in made))
        native = [inputs[0] * 2]
        full = [native[0].double()]
        made.extend(weakref.ref(t) for t in (*inputs, *native, *full))
        return native, full

    def call(name, seed, inputs, native, **kw):
        out = [native[0].clone()]
        made.append(weakref.ref(out[0]))
        return out

    ck._staged = {}
    monkeypatch.setattr(ck, "stage", lambda task, weight_seed, overrides=None: None, raising=False)
    monkeypatch.setattr(ck, "ask", lambda *a, **k: {"ok": True}, raising=False)
    monkeypatch.setattr(ck, "inputs", lambda task, seed, transform: [torch.randn(64)], raising=False)
    monkeypatch.setattr(ck, "reference", reference, raising=False)
    monkeypatch.setattr(ck, "call", call, raising=False)
    return ck


def test_sequence_calls_free_each_calls_tensors(monkeypatch):
    alive: list[int] = []
    ck = _checker(monkeypatch, alive)
    ck.sequence(_Task(), {}, [1, 2, 3])
    assert alive == [0, 0, 0]
    assert [s["trial"] for s in ck.shapes] == ["1", "2", "3 (same tensors, new values)"]


def test_trials_free_each_trials_tensors(monkeypatch):
    alive: list[int] = []
    ck = _checker(monkeypatch, alive)
    for k in range(3):
        ck.trial(_Task(), str(k), k, {})
    assert alive == [0, 0, 0]
    assert [s["trial"] for s in ck.shapes] == ["0", "1", "2"]
    assert {"judge.reference", "judge.reference.first", "judge.compare"} <= set(ck.steps)
