"""What the live streams (WebSocket and Server-Sent Events) share.

A subscriber names the last sequence number it saw. It first joins the session's
channel-layer group, then reads what it missed from the database, then takes live
events. Joining first means nothing committed after the read can be missed; events
that arrive both ways, or out of order from several workers, are put right by
their sequence numbers: a duplicate is dropped, and a gap is filled from the
database (an event published means everything before it is committed, because
sequence numbers are handed out under the session's row lock). A subscriber whose
gap is too large to fill is told to reconnect from its last sequence (``resync``).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit
from uuid import UUID

from channels.db import database_sync_to_async
from django.conf import settings
from django.http.request import split_domain_port, validate_host

from sessions_app import eventlog
from sessions_app.models import Session
from sessions_app.publisher import publisher

# The most events a stream reads from the database in one query.
CATCH_UP_PAGE = 500
# A live subscriber that missed more than this many events is sent ``resync``
# instead of a catch-up that would hold up its live events for long.
MAX_LIVE_GAP = 5000

# Close codes (documented in the README and API.md).
CLOSE_NOT_AUTHENTICATED = 4401
CLOSE_NOT_ALLOWED = 4403
CLOSE_NO_SESSION = 4404
CLOSE_RESYNC = 4409


@database_sync_to_async
def events_after(session_id: UUID, after: int, limit: int = CATCH_UP_PAGE) -> list[dict[str, Any]]:
    rows = eventlog.events_after(session_id=session_id, after=after, limit=limit)
    return [event.as_dict() for event in rows]


@database_sync_to_async
def session_visible(session_id: UUID, user: Any) -> bool | None:
    """``True`` if ``user`` may watch the session, ``None`` if it does not exist for
    them (someone else's session is "not found", as in the REST API)."""
    owner_id = Session.objects.filter(pk=session_id).values_list("owner_id", flat=True).first()
    if owner_id is None or (owner_id != user.pk and not user.is_staff):
        return None
    return True


@dataclass
class Sequencer:
    """Keeps one subscriber's events in order, without gaps or duplicates."""

    session_id: UUID
    last: int = 0
    # Events that arrived ahead of a gap, kept until the gap is filled.
    held: dict[int, dict[str, Any]] = field(default_factory=dict)

    def take(self, events: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], bool]:
        """The events to send now, in order, and whether there is a gap to fill."""
        for event in events:
            if event["seq"] > self.last:
                self.held[event["seq"]] = event
        ready = []
        while self.last + 1 in self.held:
            self.last += 1
            ready.append(self.held.pop(self.last))
        return ready, bool(self.held)

    def gap(self) -> int:
        return min(self.held) - self.last - 1 if self.held else 0

    async def fill(self) -> list[dict[str, Any]]:
        """Read what is missing from the database; returns it, in order."""
        sent: list[dict[str, Any]] = []
        while self.held:
            page = await events_after(self.session_id, self.last)
            if not page:
                break
            ready, _ = self.take(page)
            if not ready:  # the missing events are gone (the session was deleted)
                break
            sent.extend(ready)
        return sent


async def subscribe(layer: Any, group: str, channel: str) -> None:
    """Join ``group``; in-memory messages are then delivered on this event loop."""
    publisher.attach_loop(asyncio.get_running_loop())
    await layer.group_add(group, channel)


async def stored_after(sequencer: Sequencer) -> AsyncIterator[list[dict[str, Any]]]:
    """Every stored event after the last one ``sequencer`` let through, in order,
    a page at a time (a long backlog is sent as it is read, never held whole)."""
    while True:
        page = await events_after(sequencer.session_id, sequencer.last)
        ready = sequencer.take(page)[0]
        if ready:
            yield ready
        if len(page) < CATCH_UP_PAGE:
            return


def origin_allowed(headers: dict[bytes, bytes]) -> bool:
    """A browser's ``Origin`` must name this site (its allowed hosts or trusted
    origins); non-browser clients send none and authenticate with a token."""
    raw = headers.get(b"origin")
    if raw is None:
        return True
    origin = raw.decode("latin1")
    if origin in settings.CSRF_TRUSTED_ORIGINS:
        return True
    domain, _ = split_domain_port(urlsplit(origin).netloc)
    if not domain:
        return False
    allowed = list(settings.ALLOWED_HOSTS)
    if settings.DEBUG and not allowed:
        allowed = [".localhost", "127.0.0.1", "[::1]"]
    return validate_host(domain, allowed)


def parse_after(raw: str | None) -> int | None:
    """``after`` from a query string or ``Last-Event-ID``: a non-negative integer."""
    if raw is None or raw == "":
        return 0
    if not (raw.isascii() and raw.isdigit()) or len(raw) > 18:
        return None
    return int(raw)
