"""Counting the SQL statements and transactions a process runs, at two levels.

Driver level: every statement the database driver runs on any connection of the
process, including those sent on the driver's own cursors, bypassing Django
(SQLite: the connection's trace callback; PostgreSQL: psycopg's ``Cursor.execute``
and ``executemany``). A statement that finds its connection outside a transaction
starts one: an autocommit statement, or the ``BEGIN`` of a block (explicit, or the
one psycopg sends by itself before the first statement of a block).

Django level: the statements that go through Django's cursors, seen by
``connection.execute_wrapper``; transactions are the outermost ``atomic`` blocks
that ran a statement plus the statements run outside any block (autocommit),
told apart by ``connection.in_atomic_block``.

Both levels leave transaction control (BEGIN, COMMIT, SAVEPOINT, ...) out of the
statement counts. ``executemany`` counts one statement per row.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import asdict, dataclass, fields
from typing import Any

CONTROL = ("BEGIN", "COMMIT", "ROLLBACK", "END", "SAVEPOINT", "RELEASE", "START")


def is_control(sql: object) -> bool:
    text = sql.decode(errors="replace") if isinstance(sql, bytes) else str(sql)
    return text.lstrip().upper().startswith(CONTROL)


def rows_of(params: object) -> int:
    return len(params) if hasattr(params, "__len__") else 1  # type: ignore[arg-type]


@dataclass
class Tally:
    driver_statements: int = 0
    driver_transactions: int = 0
    django_statements: int = 0
    django_transactions: int = 0

    def copy(self) -> Tally:
        return Tally(**asdict(self))

    def minus(self, other: Tally) -> Tally:
        return Tally(
            **{f.name: getattr(self, f.name) - getattr(other, f.name) for f in fields(self)}
        )

    def plus(self, other: Tally) -> Tally:
        return Tally(
            **{f.name: getattr(self, f.name) + getattr(other, f.name) for f in fields(self)}
        )


def _commit_marker() -> None:
    """Registered with ``on_commit`` in a block already counted."""


class Counter:
    """A process's statements and transactions (thread-safe)."""

    def __init__(self) -> None:
        self.tally = Tally()
        self.lock = threading.Lock()

    def reset(self) -> None:
        self.tally = Tally()
        self.lock = threading.Lock()

    def snapshot(self) -> Tally:
        with self.lock:
            return self.tally.copy()

    def driver(self, sql: object, in_transaction: bool, rows: int = 1) -> None:
        control = is_control(sql)
        with self.lock:
            if not in_transaction:
                self.tally.driver_transactions += 1
            if not control:
                self.tally.driver_statements += rows

    def django(self, sql: object, connection: Any, rows: int) -> None:
        if is_control(sql):
            return
        new_block = connection.in_atomic_block and not any(
            entry[1] is _commit_marker for entry in connection.run_on_commit
        )
        if new_block:
            connection.on_commit(_commit_marker)
        with self.lock:
            self.tally.django_statements += rows
            if new_block or not connection.in_atomic_block:
                self.tally.django_transactions += 1

    def __call__(
        self,
        execute: Callable[..., Any],
        sql: Any,
        params: Any,
        many: bool,
        context: dict[str, Any],
    ) -> Any:
        """The execute wrapper Django's cursors call."""
        self.django(sql, context["connection"], rows_of(params) if many else 1)
        return execute(sql, params, many, context)

    # Installing

    def install(self) -> None:
        """Count on every connection this process opens from now on."""
        from django.db import connections
        from django.db.backends.signals import connection_created

        connection_created.connect(
            self._connected, weak=False, dispatch_uid=f"bench-count-{id(self)}"
        )
        _patch_psycopg(self)
        connections.close_all()

    def _connected(self, sender: Any, connection: Any, **kwargs: Any) -> None:
        if self not in connection.execute_wrappers:
            connection.execute_wrappers.append(self)
        if connection.vendor == "sqlite":
            _trace_sqlite(self, connection)


def _trace_sqlite(counter: Counter, wrapper: Any) -> None:
    def trace(sql: str) -> None:
        if sql.startswith("--"):  # a trigger's body, part of its statement
            return
        raw = wrapper.connection
        counter.driver(sql, raw is not None and raw.in_transaction)

    wrapper.connection.set_trace_callback(trace)


_patched: list[Counter] = []
_local = threading.local()


class quiet:
    """Statements this thread runs inside are not counted (the benchmark's own)."""

    def __enter__(self) -> None:
        _local.quiet = True

    def __exit__(self, *exc: object) -> None:
        _local.quiet = False


def _counting() -> bool:
    return not getattr(_local, "quiet", False)


def _patch_psycopg(counter: Counter) -> None:
    """Count psycopg's statements (every cursor class derives from ``Cursor``)."""
    try:
        import psycopg
    except ImportError:
        return
    _patched.append(counter)
    if len(_patched) > 1:
        return
    idle = psycopg.pq.TransactionStatus.IDLE
    execute, executemany = psycopg.Cursor.execute, psycopg.Cursor.executemany

    def counted_execute(self: Any, query: Any, *args: Any, **kwargs: Any) -> Any:
        if _counting():
            busy = self.connection.info.transaction_status != idle
            for each in _patched:
                each.driver(query, busy)
        return execute(self, query, *args, **kwargs)

    def counted_executemany(
        self: Any, query: Any, params_seq: Any, *args: Any, **kwargs: Any
    ) -> Any:
        if _counting():
            busy = self.connection.info.transaction_status != idle
            for each in _patched:
                each.driver(query, busy, rows_of(params_seq))
        return executemany(self, query, params_seq, *args, **kwargs)

    psycopg.Cursor.execute = counted_execute  # type: ignore[method-assign]
    psycopg.Cursor.executemany = counted_executemany  # type: ignore[method-assign]
