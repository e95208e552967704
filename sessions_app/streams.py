"""What the live streams (WebSocket and Server-Sent Events) share.

A subscriber names the last sequence number it saw. It first joins the session's
channel-layer group, then reads what it missed from the database, then takes live
events. Joining first means nothing committed after the read can be missed; events
that arrive both ways, or out of order from several workers, are put right by
their sequence numbers: a duplicate is dropped, and a gap is filled from the
database (an event published means everything before it is committed, because
sequence numbers are handed out under the session's row lock). A subscriber whose
gap is too large to fill is told to reconnect from its last sequence (``resync``).

Token deltas are not stored, so a subscriber that joins mid-answer is sent the text
of each turn still being answered as the turn loop last checkpointed it (about once
a second), then the live deltas from there: each delta says where its piece begins
in the turn's text (``offset``), and a :class:`Stitcher` makes every turn's text
arrive whole, in order, each character once.
"""

from __future__ import annotations

import asyncio
import io
import logging
import time
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass, field
from importlib import import_module
from typing import Any
from urllib.parse import urlsplit
from uuid import UUID

from channels.db import database_sync_to_async
from django.conf import settings
from django.contrib import auth
from django.core.exceptions import DisallowedHost
from django.core.handlers.asgi import ASGIRequest
from django.db import OperationalError
from django.db.models import Q
from django.http import HttpRequest
from django.utils import timezone
from django.utils.http import is_same_domain

from goaai.runtime import rt
from goaai.runtime.types import StreamedText
from goaai.runtime.vocabulary import RUN_END_EVENT_TYPES, EventType
from sessions_app import eventlog
from sessions_app.access import can_read_session
from sessions_app.models import ApiToken
from sessions_app.publisher import access_group, browser_group, publisher, token_group

logger = logging.getLogger(__name__)

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
    return True if can_read_session(user, session_id) else None


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


# Streamed text

# How soon, at the earliest, a subscriber holding text beyond a hole reads the
# checkpoints again (the loop writes one about every second).
REREAD_SECONDS = 0.25


@database_sync_to_async
def streaming_turns(session_id: UUID) -> list[StreamedText]:
    """The text the session's turns still being answered have streamed so far."""
    return rt.store.streaming_turns(session_id)


async def checkpoints_again(session_id: UUID) -> list[StreamedText]:
    """The checkpointed text read again to fill a subscriber's hole; nothing if the
    database refuses the read for a moment (a locked table, a dropped connection):
    the text stays held, and the next piece that arrives asks again."""
    try:
        texts: list[StreamedText] = await streaming_turns(session_id)
    except OperationalError:
        logger.warning("session %s: checkpoints not read, asking again later", session_id)
        return []
    return texts


@dataclass
class _TurnText:
    """What one subscriber was sent of one turn's text."""

    run: str
    sent: int = 0
    # Pieces that begin beyond ``sent`` (a hole before them), by offset.
    held: dict[int, str] = field(default_factory=dict)


