"""Database work made again after the database refused it for a moment."""

from __future__ import annotations

import pytest
from django.db import OperationalError, connection, transaction

from goaai import database

pytestmark = pytest.mark.django_db(transaction=True)

QUICK = (0.0, 0.0, 0.0)


def _refused(times: int, error: type[Exception] = OperationalError):
    calls: list[object] = []

    def call() -> str:
        # Each attempt runs a statement: it must have a working connection.
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
            calls.append(cursor.fetchone())
        if len(calls) <= times:
            raise error("database is locked")
        return "done"

    return call, calls


def test_work_refused_twice_is_done_on_the_third_attempt_after_giving_up_its_connection(
    monkeypatch,
):
    call, calls = _refused(2)
    close_all = database.connections.close_all
    closed: list[int] = []

    def counted() -> None:
        closed.append(len(calls))
        close_all()

    monkeypatch.setattr(database.connections, "close_all", counted)
    assert database.retrying(call, what="test", delays=QUICK) == "done"
    assert len(calls) == 3
    # The connection was given up after each refused attempt.
    assert closed == [1, 2]


def test_the_last_error_is_raised_when_the_retries_are_spent():
    call, calls = _refused(10)
    with pytest.raises(OperationalError, match="locked"):
        database.retrying(call, what="test", delays=(0.0, 0.0))
    assert len(calls) == 3


def test_other_errors_are_not_retried():
    call, calls = _refused(1, error=ValueError)
    with pytest.raises(ValueError, match="locked"):
        database.retrying(call, what="test", delays=QUICK)
    assert len(calls) == 1


def test_nothing_is_retried_inside_a_callers_transaction():
    call, calls = _refused(1)
    with transaction.atomic(), pytest.raises(OperationalError):
        database.retrying(call, what="test", delays=QUICK)
    assert len(calls) == 1
