"""torch.compile's warm-up in the final benchmark: Inductor's compile holds no GPU lock, its
config benchmarks hold it exclusively, and the hook is gone afterwards (tools/worker/timing.py)."""

import contextlib

import pytest

from tools.worker.timing import compile_warmup_lock

CachingAutotuner = pytest.importorskip("torch._inductor.runtime.triton_heuristics").CachingAutotuner


def test_only_the_autotuners_benchmarks_hold_the_lock_exclusively(monkeypatch):
    events: list[str] = []

    @contextlib.contextmanager
    def lock(exclusive: bool, step: str | None = None):
        events.append(f"take {'exclusive' if exclusive else 'shared'}")
        yield
        events.append("release")

    def stub(self, *args, **kwargs):
        events.append("benchmark configs")
        return {"cfg": 1.0}

    monkeypatch.setattr(CachingAutotuner, "benchmark_all_configs", stub)
    out: dict = {}
    with compile_warmup_lock(lock, out):
        events.append("compile")  # Inductor's CPU work: no lock
        assert CachingAutotuner.benchmark_all_configs(object()) == {"cfg": 1.0}
    assert events == ["compile", "take exclusive", "benchmark configs", "release"]
    assert out["compile_warmup_lock"] == "autotuning exclusive, compile unlocked"
    assert CachingAutotuner.benchmark_all_configs is stub  # restored


def test_the_hook_is_removed_when_the_warmup_raises(monkeypatch):
    stub = lambda self: None  # noqa: E731
    monkeypatch.setattr(CachingAutotuner, "benchmark_all_configs", stub)
    with pytest.raises(RuntimeError), compile_warmup_lock(lambda e: contextlib.nullcontext(), {}):
        raise RuntimeError("inductor failed")
    assert CachingAutotuner.benchmark_all_configs is stub


def test_without_the_hook_the_whole_warmup_holds_the_lock_shared(monkeypatch):
    monkeypatch.delattr(CachingAutotuner, "benchmark_all_configs")
    events: list[bool] = []

    @contextlib.contextmanager
    def lock(exclusive: bool, step: str | None = None):
        events.append(exclusive)
        yield

    out: dict = {}
    with compile_warmup_lock(lock, out):
        pass
    assert events == [False] and out["compile_warmup_lock"].startswith("shared")
    out = {}
    with compile_warmup_lock(None, out):  # the caller holds the lock
        pass
    assert out["compile_warmup_lock"] == "caller's"
