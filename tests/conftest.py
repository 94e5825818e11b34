import os
import sys
import uuid
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# Tests must never reach a hosted model: any OpenAI client call goes to a closed local port unless a
# test starts its own fake server and points at it explicitly.
os.environ["OPENAI_BASE_URL"] = "http://127.0.0.1:9/v1"
os.environ["OPENAI_API_KEY"] = "test-key-not-real"
os.environ.setdefault("LANGGRAPH_CLI_NO_ANALYTICS", "1")
# Test helpers (fakes.py, ...) import by name; appended so they never shadow project packages.
sys.path.append(str(Path(__file__).resolve().parent))

# The PostgreSQL server the checkpoint-store tests use (.ci/run starts one and sets this). Without
# it the PostgreSQL half of those tests is skipped, with this reason.
POSTGRES_ENV = "EGG_TEST_POSTGRES_URL"


@pytest.fixture(params=["sqlite", "postgres"])
def store_url(request, tmp_path):
    """A fresh, empty checkpoint store of each kind: a SQLite file, or a new PostgreSQL database
    (created on the test server and dropped afterwards)."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'store' / 'checkpoints.sqlite'}"
        return
    server = os.environ.get(POSTGRES_ENV)
    if not server:
        pytest.skip(f"no PostgreSQL server: set {POSTGRES_ENV}=postgresql://... (.ci/run starts one)")
    from urllib.parse import urlsplit, urlunsplit

    import psycopg

    name = f"egg_test_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(server, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield urlunsplit(urlsplit(server)._replace(path=f"/{name}"))
    finally:
        with psycopg.connect(server, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
