"""Django's SQLite backend, with connections kept for reuse and writers queued.

**Connections kept.** Under ASGI every request runs in a thread of its own, so
Django opens a connection for each (``CONN_MAX_AGE`` must stay 0) and closes it at
the end: for SQLite that is the file opened, the pragmas of ``init_command`` run,
some forty SQL functions registered and sqlite-vec looked for, about a fifth of the
server's CPU time when fifty chats stream at once (bench/capacity.py). Here a
connection closed outside a transaction is kept, up to
``OPTIONS["pool"]["max_idle"]`` of them per database file, and handed to the next
thread that connects with the same options, with its pragmas and functions in place.
Neither Django nor a maintained package pools SQLite connections. A connection is
kept only in the process that opened it (a forked worker opens its own), outside a
transaction, still checking foreign keys, and with the cursors made on it closed (a
half-read one would hold an old snapshot); it is handed out only while the file it
was opened on is still the file at that path: one deleted or replaced (a test
database made again) is closed instead. ``{"pool": false}`` turns this off.

**Writers queued.** SQLite lets one transaction write at a time; goaai begins every
transaction ``IMMEDIATE``, so each takes that lock first. A connection that finds
it taken sleeps and tries again, 1, 2, 5, 10... up to 100 ms apart, however soon
the lock is free: with fifty runs writing at once, a transaction that held the lock
7 ms waited 12 ms at the median and 1.5 s at the 99th percentile. Here the threads
of one process queue for the database file on a lock of their own before they
begin, and the next one goes as soon as the last commits or rolls back; SQLite's
own wait still arbitrates between processes. A thread that waits longer than the
connection's ``timeout`` gets SQLite's "database is locked"; a connection dropped
in a transaction frees the lock when it is collected, as SQLite frees its own.

An in-memory database is left as Django has it (Django never closes one).
"""

from __future__ import annotations

import atexit
import os
import sqlite3
import threading
import weakref
from typing import Any

from django.db import OperationalError
from django.db.backends.sqlite3 import base

# Idle connections kept per database file unless OPTIONS says otherwise.
MAX_IDLE = 32
# sqlite3.connect's own default, when OPTIONS has no timeout.
DEFAULT_TIMEOUT = 5.0


class _Connection(sqlite3.Connection):
    """A connection that remembers the file and the process it was opened in, and
    the cursors Django made on it (and takes what other apps note on it, such as
    ``vectors_equipped``)."""

    file: tuple[int, int] | None = None
    # The options it was opened with: handed only to a wrapper with the same.
    options = ""
    pid = 0

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.pid = os.getpid()
        self.cursors: weakref.WeakSet[sqlite3.Cursor] = weakref.WeakSet()

    def reusable(self) -> bool:
        """Whether the next thread may have it: this process's, with no transaction,
        checking foreign keys as opened (a schema change that failed halfway can
        leave them off). Its cursors are closed, so that one still reading (a
        half-read iterator) neither holds an old snapshot nor reads on."""
        if self.pid != os.getpid() or self.file is None or self.in_transaction:
            return False
        for cursor in list(self.cursors):
            cursor.close()
        try:
            return bool(self.execute("PRAGMA foreign_keys").fetchone()[0])
        except sqlite3.Error:
            return False


