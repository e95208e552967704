"""The live streams as Server-Sent Events, for integrations without WebSockets.

``GET /api/v1/sessions/{id}/events/stream/`` sends the session's events after
``Last-Event-ID`` (or ``?after=N``) from the database, then live ones, each as
``id: <seq>``, ``event: <type>``, ``data: <event JSON>``; token deltas come as
``event: delta`` without an id (they are not stored), each with the ``offset`` its
text begins at in its turn's text, and a stream that joins mid-answer is first
sent the text streamed so far (see :class:`sessions_app.streams.Stitcher`). ``GET
/api/v1/sessions/stream/`` sends the caller's session-level changes. Both need an
ASGI server (they hold the connection open) and the same credentials as the API,
and end with ``event: error`` once those stop giving access, or once the session
is deleted (see :class:`sessions_app.streams.Watcher`).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any
from uuid import UUID

from asgiref.sync import sync_to_async
from channels.layers import get_channel_layer
from django.http import HttpRequest, JsonResponse
from django.http.response import HttpResponseBase

from goaai.api.credentials import bearer_token
from goaai.api.sse import KEEPALIVE, KEEPALIVE_SECONDS, encoded_frame, event_stream, frame
from sessions_app.api.authentication import token_user
from sessions_app.publisher import session_group, user_group
from sessions_app.streams import (
    MAX_LIVE_GAP,
    Sequencer,
    Stitcher,
    Watcher,
    checkpoints_again,
    encoded_events,
    origin_allowed,
    parse_after,
    session_visible,
    still_allowed,
    stored_after,
    streaming_turns,
    subscribe,
)


def _error(status: int, kind: str, code: str, detail: str, attr: str | None = None) -> JsonResponse:
    response = JsonResponse(
        {"type": kind, "errors": [{"code": code, "detail": detail, "attr": attr}]}, status=status
    )
    if status == 401:
        response["WWW-Authenticate"] = 'Bearer realm="goaai"'
    return response


async def _caller(request: HttpRequest) -> tuple[Any, Watcher | None]:
    """The authenticated user and the credentials they came with (``None`` if
    none), from a Bearer token or the browser session."""
    raw = bearer_token(request.headers.get("Authorization"))
    if raw is not None:
        found = await sync_to_async(token_user)(raw)
        if not found:
            return None, None
        return found[0], Watcher(user_id=found[0].pk, token_id=found[1].pk)
    user = await request.auser()
    if not user.is_authenticated:
        return None, None
    return user, Watcher(user_id=user.pk, browser_session=request.session.session_key)


def _frame(event: str, data: dict[str, Any], event_id: int | None = None) -> str:
    return frame(data, event=event, event_id=event_id)


async def _messages(channel: str) -> AsyncIterator[dict[str, Any] | None]:
    """Messages on ``channel``; ``None`` after each quiet keep-alive interval."""
    layer = get_channel_layer()
    while True:
        try:
            yield await asyncio.wait_for(layer.receive(channel), KEEPALIVE_SECONDS)
        except TimeoutError:
            yield None


_RETRY = "retry: 2000\n\n"
_TOKEN_REVOKED = _frame("error", {"code": "token_revoked", "detail": "Token revoked."})
_SIGNED_OUT = _frame("error", {"code": "signed_out", "detail": "The browser session signed out."})
_ACCESS_REVOKED = _frame(
    "error", {"code": "access_revoked", "detail": "The credentials no longer give access."}
)
_SESSION_DELETED = _frame("error", {"code": "session_deleted", "detail": "Session deleted."})


async def _stream_caller(request: HttpRequest) -> tuple[Any, Watcher] | JsonResponse:
    """Who opens a stream and with what credentials, or the response that refuses
    them.

    A page of another site is refused, as on the WebSocket. An ``EventSource``
    there could not read the stream anyway (no CORS header allows it), but it
    would hold a stream open with the user's cookie; same-origin pages send no
    ``Origin`` on a GET, and neither do non-browser clients.
    """
    if request.method != "GET":
        return _error(405, "client_error", "method_not_allowed", "Only GET.")
    if not origin_allowed(request):
        return _error(403, "client_error", "origin_not_allowed", "Open streams from this site.")
    user, watcher = await _caller(request)
    if user is None or watcher is None:
        return _error(401, "client_error", "not_authenticated", "Send credentials.")
    return user, watcher


async def _join(layer: Any, channel: str, groups: tuple[str, ...]) -> None:
    for group in groups:
        await subscribe(layer, group, channel)


async def _leave(layer: Any, channel: str, groups: tuple[str, ...]) -> None:
    for group in groups:
        await layer.group_discard(group, channel)


# Why a stream's credentials or session stopped giving access, by the message
# that says so.
_LOST = {
    "token.revoked": "token_revoked",
    "access.signed_out": "signed_out",
    "session.deleted": "session_deleted",
}
_ENDINGS = {
    "token_revoked": _TOKEN_REVOKED,
    "signed_out": _SIGNED_OUT,
    "session_deleted": _SESSION_DELETED,
    "access_revoked": _ACCESS_REVOKED,
}


async def access_lost(
    message: dict[str, Any], watcher: Watcher, session_id: UUID | None = None
) -> str | None:
    """Why a stream ends, if ``message`` (of the groups of ``watcher``'s credentials
    or of the session's) says its credentials or its session are gone:
    ``token_revoked``, ``signed_out``, ``session_deleted`` or ``access_revoked``;
    ``None`` for any other message, or while access holds."""
    kind = message["type"]
    if kind in _LOST:
        return _LOST[kind]
    if kind == "access.changed" and await still_allowed(watcher, session_id) is None:
        return "access_revoked"
    return None


async def _access_reply(
    message: dict[str, Any], watcher: Watcher, session_id: UUID | None = None
) -> str | None:
    """The frame that ends the stream, if ``message`` says its credentials or its
    session are gone; ``None`` for any other message, or while access holds."""
    lost = await access_lost(message, watcher, session_id)
    return _ENDINGS[lost] if lost is not None else None


def _event_frame(event: dict[str, Any], encoded: dict[int, str] | None = None) -> str:
    """An event's frame, around the JSON the publisher encoded for it if it did."""
    text = encoded.get(event["seq"]) if encoded else None
    if text is not None:
        return encoded_frame(text, event=event["type"], event_id=event["seq"])
    return _frame(event["type"], event, event["seq"])


@dataclass
class _Follow:
    """One stream's place in the session's log and in its turns' streamed text."""

    sequencer: Sequencer
    stitcher: Stitcher = field(default_factory=Stitcher)

    def event_frames(
        self, events: list[dict[str, Any]], encoded: dict[int, str] | None = None
    ) -> list[str]:
        self.stitcher.observe(events)
        return [_event_frame(event, encoded) for event in events]


def _delta_frames(frames: list[dict[str, Any]]) -> list[str]:
    return [_frame("delta", {k: v for k, v in frame.items() if k != "type"}) for frame in frames]


async def _stored_frames(follow: _Follow) -> AsyncIterator[str]:
    """The stored events after the sequencer's last, as frames."""
    async for events in stored_after(follow.sequencer):
        for event_frame in follow.event_frames(events):
            yield event_frame


async def _checkpoint_frames(follow: _Follow) -> list[str]:
    """Text that fills a hole in a turn's streamed text, from its checkpoint, if
    the stream holds text beyond one."""
    if not follow.stitcher.wants_checkpoints():
        return []
    texts = await checkpoints_again(follow.sequencer.session_id)
    return _delta_frames(follow.stitcher.checkpoints(texts))


async def _live_frames(follow: _Follow, message: dict[str, Any]) -> tuple[list[str], bool]:
    """Frames for the events of a message the layer delivered, gaps filled from the
    database, and whether the stream ends: past ``MAX_LIVE_GAP`` missing events the
    client is told to resync instead."""
    sequencer = follow.sequencer
    encoded = encoded_events(message)
    ready, gap = sequencer.take(message["events"])
    if gap and sequencer.gap() > MAX_LIVE_GAP:
        resync = _frame("resync", {"after": sequencer.last})
        return [*follow.event_frames(ready, encoded), resync], True
    if gap:
        ready += await sequencer.fill()
    return follow.event_frames(ready, encoded), False


async def _session_reply(
    follow: _Follow, watcher: Watcher, message: dict[str, Any]
) -> tuple[list[str], bool]:
    """The frames a message of the session's group becomes, and whether the stream
    ends with them."""
    if (last := await _access_reply(message, watcher, follow.sequencer.session_id)) is not None:
        return [last], True
    if message["type"] == "run.delta":
        frames = _delta_frames(follow.stitcher.delta(message))
        return frames + await _checkpoint_frames(follow), False
    if message["type"] == "session.events":
        return await _live_frames(follow, message)
    return [], False


async def _caught_up_frames(follow: _Follow) -> AsyncIterator[str]:
    """The stored events, then the text the answers being written now streamed so
    far (events stored while it was read, those turns' turn.started among them,
    before it), then ``caught_up``."""
    async for event_frame in _stored_frames(follow):
        yield event_frame
    texts = await streaming_turns(follow.sequencer.session_id)
    async for event_frame in _stored_frames(follow):
        yield event_frame
    for delta_frame in _delta_frames(follow.stitcher.caught_up(texts)):
        yield delta_frame
    yield _frame("caught_up", {"seq": follow.sequencer.last})


async def _session_frames(
    layer: Any, channel: str, watcher: Watcher, sequencer: Sequencer
) -> AsyncIterator[str]:
    groups = (session_group(sequencer.session_id), *watcher.groups())
    follow = _Follow(sequencer)
    try:
        # Joined here, once the response is being sent, so that leaving is in the
        # same ``finally`` (a client gone before that never joins); still before
        # the backlog is read, as the WebSocket does (see sessions_app.streams),
        # and before access is asked again, so that no change to it is missed.
        await _join(layer, channel, groups)
        yield _RETRY
        if await still_allowed(watcher, sequencer.session_id) is None:
            yield _ACCESS_REVOKED
            return
        async for frame in _caught_up_frames(follow):
            yield frame
        async for message in _messages(channel):
            if message is None:
                # Quiet for a while: also look for events the layer may have
                # dropped at the end of a run (no later event shows that gap).
                async for frame in _stored_frames(follow):
                    yield frame
                for frame in await _checkpoint_frames(follow):
                    yield frame
                yield KEEPALIVE
                continue
            frames, ended = await _session_reply(follow, watcher, message)
            for frame in frames:
                yield frame
            if ended:
                return
    finally:
        await _leave(layer, channel, groups)


async def session_event_stream(request: HttpRequest, session_id: UUID) -> HttpResponseBase:
    caller = await _stream_caller(request)
    if isinstance(caller, JsonResponse):
        return caller
    user, watcher = caller
    if not await session_visible(session_id, user):
        return _error(404, "client_error", "not_found", "No such session.")
    after = parse_after(request.headers.get("Last-Event-ID") or request.GET.get("after"))
    if after is None:
        return _error(400, "validation_error", "invalid", "A non-negative integer.", attr="after")
    layer = get_channel_layer()
    channel = await layer.new_channel()
    sequencer = Sequencer(session_id=session_id, last=after)
    return event_stream(_session_frames(layer, channel, watcher, sequencer))


async def _session_list_frames(layer: Any, channel: str, watcher: Watcher) -> AsyncIterator[str]:
    groups = (user_group(watcher.user_id), *watcher.groups())
    try:
        await _join(layer, channel, groups)
        yield _RETRY
        if await still_allowed(watcher) is None:
            yield _ACCESS_REVOKED
            return
        yield _frame("ready", {})
        async for message in _messages(channel):
            if message is None:
                yield KEEPALIVE
            elif (last := await _access_reply(message, watcher)) is not None:
                yield last
                return
            elif message["type"] == "user.change":
                yield _frame(message["event"]["type"], message["event"])
    finally:
        await _leave(layer, channel, groups)


async def session_list_stream(request: HttpRequest) -> HttpResponseBase:
    caller = await _stream_caller(request)
    if isinstance(caller, JsonResponse):
        return caller
    _, watcher = caller
    layer = get_channel_layer()
    channel = await layer.new_channel()
    return event_stream(_session_list_frames(layer, channel, watcher))
