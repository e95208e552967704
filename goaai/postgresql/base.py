"""Django's PostgreSQL backend, with a cheaper check of the pooled connections.

Django's pool checks every connection it hands out with an empty statement
(``CONN_HEALTH_CHECKS``): a round trip, and a transaction PostgreSQL counts, at the
start of every request, every run's worker and every tool call's thread: two or
three per scripted run on top of the run's own seven or eight.

Here a connection is checked by its socket first. An idle connection's socket is
silent; a server that drops it (a restart, a failover, ``pg_terminate_backend``)
says so, a FATAL message then the end of the stream, and the socket becomes
readable. Only then, or when anything else arrived meanwhile, is the empty
statement sent, and the pool replaces the connection if it fails. A drop that has
not reached this host yet is missed by both checks alike: the next statement fails
as it would after any check.
"""

from __future__ import annotations

import select
from collections.abc import Callable
from typing import Any, ClassVar

import psycopg
from django.core.exceptions import ImproperlyConfigured
from django.db.backends.base.base import NO_DB_ALIAS
from django.db.backends.postgresql import base
from psycopg_pool import ConnectionPool


def _spoke(fileno: int) -> bool:
    """Whether the socket has something to read (or has been closed)."""
    if not hasattr(select, "poll"):  # Windows: its select() takes any socket
        return bool(select.select([fileno], [], [fileno], 0)[0])
    poller = select.poll()
    poller.register(fileno, select.POLLIN | select.POLLPRI | select.POLLERR | select.POLLHUP)
    return bool(poller.poll(0))


def check_connection(conn: psycopg.Connection[Any]) -> None:
    """The pool's check of a connection it hands out: raises if it is unusable."""
    if conn.closed or conn.broken:
        raise psycopg.OperationalError("the connection is closed")
    if _spoke(conn.fileno()):
        ConnectionPool.check_connection(conn)


class DatabaseWrapper(base.DatabaseWrapper):
    # Django's, which its type stubs do not declare.
    _connection_pools: ClassVar[dict[str, ConnectionPool[Any]]]
    _configure_connection: Callable[[psycopg.Connection[Any]], Any]

    @property
    def pool(self) -> ConnectionPool[Any] | None:
        # Django's own pool set-up (django.db.backends.postgresql.base), with the
        # check above in place of ConnectionPool.check_connection.
        pool_options = self.settings_dict["OPTIONS"].get("pool")
        if self.alias == NO_DB_ALIAS or not pool_options:
            return None
        if self.alias not in self._connection_pools:
            if self.settings_dict.get("CONN_MAX_AGE", 0) != 0:
                raise ImproperlyConfigured("Pooling doesn't support persistent connections.")
            if pool_options is True:
                pool_options = {}
            connect_kwargs = self.get_connection_params()
            connect_kwargs["autocommit"] = True
            checks = self.settings_dict["CONN_HEALTH_CHECKS"]
            pool = ConnectionPool(
                kwargs=connect_kwargs,
                open=False,
                configure=self._configure_connection,
                check=check_connection if checks else None,
                **pool_options,
            )
            self._connection_pools.setdefault(self.alias, pool)
        return self._connection_pools[self.alias]
