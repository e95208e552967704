"""Shared fixtures: three personas, factories, and a runtime that executes inline.

PostgreSQL-only tests carry ``@pytest.mark.postgres``. They run in the suite's
PostgreSQL pass (``DATABASE_URL`` pointing at PostgreSQL); in the SQLite pass they
are skipped with that reason. In CI (``CI=true``) the PostgreSQL pass is always
run, so a missing server fails the build instead of skipping silently.
"""

from __future__ import annotations

import asyncio
import inspect
import os

import pytest
from asgiref.sync import sync_to_async
from django.db import connection, connections

from goaai.runtime import retry, rt
from tests.factories import UserFactory

REDIS_TEST_URL = os.environ.get("REDIS_TEST_URL", "redis://127.0.0.1:6379/15")


def _redis_reachable() -> bool:
    import redis

    try:
        return bool(redis.Redis.from_url(REDIS_TEST_URL, socket_connect_timeout=1).ping())
    except redis.RedisError:
        return False


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    on_postgres = os.environ.get("DATABASE_URL", "").startswith(("postgres://", "postgresql://"))
    skip_pg = pytest.mark.skip(
        reason="needs PostgreSQL: runs in the PostgreSQL pass (DATABASE_URL=postgres://...)"
    )
    needs_redis = [item for item in items if "redis" in item.keywords]
    redis_missing = bool(needs_redis) and not _redis_reachable()
    in_ci = os.environ.get("CI") == "true"
    for item in items:
        if "postgres" in item.keywords and not on_postgres:
            item.add_marker(skip_pg)
        elif "redis" in item.keywords and redis_missing and not in_ci:
            # In CI a missing Redis must fail the test, so it is not skipped there.
            item.add_marker(pytest.mark.skip(reason=f"needs Redis at {REDIS_TEST_URL}"))


@pytest.fixture(autouse=True)
def _quick_model_retries(monkeypatch: pytest.MonkeyPatch) -> None:
    """A retried model call waits milliseconds in tests, not seconds (the schedule
    itself is checked on a fake clock in tests/runtime_core/test_model_retries.py)."""
    monkeypatch.setattr(retry, "FIRST_BACKOFF_SECONDS", 0.001)
    monkeypatch.setattr(retry, "MAX_BACKOFF_SECONDS", 0.004)


@pytest.fixture(autouse=True)
def _async_views_give_their_connections_back(request: pytest.FixtureRequest):
    """After an async test, close the database connections of the thread that ran
    its sync code (Django's ``AsyncClient`` views, ``database_sync_to_async``): one
    thread shared by every async test, whose connections Django's test client never
    closes (it turns off closing them at the end of a request). Left open, one of them
    stayed checked out of PostgreSQL's pool to the end, and the test database could
    not be dropped ("being accessed by other users")."""
    yield
    if inspect.iscoroutinefunction(getattr(request.node, "function", None)):
        asyncio.run(sync_to_async(connections.close_all)())


@pytest.fixture
def redis_url() -> str:
    """A Redis database of its own for the test, emptied before it starts."""
    import redis

    redis.Redis.from_url(REDIS_TEST_URL).flushdb()
    return REDIS_TEST_URL


@pytest.fixture
def owner(db):
    """Alice: owns the sessions under test."""
    return UserFactory(username="alice")


@pytest.fixture
def other_user(db):
    """Bob: a second user who must never see Alice's data."""
    return UserFactory(username="bob")


@pytest.fixture
def staff(db):
    """Charlie: a staff operator."""
    return UserFactory(username="charlie", is_staff=True, is_superuser=True)


@pytest.fixture
def inline_runtime():
    """The runtime with runs executed in the calling thread once committed."""
    rt.reset()
    rt.configure(executor="inline")
    yield rt
    rt.reset()


@pytest.fixture
def thread_runtime():
    """The runtime with its default pool of worker threads."""
    rt.reset()
    rt.configure(executor="thread")
    yield rt
    rt.reset()


@pytest.fixture
def on_postgres() -> bool:
    return connection.vendor == "postgresql"
