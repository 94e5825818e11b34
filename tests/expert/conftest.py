"""Session fixtures for the expert tests: every case described once, every seed candidate
checked once (one subprocess each), so the whole area stays within a few minutes on 2 CPU cores."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from expert_helpers import check_jobs, describe_many, request, run_jobs  # noqa: E402
from expert_tasks import CASES  # noqa: E402

from graph.records import TaskDescription  # noqa: E402
from nodes.models import CodeReply  # noqa: E402


@pytest.fixture(scope="session")
def descs() -> dict[str, TaskDescription]:
    names = list(CASES)
    out = describe_many([CASES[n] for n in names])
    return dict(zip(names, out, strict=True))


@pytest.fixture(scope="session")
def seeds(descs) -> dict[str, list[CodeReply]]:
    from nodes.expert import ExpertCode

    code = ExpertCode()
    out: dict[str, list[CodeReply]] = {}
    for name, desc in descs.items():
        replies = []
        for i in range(8):
            r = code.write(request(desc, seed_index=i, n_seeds=8))
            if r.source is None:
                break
            replies.append(r)
        out[name] = replies
    return out


@pytest.fixture(scope="session")
def seed_checks(seeds) -> dict[tuple[str, str], dict]:
    """(case, origin) -> runner check result, under TRITON_INTERPRET=1, 2 random trials."""
    jobs, keys = [], []
    for name, replies in seeds.items():
        src, ov = CASES[name]
        for r in replies:
            jobs += check_jobs(src, ov, [r], trials=2)
            keys.append((name, r.origin))
    res = run_jobs(jobs, interpret=True)
    return dict(zip(keys, res, strict=True))
