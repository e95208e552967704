"""Limits on starting runs, which cost model tokens: per user and per API token.

A user's limit counts every credential together (browser and all tokens); a
token's own, lower limit keeps one runaway integration from using up its user's.
Rates come from ``GOAAI_THROTTLE_RATES`` when a request is checked, so they can be
changed without a restart of the class machinery.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from rest_framework.request import Request
from rest_framework.throttling import SimpleRateThrottle

from sessions_app.models import ApiToken


class _RunThrottle(SimpleRateThrottle):
    def get_rate(self) -> str | None:
        rate: str | None = settings.GOAAI_THROTTLE_RATES.get(self.scope or "")
        return rate

    def allow_request(self, request: Request, view: Any) -> bool:
        # Read the rate per request: tests and settings changes take effect at once.
        self.rate = self.get_rate()
        self.num_requests, self.duration = self.parse_rate(self.rate)
        return super().allow_request(request, view)

    def throttle_success(self) -> bool:
        # Counted by record(), once every limit of the request allowed it: a request
        # that one limit refuses must not use up another limit's allowance.
        return True

    def record(self) -> None:
        if getattr(self, "key", None) is None:  # no rate, or no one to count
            return
        self.history.insert(0, self.now)
        self.cache.set(self.key, self.history, self.duration)


def check_run_throttles(view: Any, request: Request, throttles: list[Any]) -> None:
    """Refuse the request if any limit is reached; count it against all otherwise."""
    waits = [t.wait() for t in throttles if not t.allow_request(request, view)]
    if waits:
        view.throttled(request, max((w for w in waits if w is not None), default=None))
    for throttle in throttles:
        throttle.record()


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
