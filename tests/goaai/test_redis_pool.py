"""Django's cache on Redis, as goaai's settings configure it, keeps one pool of
connections per process: a request runs in a thread of its own, and each thread's
cache object used to open a connection of its own to Redis."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.redis

ROOT = Path(__file__).resolve().parents[2]

# Twenty "requests", each in a new thread as an ASGI server runs them, each counting
# a run start in the cache as the rate limits do.
SCRIPT = textwrap.dedent(
    """
    import threading
    import django
    import redis.connection

    # Each connection this process opens to Redis.
    opened = []
    connect = redis.connection.AbstractConnection.connect

    def counted(self, *args, **kwargs):
        if self._sock is None:
            opened.append(self)
        return connect(self, *args, **kwargs)

    redis.connection.AbstractConnection.connect = counted
    django.setup()
    from django.core.cache import caches

    def request(n):
        cache = caches["default"]
        cache.set(f"run-starts-{n}", [n], 60)
        assert cache.get(f"run-starts-{n}") == [n]

    for n in range(20):
        thread = threading.Thread(target=request, args=(n,))
        thread.start()
        thread.join()
    print(len(opened))
    """
)


def test_the_threads_of_a_process_share_their_connections_to_redis(redis_url):
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "goaai.settings",
        "REDIS_URL": redis_url,
        "LOG_LEVEL": "WARNING",
    }
    env.pop("DATABASE_URL", None)
    done = subprocess.run(  # noqa: S603
        [sys.executable, "-c", SCRIPT],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    # One connection for all twenty threads (twenty, one per thread, without the pool).
    assert done.stdout.strip() == "1"
