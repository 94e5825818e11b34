from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture
def fake_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """Clean fake-optimize environment; returns the invocation log path."""
    for k in ("FAKE_OPT_MODES", "FAKE_OPT_SLEEP", "FAKE_OPT_TIMING"):
        monkeypatch.delenv(k, raising=False)
    log = tmp_path / "invocations.log"
    monkeypatch.setenv("FAKE_OPT_LOG", str(log))
    return log
