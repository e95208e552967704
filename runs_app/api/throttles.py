"""Limits on starting runs, which cost model tokens: per user and per API token.

A user's limit counts every credential together (browser and all tokens); a
token's own, lower limit keeps one runaway integration from using up its user's.
Rates come from ``GOAAI_THROTTLE_RATES`` when a request is checked, so they can be
changed without a restart of the class machinery.
"""

from __future__ import annotations

import time
import uuid
from types import SimpleNamespace
from typing import Any

from django.conf import settings
from django.core.cache import cache, caches
from django.core.cache.backends.redis import RedisCache
from redis.commands.core import Script
from redis.exceptions import RedisError
from rest_framework.request import Request
from rest_framework.throttling import SimpleRateThrottle

from runs_app.api.unavailable import ServiceUnavailable
from sessions_app.models import ApiToken

# What reading or writing a counter raises when the cache cannot be reached: the
# Redis client's errors, and the socket's for other backends.
CACHE_ERRORS = (RedisError, OSError)


class _RunThrottle(SimpleRateThrottle):
    def get_rate(self) -> str | None:
        # An empty rate (GOAAI_RUN_RATE_PER_TOKEN=) means no limit, as a missing one.
        rate: str | None = settings.GOAAI_THROTTLE_RATES.get(self.scope or "") or None
        return rate

    def counter(self, request: Request, view: Any) -> str | None:
        """The cache key of the request's counter, or ``None`` when this limit does
        not apply (no rate, or no one to count). Reads the rate per request: tests
        and settings changes take effect at once."""
        self.rate = self.get_rate()
        self.num_requests, self.duration = self.parse_rate(self.rate)
        self.key = None if self.rate is None else self.get_cache_key(request, view)
        return self.key

    def allows(self, history: list[float]) -> bool:
        """Whether the counter's ``history`` (the times it counted, newest first, as
        read from the cache) leaves room for one more request now; SimpleRateThrottle's
        check, on a history read with the request's other limits."""
        self.history = list(history)
        self.now = self.timer()
        duration, limit = self.duration, self.num_requests
        if duration is None or limit is None:  # no rate: no limit
            return True
        while self.history and self.history[-1] <= self.now - duration:
            self.history.pop()
        return len(self.history) < limit

    def allow_request(self, request: Request, view: Any) -> bool:
        key = self.counter(request, view)
        return key is None or self.allows(self.cache.get(key, []))

    def counted(self) -> list[float]:
        """The history with this request counted (see :func:`run_start_throttle`)."""
        return [self.now, *self.history]

    def refused(self, now: float, count: int, oldest: float) -> float | None:
        """What :meth:`wait` says for a counter that a Redis script found full:
        ``count`` requests in the window, the oldest at ``oldest``."""
        self.now, self.history = now, [oldest] * count
        return self.wait()


class RunStartThrottled(Exception):
    """A limit on starting runs is reached; ``wait``: seconds until one is free
    (``None`` when unknown)."""

    def __init__(self, wait: float | None) -> None:
        super().__init__("Too many runs started.")
        self.wait = wait


def run_start_throttle(*, user: Any, token: Any) -> None:
    """Count a run ``user`` starts (with API ``token``, if any) against their
    limits, or refuse it with :class:`RunStartThrottled` if any is reached; the
    same counters whichever way the run is started (the REST API, ``/v1/``, MCP).

    A request one limit refuses is counted against none. The counters live in the
    cache (Redis when there is one, where one script checks and counts a start in
    one round trip, atomically): while it cannot be reached,
    :class:`ServiceUnavailable`, before anything is written. Letting runs through
    uncounted would lift every limit for as long as Redis is away."""
    request = SimpleNamespace(user=user, auth=token)
    throttles = [RunCreateUserThrottle(), RunCreateTokenThrottle()]
    counting = [t for t in throttles if t.counter(request, None) is not None]  # type: ignore[arg-type]
    if not counting:
        return
    try:
        backend = caches["default"]
        if isinstance(backend, RedisCache):
            waits = _count_in_redis(backend, counting)
        else:
            # Every limit's counter read in one call, and written in one per window.
            found = cache.get_many([t.key for t in counting])
            waits = [t.wait() for t in counting if not t.allows(found.get(t.key, []))]
            if not waits:
                for duration in {t.duration for t in counting}:
                    counted = {t.key: t.counted() for t in counting if t.duration == duration}
                    cache.set_many(counted, duration)
    except CACHE_ERRORS as exc:
        raise ServiceUnavailable(
            "Runs cannot be started for a moment (the rate limit counters are unavailable); "
            "retry shortly.",
            code="rate_limits_unavailable",
        ) from exc
    if waits:
        raise RunStartThrottled(max((w for w in waits if w is not None), default=None))


# Checks every counter of a start and, if none is full, counts the start in each:
# one round trip, and two starts at the same moment cannot both take a counter's
# last place. A counter is a sorted set of the times it counted (each start a
# member of its own); those older than its window are dropped first. KEYS: the
# counters; ARGV: now, the start's member, then each counter's limit and window
# in seconds. Returns, for each full counter, its position, size and oldest time.
_COUNT_START = """
local now = tonumber(ARGV[1])
local full = {}
for i, key in ipairs(KEYS) do
  local limit, window = tonumber(ARGV[2 * i + 1]), tonumber(ARGV[2 * i + 2])
  redis.call('ZREMRANGEBYSCORE', key, '-inf', now - window)
  local count = redis.call('ZCARD', key)
  if count >= limit then
    local oldest = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')
    table.insert(full, {i, count, oldest[2] or ARGV[1]})
  end
end
if #full == 0 then
  for i, key in ipairs(KEYS) do
    redis.call('ZADD', key, now, ARGV[2])
    redis.call('EXPIRE', key, math.ceil(tonumber(ARGV[2 * i + 2])))
  end
end
return full
"""
_count_start: Script | None = None


def _count_in_redis(backend: RedisCache, counting: list[_RunThrottle]) -> list[float | None]:
    """:func:`run_start_throttle`'s check and count on Redis, in one script; what
    each full counter says to wait (none: the start is counted)."""
    global _count_start
    # The client Django's Redis backend keeps (RedisCacheClient), with the
    # connections its get and set use.
    client = backend._cache.get_client(write=True)  # type: ignore[attr-defined]
    script = _count_start = _count_start or client.register_script(_COUNT_START)
    now = time.time()
    # Not the counters the cache's own get and set keep (a list of times each).
    keys = [backend.make_and_validate_key(f"{t.key}:window") for t in counting]
    limits = [int(value or 0) for t in counting for value in (t.num_requests, t.duration)]
    full = script(keys=keys, args=[repr(now), uuid.uuid4().hex, *limits], client=client)
    return [counting[i - 1].refused(now, count, float(oldest)) for i, count, oldest in full]


def check_run_throttles(view: Any, request: Request) -> None:
    """:func:`run_start_throttle` for an API view: a refusal is the view's 429."""
    try:
        run_start_throttle(user=request.user, token=request.auth)
    except RunStartThrottled as refused:
        view.throttled(request, refused.wait)


class RunCreateUserThrottle(_RunThrottle):
    scope = "run_create_user"

    def get_cache_key(self, request: Request, view: Any) -> str | None:
        if not request.user or not request.user.is_authenticated:
            return None
        return f"throttle:{self.scope}:{request.user.pk}"


class RunCreateTokenThrottle(_RunThrottle):
    scope = "run_create_token"

    def get_cache_key(self, request: Request, view: Any) -> str | None:
        if not isinstance(request.auth, ApiToken):
            return None
        return f"throttle:{self.scope}:{request.auth.pk}"
