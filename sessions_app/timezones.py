"""The time zone the pages show times in, one for the whole page.

A user's choice on their settings page (:class:`~sessions_app.models.UserPreferences`)
wins; without one, the browser's own time zone, which every page's script writes to
the :data:`COOKIE_NAME` cookie (``Intl.DateTimeFormat().resolvedOptions().timeZone``);
without that either (a first visit), the server's ``TIME_ZONE``. The middleware
activates it (``django.utils.timezone.activate``) for the request, so that templates,
the session list's Today/Yesterday groups and the admin all agree with each other;
the page names it in ``<meta name="time-zone">`` for its script, which formats the
times it writes in the same zone and the same 24-hour format.

The REST API, the OpenAI-compatible API and the probes are left alone: their
timestamps stay in UTC whoever asks, as their contract says.
"""

from __future__ import annotations

import functools
import re
import zoneinfo
from collections.abc import Callable
from typing import Any

from django.http import HttpRequest, HttpResponse
from django.utils import timezone

from sessions_app.selectors import user_preferences

COOKIE_NAME = "goaai_tz"
# Where the page's time zone came from (the page's script reads it too).
FROM_PREFERENCES = "preferences"
FROM_BROWSER = "browser"
FROM_SERVER = "server"

# Paths whose answers are not pages: their times stay in UTC.
_NOT_PAGES = ("/api/", "/v1/", "/mcp", "/healthz", "/readyz", "/metrics", "/static/")
# IANA names are letters, digits and _ + - / (the longest is under 40 characters).
_NAME = re.compile(r"[A-Za-z0-9_+\-]+(?:/[A-Za-z0-9_+\-]+)*")
_MAX_NAME = 64
# Files of the zone database that are no place's time zone.
_NOT_ZONES = frozenset({"localtime", "posixrules", "Factory"})


@functools.cache
def _known_zones() -> frozenset[str]:
    return frozenset(zoneinfo.available_timezones()) - _NOT_ZONES


@functools.cache
def time_zones() -> tuple[str, ...]:
    """Every time zone a user may choose, by IANA name, in alphabetical order."""
    return tuple(sorted(_known_zones()))


def is_time_zone(name: str) -> bool:
    """Whether ``name`` is the IANA name of a time zone this system knows."""
    return time_zone_named(name) is not None


def time_zone_named(name: str | None) -> zoneinfo.ZoneInfo | None:
    """The time zone with this IANA name (``"America/Los_Angeles"``), or ``None``
    when it names none: anything a client sends is checked against the zone
    database before it is used."""
    if not name or len(name) > _MAX_NAME or not _NAME.fullmatch(name):
        return None
    if name not in _known_zones():
        return None
    try:
        return zoneinfo.ZoneInfo(name)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        return None


def _preferred_time_zone(user: Any) -> str:
    """The time zone the user chose in their preferences ("" for none)."""
    if not getattr(user, "is_authenticated", False):
        return ""
    return user_preferences(user).time_zone or ""


def request_time_zone(request: HttpRequest) -> tuple[zoneinfo.ZoneInfo | None, str]:
    """The time zone of the pages this request gets and where it came from: the
    user's preference, else the browser's cookie, else ``None`` (the server's)."""
    preferred = time_zone_named(_preferred_time_zone(request.user))
    if preferred is not None:
        return preferred, FROM_PREFERENCES
    browser = time_zone_named(request.COOKIES.get(COOKIE_NAME))
    if browser is not None:
        return browser, FROM_BROWSER
    return None, FROM_SERVER


class TimeZoneMiddleware:
    """Activates the page's time zone (:func:`request_time_zone`) for the request.
    After the authentication middleware: the user's preference needs the user."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if request.path_info.startswith(_NOT_PAGES):
            return self.get_response(request)
        zone, source = request_time_zone(request)
        request.time_zone_source = source  # type: ignore[attr-defined]
        if zone is None:
            timezone.deactivate()
        else:
            timezone.activate(zone)
        try:
            return self.get_response(request)
        finally:
            timezone.deactivate()