class _File:
    """What the threads of one process share of one database path: its idle
    connections, and the lock its writers queue on."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.idle: list[_Connection] = []
        self.writer = threading.Lock()

    def take(self, file: tuple[int, int], options: str) -> _Connection | None:
        with self.lock:
            stale = [c for c in self.idle if c.file != file]
            self.idle = [c for c in self.idle if c.file == file]
            matching = [i for i, c in enumerate(self.idle) if c.options == options]
            conn = self.idle.pop(matching[-1]) if matching else None
        for old in stale:
            old.close()
        return conn

    def give(self, conn: _Connection, limit: int) -> bool:
        with self.lock:
            if len(self.idle) >= limit:
                return False
            self.idle.append(conn)
            return True

    def close_idle(self) -> None:
        with self.lock:
            idle, self.idle = self.idle, []
        for conn in idle:
            conn.close()


_files: dict[tuple[int, str], _File] = {}
_files_lock = threading.Lock()


def _shared(path: str) -> _File:
    key = (os.getpid(), path)
    with _files_lock:
        return _files.setdefault(key, _File())


def _forked() -> None:
    # A child forked while another thread held these starts with its own; what the
    # parent kept is the parent's (never handed out here, never closed here).
    global _files, _files_lock
    _files, _files_lock = {}, threading.Lock()


os.register_at_fork(after_in_child=_forked)


def _identity(path: str) -> tuple[int, int] | None:
    try:
        found = os.stat(path)
    except (OSError, ValueError):
        return None
    return found.st_dev, found.st_ino


@atexit.register
def close_idle() -> None:
    """Close this process's idle connections (SQLite folds the write-ahead log
    back into the database when the last connection closes)."""
    with _files_lock:
        mine = [shared for (pid, _), shared in _files.items() if pid == os.getpid()]
    for shared in mine:
        shared.close_idle()


class DatabaseWrapper(base.DatabaseWrapper):
    transaction_mode: str | None  # Django's, from OPTIONS
    init_commands: list[str]  # Django's, from OPTIONS["init_command"]
    max_idle = 0
    lock_wait = DEFAULT_TIMEOUT
    options = ""
    # The writer lock this connection holds, between its BEGIN and its end, and
    # what frees it should the wrapper be dropped in a transaction (as SQLite's own
    # lock goes with a connection that is collected).
    _writing: threading.Lock | None = None
    _freeing: weakref.finalize[Any, Any] | None = None

    def get_connection_params(self) -> dict[str, Any]:
        params: dict[str, Any] = super().get_connection_params()
        pool = params.pop("pool", True)
        if isinstance(pool, dict):
            self.max_idle = int(pool.get("max_idle", MAX_IDLE))
        else:
            self.max_idle = MAX_IDLE if pool else 0
        self.lock_wait = float(params.get("timeout", DEFAULT_TIMEOUT))
        self.options = repr((sorted(params.items()), self.init_commands))
        params["factory"] = _Connection
        return params

    def _file_path(self) -> str | None:
        """The database's path, for a database in a file named by its path."""
        name = str(self.settings_dict["NAME"])
        if self.is_in_memory_db() or name.startswith("file:"):
            return None
        return name

    def get_new_connection(self, conn_params: dict[str, Any]) -> Any:
        path = self._file_path() if self.max_idle else None
        file = _identity(path) if path is not None else None
        if path is not None and file is not None:
            kept = _shared(path).take(file, self.options)
            if kept is not None:
                return kept
        conn = super().get_new_connection(conn_params)
        if path is not None:
            conn.file = file or _identity(path)
            conn.options = self.options
        return conn

    def create_cursor(self, name: str | None = None) -> Any:
        cursor = super().create_cursor(name)
        if isinstance(self.connection, _Connection):
            self.connection.cursors.add(cursor)
        return cursor

    # Writers queued

    def _start_transaction_under_autocommit(self) -> None:
        path = self._file_path()
        if path is None or self.transaction_mode not in ("IMMEDIATE", "EXCLUSIVE"):
            super()._start_transaction_under_autocommit()  # type: ignore[misc]
            return
        writer = _shared(path).writer
        if not writer.acquire(timeout=self.lock_wait):
            raise OperationalError("database is locked")
        self._writing = writer
        self._freeing = weakref.finalize(self, writer.release)
        try:
            super()._start_transaction_under_autocommit()  # type: ignore[misc]
        except BaseException:
            self._done_writing()
            raise

    def _done_writing(self) -> None:
        freeing, self._freeing, self._writing = self._freeing, None, None
        if freeing is not None:
            freeing()

    def _commit(self) -> None:
        super()._commit()  # type: ignore[misc]
        # A commit that failed leaves the transaction open: the rollback (or the
        # close) that follows it frees the lock.
        self._done_writing()

    def _rollback(self) -> None:
        try:
            super()._rollback()  # type: ignore[misc]
        finally:
            self._done_writing()

    def _close(self) -> None:
        try:
            self._keep_or_close()
        finally:
            self._done_writing()

    def _keep_or_close(self) -> None:
        conn = self.connection
        path = self._file_path() if self.max_idle else None
        if (
            path is not None
            and isinstance(conn, _Connection)
            and not self.in_atomic_block
            and conn.reusable()
            and _shared(path).give(conn, self.max_idle)
        ):
            return
        super()._close()  # type: ignore[misc]  # Django's; its type stubs lack it