class Stitcher:
    """One subscriber's streamed text of each turn: whole from its first character,
    in order, each character once.

    A live delta whose piece lies wholly within what the subscriber has is dropped,
    one that overlaps it is trimmed, and one that begins beyond it (a hole: pieces
    published before the subscriber joined, or dropped by the channel layer) is
    held until the turn's checkpointed text, read again (:meth:`wants_checkpoints`,
    :meth:`checkpoints`), covers the hole. The loop writes a checkpoint before it
    publishes the piece that triggered it, so one read after that piece arrived
    always covers everything before it. A turn's ``message.completed`` (or its
    run's end) ends its stream: its complete text is in that event. A retried model
    call (``model.retry``) streams its text anew, from offset 0, as the
    subscriber's page starts it anew.

    Plain Python: the caller reads the database and sends the frames.
    """

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._turns: dict[str, _TurnText] = {}
        self._ended: set[str] = set()
        self._read_at = float("-inf")

    def observe(self, events: Iterable[dict[str, Any]]) -> None:
        """Take note of the events sent to the subscriber, in the order sent."""
        for event in events:
            kind, data = event["type"], event.get("data") or {}
            turn = str(data.get("turn") or "")
            if kind in (EventType.MESSAGE_COMPLETED, EventType.TURN_COMPLETED):
                self._end(turn)
            elif kind == EventType.MODEL_RETRY:
                self._turns.pop(turn, None)
            elif kind in RUN_END_EVENT_TYPES:
                run = str(event.get("run"))
                for ended in [t for t, state in self._turns.items() if state.run == run]:
                    self._end(ended)

    def caught_up(self, texts: Iterable[StreamedText]) -> list[dict[str, Any]]:
        """The delta frames that bring the subscriber up to each open turn's
        checkpointed text (read after the stored events were sent)."""
        self._read_at = self._clock()
        return self._apply(texts, only_held=False)

    def delta(self, message: dict[str, Any]) -> list[dict[str, Any]]:
        """The frames a live delta (a ``run.delta`` message) becomes: none, its
        piece (perhaps trimmed), or its piece and the held ones it joins up with."""
        turn, text, offset = str(message["turn"]), str(message["text"]), message.get("offset")
        if turn in self._ended:
            return []
        if not isinstance(offset, int):
            # Sent by a publisher that does not say where pieces begin: passed on.
            return [_delta_frame(str(message["run"]), turn, None, text)]
        state = self._turns.setdefault(turn, _TurnText(run=str(message["run"])))
        if offset > state.sent:
            if len(text) > len(state.held.get(offset, "")):
                state.held[offset] = text
            return []
        return self._send(turn, state, offset, text) + self._flush(turn, state)

    def wants_checkpoints(self) -> bool:
        """Whether to read the checkpoints again now: text is held beyond a hole,
        and they were not read in the last :data:`REREAD_SECONDS`."""
        holding = any(state.held for state in self._turns.values())
        return holding and self._clock() - self._read_at >= REREAD_SECONDS

    def checkpoints(self, texts: Iterable[StreamedText]) -> list[dict[str, Any]]:
        """The frames the checkpoints read again fill holes with, and the held
        pieces that then follow on."""
        self._read_at = self._clock()
        return self._apply(texts, only_held=True)

    def _apply(self, texts: Iterable[StreamedText], *, only_held: bool) -> list[dict[str, Any]]:
        frames: list[dict[str, Any]] = []
        for run_id, turn_id, text in texts:
            turn = str(turn_id)
            state = self._turns.get(turn)
            if turn in self._ended or (only_held and (state is None or not state.held)):
                # A turn the subscriber holds nothing of is left to its live deltas:
                # its events may not have reached the subscriber yet.
                continue
            if state is None:
                state = self._turns[turn] = _TurnText(run=str(run_id))
            frames += self._send(turn, state, 0, text) + self._flush(turn, state)
        return frames

    @staticmethod
    def _send(turn: str, state: _TurnText, offset: int, text: str) -> list[dict[str, Any]]:
        """``text`` at ``offset`` (not beyond what was sent), less what was sent."""
        end = offset + len(text)
        if end <= state.sent:
            return []
        frame = _delta_frame(state.run, turn, state.sent, text[state.sent - offset :])
        state.sent = end
        return [frame]

    def _flush(self, turn: str, state: _TurnText) -> list[dict[str, Any]]:
        """The held pieces that now follow on from what was sent, in order."""
        frames: list[dict[str, Any]] = []
        for offset in sorted(state.held):
            if offset > state.sent:
                break
            frames += self._send(turn, state, offset, state.held.pop(offset))
        return frames

    def _end(self, turn: str) -> None:
        self._turns.pop(turn, None)
        self._ended.add(turn)


def encoded_events(message: dict[str, Any]) -> dict[int, str]:
    """The JSON of each event of a live ``session.events`` message, by its number,
    as the publisher encoded it once for every subscriber."""
    encoded = message.get("encoded") or ()
    return {
        event["seq"]: text
        for event, text in zip(message["events"], encoded, strict=False)
        if text is not None
    }


