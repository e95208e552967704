"""Connections the database drops (a restart, a failover, ``pg_terminate_backend``)
are replaced: neither a request nor the reaper fails on them for good."""

from __future__ import annotations

import select

import pytest
from django.db import connection
from psycopg_pool import ConnectionPool

from goaai.env import env_database
from goaai.postgresql.base import DatabaseWrapper

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
            # Returns once the backend has ended (its goodbye is on the wire).
            cursor.execute("SELECT pg_terminate_backend(%s, 5000)", [first])
        # The pool holds one connection, the dropped one: it must not hand it out.
        second = _backend(wrapper)
        assert second != first
    finally:
        wrapper.close()
        wrapper.close_pool()


def _counting_checks(monkeypatch) -> list[int]:
    sent: list[int] = []
    check = ConnectionPool.check_connection

    def counted(conn) -> None:
        sent.append(conn.info.backend_pid)
        check(conn)

    monkeypatch.setattr(ConnectionPool, "check_connection", staticmethod(counted))
    return sent


def test_a_pooled_connection_is_checked_without_a_statement_while_its_socket_is_silent(
    monkeypatch,
):
    wrapper = _pooled_wrapper(monkeypatch)
    sent = _counting_checks(monkeypatch)
    try:
        first = _backend(wrapper)
        for _ in range(3):
            wrapper.close()
            assert _backend(wrapper) == first
        # Nothing arrived on the idle connection: no empty statement was sent.
        assert sent == []
    finally:
        wrapper.close()
        wrapper.close_pool()


def test_a_pooled_connection_the_server_spoke_on_is_checked_with_a_statement(monkeypatch):
    wrapper = _pooled_wrapper(monkeypatch)
    sent = _counting_checks(monkeypatch)
    try:
        with wrapper.cursor() as cursor:
            cursor.execute("LISTEN goaai_check")
            cursor.execute("SELECT pg_backend_pid()")
            first = int(cursor.fetchone()[0])
        socket = wrapper.connection.fileno()
        wrapper.close()
        with connection.cursor() as cursor:
            cursor.execute("NOTIFY goaai_check")
        # The notification reaches the idle connection's socket; the check then asks
        # the server, finds the connection alive, and hands it out.
        readable, _, _ = select.select([socket], [], [], 5)
        assert readable
        assert _backend(wrapper) == first
        assert sent == [first]
    finally:
        wrapper.close()
        wrapper.close_pool()
