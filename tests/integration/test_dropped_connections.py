"""Connections the database drops (a restart, a failover, ``pg_terminate_backend``)
are replaced: neither a request nor the reaper fails on them for good."""

from __future__ import annotations

import pytest
from django.db import connection
from django.db.backends.postgresql.base import DatabaseWrapper

from goaai.env import env_database

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


def _pooled_wrapper(monkeypatch) -> DatabaseWrapper:
    s = connection.settings_dict
    host = f"{s['HOST'] or '127.0.0.1'}:{s['PORT'] or 5432}"
    url = f"postgres://{s['USER'] or 'postgres'}@{host}/{s['NAME']}"
    monkeypatch.setenv("GOAAI_TEST_DB", url)
    monkeypatch.setenv("DATABASE_POOL", "1")
    monkeypatch.setenv("DATABASE_POOL_MIN", "1")
    monkeypatch.setenv("DATABASE_POOL_MAX", "1")
    settings = {**connection.settings_dict, **env_database("GOAAI_TEST_DB", default="")}
    settings["NAME"] = s["NAME"]
    return DatabaseWrapper(settings, alias="dropped")


def _backend(wrapper: DatabaseWrapper) -> int:
    with wrapper.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        return int(cursor.fetchone()[0])


def test_a_pooled_connection_the_server_dropped_is_replaced_before_use(monkeypatch):
    wrapper = _pooled_wrapper(monkeypatch)
    try:
        first = _backend(wrapper)
        wrapper.close()  # back to the pool, as at the end of every request
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_terminate_backend(%s)", [first])
        # The pool holds one connection, the dropped one: it must not hand it out.
        second = _backend(wrapper)
        assert second != first
    finally:
        wrapper.close()
        wrapper.close_pool()
