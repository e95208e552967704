"""Django's SQLite backend, with the connections to a database file kept for reuse.

Under ASGI every request runs in a thread of its own, so Django opens a connection
for each (``CONN_MAX_AGE`` must stay 0) and closes it at the end: for SQLite that is
the file opened, the pragmas of ``init_command`` run, some forty SQL functions
registered and sqlite-vec looked for, about a fifth of the server's CPU time when
fifty chats stream at once (bench/capacity.py). Here a connection closed outside a
transaction is kept, up to ``OPTIONS["pool"]["max_idle"]`` of them per database
file, and handed to the next thread that connects, with its pragmas and functions
in place. Neither Django nor a maintained package pools SQLite connections.

A kept connection is handed out only to the process that opened it (a forked
worker opens its own) and only while the file it was opened on is still the file
at that path: one deleted or replaced (a test database made again) is closed
instead. ``{"pool": false}`` turns this off; an in-memory database is never pooled
(Django never closes one).
"""

from __future__ import annotations

import atexit
import os
import sqlite3
import threading
from typing import Any

from django.db.backends.sqlite3 import base

# Idle connections kept per database file unless OPTIONS says otherwise.
MAX_IDLE = 32


class _Connection(sqlite3.Connection):
    """A connection that remembers the file it was opened on (and takes what other
    apps note on it, such as ``vectors_equipped``)."""

    file: tuple[int, int] | None = None


class _Idle:
    """The open connections of one process to one database path, unused."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.connections: list[_Connection] = []

    def take(self, file: tuple[int, int]) -> _Connection | None:
        with self.lock:
            stale = [c for c in self.connections if c.file != file]
            kept = [c for c in self.connections if c.file == file]
            self.connections = kept
            conn = kept.pop() if kept else None
        for old in stale:
            old.close()
        return conn

    def give(self, conn: _Connection, limit: int) -> bool:
        with self.lock:
            if len(self.connections) >= limit:
                return False
            self.connections.append(conn)
            return True

    def close_all(self) -> None:
        with self.lock:
            idle, self.connections = self.connections, []
        for conn in idle:
            conn.close()


_idle: dict[tuple[int, str], _Idle] = {}
_idle_lock = threading.Lock()


def _idle_for(path: str) -> _Idle:
    key = (os.getpid(), path)
    with _idle_lock:
        return _idle.setdefault(key, _Idle())


def _file(path: str) -> tuple[int, int] | None:
    try:
        found = os.stat(path)
    except (OSError, ValueError):
        return None
    return found.st_dev, found.st_ino


@atexit.register
def close_idle() -> None:
    """Close this process's idle connections (SQLite folds the write-ahead log
    back into the database when the last connection closes)."""
    with _idle_lock:
        mine = [idle for (pid, _), idle in _idle.items() if pid == os.getpid()]
    for idle in mine:
        idle.close_all()


class DatabaseWrapper(base.DatabaseWrapper):
    max_idle = 0

    def get_connection_params(self) -> dict[str, Any]:
        params: dict[str, Any] = super().get_connection_params()
        pool = params.pop("pool", True)
        if isinstance(pool, dict):
            self.max_idle = int(pool.get("max_idle", MAX_IDLE))
        else:
            self.max_idle = MAX_IDLE if pool else 0
        params["factory"] = _Connection
        return params

    def _path(self) -> str | None:
        name = str(self.settings_dict["NAME"])
        if not self.max_idle or self.is_in_memory_db() or name.startswith("file:"):
            return None
        return name

    def get_new_connection(self, conn_params: dict[str, Any]) -> Any:
        path = self._path()
        file = _file(path) if path is not None else None
        if path is not None and file is not None:
            kept = _idle_for(path).take(file)
            if kept is not None:
                return kept
        conn = super().get_new_connection(conn_params)
        if path is not None:
            conn.file = file or _file(path)
        return conn

    def _close(self) -> None:
        conn = self.connection
        path = self._path()
        if (
            path is not None
            and isinstance(conn, _Connection)
            and conn.file is not None
            and not conn.in_transaction
            and not self.in_atomic_block
            and not self.errors_occurred
            and _idle_for(path).give(conn, self.max_idle)
        ):
            return
        super()._close()  # type: ignore[misc]  # Django's; its type stubs lack it
