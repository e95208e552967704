"""goaai's settings, and what bench/capacity.py's diagnostics add to its server.

``GOAAI_BENCH_SQL_LOG`` names a file that gets a line per SQL statement and per
commit the server runs: when it ended (Unix seconds), how long it took, its kind
(``begin``: on SQLite ``BEGIN IMMEDIATE`` waits there for the database's one write
lock; ``commit``; ``statement``) and the thread's id, so that a transaction's time
from its ``BEGIN`` to its commit is how long it held the lock. ``GOAAI_BENCH_SWITCH_INTERVAL`` sets the interpreter's
thread switch interval (``sys.setswitchinterval``, 0.005 s by default): how long a
thread that wants the GIL waits before the running one is asked to let go.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.backends.signals import connection_created

from goaai.settings import *  # noqa: F403

_SQL_LOG = os.environ.get("GOAAI_BENCH_SQL_LOG", "")
_SWITCH_INTERVAL = os.environ.get("GOAAI_BENCH_SWITCH_INTERVAL", "")

if _SWITCH_INTERVAL:
    sys.setswitchinterval(float(_SWITCH_INTERVAL))

if _SQL_LOG:
    _log = open(_SQL_LOG, "a", buffering=1)  # noqa: SIM115 (open for the process's life)
    _lock = threading.Lock()

    def _timed(execute: Callable[..., Any], sql: str, params: Any, many: bool, context: Any) -> Any:
        began = time.perf_counter()
        try:
            return execute(sql, params, many, context)
        finally:
            ended = time.perf_counter()
            kind = "begin" if sql.startswith("BEGIN") else "statement"
            _write(ended - began, kind)

    def _write(took: float, kind: str) -> None:
        with _lock:
            _log.write(f"{time.time():.6f} {took:.6f} {kind} {threading.get_ident()}\n")

    def _commit(self: BaseDatabaseWrapper) -> None:
        began = time.perf_counter()
        try:
            _commit_unwatched(self)
        finally:
            _write(time.perf_counter() - began, "commit")

    # Django's private hook every backend's commit goes through.
    _commit_unwatched = getattr(BaseDatabaseWrapper, "_commit")  # noqa: B009
    setattr(BaseDatabaseWrapper, "_commit", _commit)  # noqa: B010

    def _watch(sender: Any, connection: Any, **kwargs: Any) -> None:
        # A thread's connection is opened again after each request closes it.
        if _timed not in connection.execute_wrappers:
            connection.execute_wrappers.append(_timed)

    connection_created.connect(_watch, weak=False)