def join_steps(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``messages`` a subscriber received, in order, with consecutive steps of live
    events joined into one ``session.events`` message (sent as one ``events`` frame
    to a socket that asked for them so), each event still with the JSON the
    publisher encoded for it."""
    joined: list[dict[str, Any]] = []
    for message in messages:
        last = joined[-1] if joined else None
        if (
            last is None
            or message.get("type") != "session.events"
            or last.get("type") != "session.events"
        ):
            joined.append(message)
            continue
        joined[-1] = {
            "type": "session.events",
            "events": [*last["events"], *message["events"]],
            "encoded": [*_texts(last), *_texts(message)],
        }
    return joined


def _texts(message: dict[str, Any]) -> list[str | None]:
    # Each event's encoded JSON, None where the message carries none for it.
    encoded = list(message.get("encoded") or ())
    return [*encoded, *[None] * (len(message["events"]) - len(encoded))][: len(message["events"])]


def delta_frame(message: dict[str, Any], frames: list[dict[str, Any]]) -> str | None:
    """The frame the publisher encoded for a live delta, if ``frames`` (what the
    subscriber's :class:`Stitcher` made of it) is that piece unchanged."""
    encoded = message.get("encoded")
    if encoded is None or len(frames) != 1:
        return None
    frame = frames[0]
    same = frame.get("offset") == message.get("offset") and frame["text"] == message["text"]
    return str(encoded) if same else None


def _delta_frame(run: str, turn: str, offset: int | None, text: str) -> dict[str, Any]:
    frame: dict[str, Any] = {"type": "delta", "run": run, "turn": turn}
    if offset is not None:
        frame["offset"] = offset
    frame["text"] = text
    return frame


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


# The WebSocket schemes, as the HTTP schemes of the page that opens the socket.
_PAGE_SCHEMES = {"ws": "http", "wss": "https"}


def handshake_request(scope: dict[str, Any]) -> HttpRequest:
    """A WebSocket handshake as the Django request it is (a GET with the same
    headers), so that its scheme and host are read as Django reads every request's:
    the scheme behind ``SECURE_PROXY_SSL_HEADER``, the host behind
    ``USE_X_FORWARDED_HOST`` and checked against ``ALLOWED_HOSTS``."""
    scheme = _PAGE_SCHEMES.get(scope.get("scheme") or "ws", "http")
    return ASGIRequest({**scope, "type": "http", "method": "GET", "scheme": scheme}, io.BytesIO())


def origin_allowed(request: HttpRequest) -> bool:
    """Whether a browser's page may open a live stream: its ``Origin`` must be this
    site's own (scheme, host and port, exactly, as the request reached the site) or
    one of ``CSRF_TRUSTED_ORIGINS``, compared as Django's CSRF check compares them.

    A WebSocket has no same-origin policy: without this, any page a signed-in user
    visits could read their sessions with their cookie. Browsers always send
    ``Origin`` on a WebSocket and on a cross-origin request; a client that sends
    none is no browser and is judged by its credentials alone.
    """
    origin = request.headers.get("Origin")
    if origin is None:
        return True
    try:
        if origin == f"{request.scheme}://{request.get_host()}":
            return True
    except DisallowedHost:
        pass  # a host this site does not serve (a rebound DNS name) is not ours
    return _trusted_origin(origin)


def _trusted_origin(origin: str) -> bool:
    # As django.middleware.csrf.CsrfViewMiddleware._origin_verified: exact origins,
    # and "scheme://*.domain" for a domain and its subdomains.
    trusted = settings.CSRF_TRUSTED_ORIGINS
    if origin in {o for o in trusted if "*" not in o}:
        return True
    try:
        parts = urlsplit(origin)
    except ValueError:
        return False
    return any(
        is_same_domain(parts.netloc, wildcard.netloc.lstrip("*"))
        for wildcard in map(urlsplit, (o for o in trusted if "*" in o))
        if wildcard.scheme == parts.scheme
    )


# Access that changes while a stream is open


@dataclass(frozen=True)
class Watcher:
    """Who a stream is open for and the credentials it was opened with.

    A stream listens on the groups of its credentials (:meth:`groups`). A revoked
    token or a browser session that signs out ends it at once; a change to the
    user (deactivated, demoted, a permission or group taken away, a new password)
    makes it ask :func:`still_allowed` again, with the same question it was opened
    with, and end if the answer is no.
    """

    user_id: int
    token_id: UUID | None = None
    # The key of the browser session whose cookie opened the stream.
    browser_session: str | None = None

    def groups(self) -> list[str]:
        groups = [access_group(self.user_id)]
        if self.token_id is not None:
            groups.append(token_group(self.token_id))
        if self.browser_session is not None:
            groups.append(browser_group(self.browser_session))
        return groups


@database_sync_to_async
def _current_user(watcher: Watcher) -> Any | None:
    """The stream's user as they are now, if its credentials still sign them in."""
    user: Any
    if watcher.token_id is not None:
        live = ApiToken.objects.filter(
            Q(expires_at__isnull=True) | Q(expires_at__gt=timezone.now()),
            pk=watcher.token_id,
            revoked_at__isnull=True,
        )
        if not live.exists():
            return None
        user = auth.get_user_model()._default_manager.filter(pk=watcher.user_id).first()
    elif watcher.browser_session is not None:
        # The browser session read afresh, as its next request would read it: gone
        # once signed out, and refused once the password changed.
        request = HttpRequest()
        request.session = import_module(settings.SESSION_ENGINE).SessionStore(
            watcher.browser_session
        )
        user = auth.get_user(request)
    else:
        return None
    if user is None or not user.is_authenticated or not user.is_active:
        return None
    return user if user.pk == watcher.user_id else None


async def still_allowed(watcher: Watcher, session_id: UUID | None = None) -> Any | None:
    """The stream's user, read afresh, if the stream may stay open: its credentials
    still sign them in and, for a session's stream, they may still read the session
    (asked with :func:`session_visible`, as when the stream was opened)."""
    user = await _current_user(watcher)
    if user is None:
        return None
    if session_id is not None and not await session_visible(session_id, user):
        return None
    return user


def parse_after(raw: str | None) -> int | None:
    """``after`` from a query string or ``Last-Event-ID``: a non-negative integer."""
    if raw is None or raw == "":
        return 0
    if not (raw.isascii() and raw.isdigit()) or len(raw) > 18:
        return None
    return int(raw)
