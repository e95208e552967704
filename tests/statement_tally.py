"""Counting the statements and transactions Django runs, on every connection of the
process (the turn loop's worker threads and tool threads each have their own).

Statements are those through Django's cursors, transaction control (``BEGIN``,
``SAVEPOINT``, ...) left out; transactions are the outermost ``atomic`` blocks that
ran a statement, plus each statement run outside any block (autocommit). The
benchmarks count the same way (``bench/transactions.py``).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from django.db import connections
from django.db.backends.signals import connection_created

_CONTROL = ("BEGIN", "COMMIT", "ROLLBACK", "END", "SAVEPOINT", "RELEASE", "START")


def _counted_block() -> None:
    """Registered with ``on_commit`` in a block already counted."""


class Tally:
    def __init__(self) -> None:
        self.statements = 0
        self.transactions = 0
        self.sql: list[str] = []
        # Rows the statements returned or changed, where the driver tells
        # (PostgreSQL's; SQLite's says -1 for a read).
        self.rows = 0
        self._lock = threading.Lock()

    def count(self, sql: str, params: Any, many: bool, context: dict[str, Any]) -> None:
        if not sql.lstrip().upper().startswith(_CONTROL):
            connection = context["connection"]
            new_block = connection.in_atomic_block and not any(
                entry[1] is _counted_block for entry in connection.run_on_commit
            )
            if new_block:
                connection.on_commit(_counted_block)
            with self._lock:
                self.statements += len(params) if many else 1
                self.transactions += new_block or not connection.in_atomic_block
                self.sql.append(sql)


class _Hub:
    """The execute wrapper every connection gets when it is opened, from this
    module's import on (a connection opened before a tally starts, by a thread
    that keeps it, is counted too): it hands each statement to the tallies
    running."""

    def __init__(self) -> None:
        self.tallies: list[Tally] = []

    def __call__(
        self,
        execute: Callable[..., Any],
        sql: str,
        params: Any,
        many: bool,
        context: dict[str, Any],
    ) -> Any:
        for tally in list(self.tallies):
            tally.count(sql, params, many, context)
        result = execute(sql, params, many, context)
        rowcount = getattr(context["cursor"], "rowcount", -1)
        if rowcount > 0 and not many:
            for tally in list(self.tallies):
                with tally._lock:
                    tally.rows += rowcount
        return result

    def connected(self, sender: Any, connection: Any, **kwargs: Any) -> None:
        if self not in connection.execute_wrappers:
            connection.execute_wrappers.append(self)


_HUB = _Hub()
connection_created.connect(_HUB.connected, weak=False, dispatch_uid="statement-tally-hub")


@contextmanager
def tallying() -> Iterator[Tally]:
    """A :class:`Tally` of every connection of the process while it runs."""
    tally = Tally()
    for alias in connections:
        wrapper = connections[alias]
        if _HUB not in wrapper.execute_wrappers:
            wrapper.execute_wrappers.append(_HUB)
    _HUB.tallies.append(tally)
    try:
        yield tally
    finally:
        _HUB.tallies.remove(tally)
