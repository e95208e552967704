"""Health endpoints for load balancers and orchestrators.

``/healthz`` (liveness) says the process answers: it touches nothing else, so a
database outage does not get every server restarted. ``/readyz`` (readiness) says
whether this server can do its work: the database answers a query and, when
``REDIS_URL`` is set, Redis answers a ping; otherwise 503 naming the dependency
that failed (the reason goes to the log), so that the load balancer sends
requests elsewhere until it recovers.

Both are cheap, take no credentials and set no cookie: a probe is not a user.
"""

from __future__ import annotations

import logging
from functools import cache

import redis
from django.conf import settings
from django.db import connections
from django.http import HttpRequest, JsonResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_safe

logger = logging.getLogger(__name__)

# A probe that waits longer than its own timeout tells the load balancer nothing.
_REDIS_TIMEOUT_SECONDS = 1.0


@cache
def redis_client(url: str) -> redis.Redis:
    """A client with short timeouts for probes and scrapes: one (and its connection
    pool) per URL for the life of the process."""
    return redis.Redis.from_url(
        url,
        socket_connect_timeout=_REDIS_TIMEOUT_SECONDS,
        socket_timeout=_REDIS_TIMEOUT_SECONDS,
    )


def _database_answers() -> bool:
    try:
        with connections["default"].cursor() as cursor:
            cursor.execute("SELECT 1")
            cursor.fetchone()
    except Exception:  # whatever the failure, the server is not ready
        logger.warning("Readiness: the database does not answer", exc_info=True)
        return False
    return True


def _redis_answers(url: str) -> bool:
    try:
        redis_client(url).ping()
    except (redis.RedisError, OSError):
        logger.warning("Readiness: Redis does not answer", exc_info=True)
        return False
    return True


@never_cache
@require_safe
def healthz(request: HttpRequest) -> JsonResponse:
    """Liveness: the process answers. No dependency is checked."""
    return JsonResponse({"status": "ok"})


@never_cache
@require_safe
def readyz(request: HttpRequest) -> JsonResponse:
    """Readiness: 200 when every configured dependency answers, else 503 naming the
    ones that do not. Why they failed goes to the log, not to an anonymous caller."""
    answers = {"database": _database_answers()}
    redis_url = str(settings.REDIS_URL or "")
    if redis_url:
        answers["redis"] = _redis_answers(redis_url)
    checks = {name: "ok" if fine else "failed" for name, fine in answers.items()}
    if all(answers.values()):
        return JsonResponse({"status": "ready", "checks": checks})
    failed = [name for name, fine in answers.items() if not fine]
    return JsonResponse({"status": "unavailable", "checks": checks, "failed": failed}, status=503)
