"""The database from ``/v1/``'s async views: in a thread of the request's own
(not the event loop's shared pool, which a few waiting requests would use up for
everyone), with the request's old connections closed before and after, as
``channels.db.database_sync_to_async`` does."""

from __future__ import annotations

from typing import Any

from asgiref.sync import SyncToAsync
from django.db import close_old_connections, connections


def _close_old_connections() -> None:
    # Within a transaction (a test's, around the whole request) a connection is
    # kept: closing it would lose the transaction.
    if not any(conn.in_atomic_block for conn in connections.all(initialized_only=True)):
        close_old_connections()


class _DatabaseSyncToAsync(SyncToAsync[Any, Any]):
    def thread_handler(self, loop: Any, *args: Any, **kwargs: Any) -> Any:
        _close_old_connections()
        try:
            return super().thread_handler(loop, *args, **kwargs)  # type: ignore[no-untyped-call]
        finally:
            _close_old_connections()


# A callable's async version, as ``database_sync_to_async(func)``.
database_sync_to_async = _DatabaseSyncToAsync
