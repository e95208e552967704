"""One pool of Redis connections per process for Django's cache.

Django keeps a cache object per thread, and its Redis backend gives each cache
object a connection pool of its own. An ASGI server runs each request's middleware
and view in a thread made for that request (Django's thread-sensitive context), so
every request that used the cache (a run start counts itself against the rate
limits there) built a pool, opened a new connection to Redis, with its connect and
handshake, and left it to the garbage collector. :class:`SharedConnectionPool`, the
cache's ``pool_class``, hands every cache object of a process the same pool for the
same server and options: a request takes a connection that is already open.
redis-py's pools are thread-safe and start afresh in a forked child.
"""

from __future__ import annotations

import threading
from typing import Any

import redis


class SharedConnectionPool(redis.ConnectionPool):
    """A ``redis.ConnectionPool`` whose ``from_url`` gives the process's one pool for
    that URL and those options."""

    _shared: dict[tuple[str, str], SharedConnectionPool] = {}
    _shared_lock = threading.Lock()

    @classmethod
    def from_url(cls, url: str, **kwargs: Any) -> SharedConnectionPool:
        key = (url, repr(sorted(kwargs.items(), key=lambda item: item[0])))
        with cls._shared_lock:
            pool = cls._shared.get(key)
            if pool is None:
                pool = cls._shared[key] = super().from_url(url, **kwargs)
            return pool
