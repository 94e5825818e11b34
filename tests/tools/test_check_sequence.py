"""The check's call plan: the first trials are repeated calls on one instance (the stale-result
check), a wrong repeated call is `runtime.stale` only when a fresh instance gets it right, the
second shape's reference is its own probe, and the degenerate flags come from a trial's reference
(no forward of the reference or the candidate is spent on anything else)."""

import pytest

torch = pytest.importorskip("torch")

from tools.worker import check  # noqa: E402


class _Task:
    sizes: dict = {}


class _Fake:
    """A checker whose reference doubles its input and whose candidate is scripted per call:
    `wrong(instance, call_index_on_instance, reuse)` says when the candidate answers wrong."""

    def __init__(self, monkeypatch, wrong, reference_fails=lambda task: False):
        ck = check.Checker.__new__(check.Checker)
        ck.tolerance, ck.steps, ck.shapes, ck.degenerate = None, {}, [], None
        ck._cuda, ck.memory = False, {}
        ck.stats = {"max_abs": 0.0, "max_rel": 0.0, "ref_err": 0.0, "widened": False, "notes": []}
        ck.device = "cpu"
        ck._staged = {}
        ck.stage = lambda task, weight_seed, overrides=None: None  # the reference is faked below
        self.ck, self.instance, self.calls_on_instance = ck, 0, 0
        self.references = self.forwards = 0
        self.log: list[tuple[str, int, bool]] = []

        def ask(op, **kw):
            assert op == "build"
            self.instance += 1
            self.calls_on_instance = 0
            return {"ok": True}

        def reference(task, weight_seed, inputs):
            if reference_fails(task):
                raise RuntimeError("shape mismatch in the reference")
            self.references += 1
            native = [inputs[0] * 2]
            return native, [native[0].double()]

        def call(name, seed, inputs, native, **kw):
            self.forwards += 1
            self.calls_on_instance += 1
            reuse = bool(kw.get("reuse"))
            self.log.append((name, self.instance, reuse))
            bad = wrong(self.instance, self.calls_on_instance, reuse)
            return [native[0] + 1.0 if bad else native[0].clone()]

        monkeypatch.setattr(ck, "ask", ask, raising=False)
        monkeypatch.setattr(ck, "inputs", lambda task, seed, transform: [torch.randn(64)], raising=False)
        monkeypatch.setattr(ck, "reference", reference, raising=False)
        monkeypatch.setattr(ck, "call", call, raising=False)


def test_sequence_is_one_instance_with_new_then_refilled_tensors(monkeypatch):
    f = _Fake(monkeypatch, wrong=lambda inst, k, reuse: False)
    f.ck.sequence(_Task(), {}, [1, 2, 3])
    assert [(n, i, r) for n, i, r in f.log] == [
        ("1", 1, False),
        ("2", 1, False),
        ("3 (same tensors, new values)", 1, True),
    ]
    assert f.references == f.forwards == 3


def test_cached_result_on_a_repeated_call_is_stale(monkeypatch):
    # right on the first call of every instance, wrong on later ones: a cache
    f = _Fake(monkeypatch, wrong=lambda inst, k, reuse: k > 1)
    with pytest.raises(check.Rejected) as e:
        f.ck.sequence(_Task(), {}, [1, 2, 3])
    assert e.value.reason.startswith("runtime.stale: "), e.value.reason
    assert "(mismatch: trial 2 output 0" in e.value.reason, e.value.reason
    assert f.log[-1] == ("2 (fresh instance)", 2, False)


def test_wrong_kernel_on_a_repeated_call_is_a_plain_mismatch(monkeypatch):
    # wrong on the second call whatever the instance (e.g. input-dependent): not stale
    f = _Fake(monkeypatch, wrong=lambda inst, k, reuse: inst > 1 or k == 2)
    with pytest.raises(check.Rejected) as e:
        f.ck.sequence(_Task(), {}, [1, 2, 3])
    assert e.value.reason.startswith("mismatch: trial 2 (fresh instance)"), e.value.reason


def test_wrong_first_call_is_a_mismatch_without_a_rerun(monkeypatch):
    f = _Fake(monkeypatch, wrong=lambda inst, k, reuse: True)
    with pytest.raises(check.Rejected) as e:
        f.ck.sequence(_Task(), {}, [1, 2, 3])
    assert e.value.reason.startswith("mismatch: trial 1 "), e.value.reason
    assert f.forwards == 1


def test_second_shape_reference_is_the_probe(monkeypatch):
    # the first option (all sizes changed) does not run the reference; the second does
    tried: list[dict] = []

    class _Loaded:
        def __init__(self, sizes):
            self.sizes = sizes
            tried.append(sizes)

        def inputs(self, seed, device):
            return [torch.randn(8)]

    monkeypatch.setattr(check, "load_task", lambda src, sizes: _Loaded(dict(sizes)))
    f = _Fake(monkeypatch, wrong=lambda inst, k, reuse: False, reference_fails=lambda t: len(tried) == 1)

    class _Job:
        task_source = ""

    assert f.ck.second_shape(_Job(), {"N": 64, "M": 32}, 7)
    assert tried == [{"N": 47, "M": 23}, {"N": 47, "M": 32}]
    # one reference and one candidate forward for the trial, none for the probe
    assert f.references == f.forwards == 1
    assert f.ck.shapes[-1]["trial"] == "second-shape" and f.ck.shapes[-1]["sizes"] == {"N": 47, "M": 32}


def test_second_shape_skipped_when_no_option_runs(monkeypatch):
    class _Loaded:
        sizes: dict = {}

        def inputs(self, seed, device):
            raise ValueError("bad size")

    monkeypatch.setattr(check, "load_task", lambda src, sizes: _Loaded())
    f = _Fake(monkeypatch, wrong=lambda inst, k, reuse: False)

    class _Job:
        task_source = ""

    assert not f.ck.second_shape(_Job(), {"N": 64}, 7)
    assert f.forwards == 0


def test_degenerate_flags_come_from_the_first_reference(monkeypatch):
    f = _Fake(monkeypatch, wrong=lambda inst, k, reuse: False)
    monkeypatch.setattr(f.ck, "inputs", lambda task, seed, transform: [torch.zeros(64)], raising=False)
    f.ck.sequence(_Task(), {}, [1, 2, 3])
    assert f.ck.degenerate == ["output 0 is constant (0)"]
    assert f.references == 3
