"""Model profiles' limits shared by every server and worker, through Redis.

The runtime counts a profile's requests in its own process
(:class:`goaai.runtime.limits.LocalLimits`); with ``REDIS_URL`` set, goaai installs
these instead, so that ``max_concurrency`` and ``requests_per_minute`` hold for the
whole deployment. Places for concurrent requests are leases in a Redis sorted set:
a process that dies holding one loses it when the lease ends (``LEASE_SECONDS``),
so a crash cannot shrink a profile's capacity for good. Requests per minute are the
``limits`` package's moving window on the same Redis.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import redis
from django.conf import settings

from goaai.runtime.config import ModelProfile
from goaai.runtime.limits import LocalLimits, MinuteWindow, ModelLimits, Wait

logger = logging.getLogger(__name__)

# How long a place for a concurrent request is held at most: longer than any model
# call (profile timeouts are per read, a streamed reply may take minutes).
LEASE_SECONDS = 600.0
POLL_SECONDS = 0.05

# Takes a place if fewer than ARGV[2] unexpired leases are held: KEYS[1] is the
# profile's sorted set (lease id -> expiry), ARGV[1] now, ARGV[3] the new lease's
# expiry, ARGV[4] its id.
_ACQUIRE = """
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', ARGV[1])
if redis.call('ZCARD', KEYS[1]) < tonumber(ARGV[2]) then
  redis.call('ZADD', KEYS[1], ARGV[3], ARGV[4])
  redis.call('EXPIRE', KEYS[1], math.ceil(tonumber(ARGV[5])))
  return 1
end
return 0
"""


class RedisLimits:
    """The limits of every process that shares the Redis at ``url``."""

    def __init__(self, url: str, *, prefix: str = "goaai:model-limits") -> None:
        self._redis = redis.Redis.from_url(url, socket_timeout=5, socket_connect_timeout=3)
        self._errors: tuple[type[Exception], ...] = (redis.RedisError, OSError)
        self._acquire = self._redis.register_script(_ACQUIRE)
        self._prefix = prefix
        self._window = MinuteWindow(_limits_uri(url), prefix)

    @contextmanager
    def slot(self, profile: ModelProfile, wait: Wait = time.sleep) -> Iterator[None]:
        key = f"{self._prefix}:{profile.name}:places"
        lease = uuid.uuid4().hex
        try:
            held = self._take(profile, key, lease, wait)
        except self._errors as exc:
            # Without Redis the limits cannot be shared; the request goes out rather
            # than the run failing (the provider's 429s are still retried).
            logger.warning("Model limits of %s unavailable: %s", profile.name, exc)
            held = False
        try:
            yield
        finally:
            if held:
                try:
                    self._redis.zrem(key, lease)
                except self._errors:
                    logger.warning(
                        "Could not give back a place of %s; it ends with its lease", profile.name
                    )

    def _take(self, profile: ModelProfile, key: str, lease: str, wait: Wait) -> bool:
        held = False
        if profile.max_concurrency is not None:
            while True:
                now = time.time()
                taken = self._acquire(
                    keys=[key],
                    args=[now, profile.max_concurrency, now + LEASE_SECONDS, lease, LEASE_SECONDS],
                )
                if taken:
                    held = True
                    break
                wait(POLL_SECONDS)
        try:
            self._window.take(profile, wait)
        except BaseException:
            if held:
                self._redis.zrem(key, lease)
            raise
        return held


def _limits_uri(url: str) -> str:
    # The ``limits`` package names its Redis storage by the same URL schemes.
    return url if url.startswith(("redis://", "rediss://", "redis+unix://")) else f"redis://{url}"


def model_limits() -> ModelLimits:
    """Shared limits when the deployment has Redis, this process's otherwise."""
    return RedisLimits(settings.REDIS_URL) if settings.REDIS_URL else LocalLimits()
