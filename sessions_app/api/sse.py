"""The live streams as Server-Sent Events, for integrations without WebSockets.

``GET /api/v1/sessions/{id}/events/stream/`` sends the session's events after
``Last-Event-ID`` (or ``?after=N``) from the database, then live ones, each as
``id: <seq>``, ``event: <type>``, ``data: <event JSON>``; token deltas come as
``event: delta`` without an id (they are not stored). ``GET
/api/v1/sessions/stream/`` sends the caller's session-level changes. Both need an
ASGI server (they hold the connection open) and the same credentials as the API.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any
from uuid import UUID

from asgiref.sync import sync_to_async
from channels.layers import get_channel_layer
from django.http import HttpRequest, JsonResponse, StreamingHttpResponse
from django.http.response import HttpResponseBase

from goaai.api.authentication import token_user
from runs_app.events import session_group, token_group, user_group
from sessions_app.streams import (
    MAX_LIVE_GAP,
    Sequencer,
    parse_after,
    session_visible,
    stored_after,
    subscribe,
)

# A comment line this often keeps proxies from closing an idle stream.
KEEPALIVE_SECONDS = 15.0


def _error(status: int, kind: str, code: str, detail: str, attr: str | None = None) -> JsonResponse:
    response = JsonResponse(
        {"type": kind, "errors": [{"code": code, "detail": detail, "attr": attr}]}, status=status
    )
    if status == 401:
        response["WWW-Authenticate"] = 'Bearer realm="goaai"'
    return response


async def _caller(request: HttpRequest) -> tuple[Any, str | None]:
    """The authenticated user (``None`` if none), from a Bearer token or the browser
    session, and the group that hears of the token's revocation (if a token)."""
    scheme, _, credentials = request.headers.get("Authorization", "").partition(" ")
    if scheme.lower() == "bearer":
        found = await sync_to_async(token_user)(credentials.strip())
        return (found[0], token_group(found[1].pk)) if found else (None, None)
    user = await request.auser()
    return (user if user.is_authenticated else None), None


def _frame(event: str, data: dict[str, Any], event_id: int | None = None) -> str:
    head = f"id: {event_id}\n" if event_id is not None else ""
    return f"{head}event: {event}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n"


def _stream(frames: AsyncIterator[str]) -> StreamingHttpResponse:
    response = StreamingHttpResponse(frames, content_type="text/event-stream")
    response["Cache-Control"] = "no-cache"
    response["X-Accel-Buffering"] = "no"  # tell nginx not to buffer the stream
    return response


async def _messages(channel: str) -> AsyncIterator[dict[str, Any] | None]:
    """Messages on ``channel``; ``None`` after each quiet keep-alive interval."""
    layer = get_channel_layer()
    while True:
        try:
            yield await asyncio.wait_for(layer.receive(channel), KEEPALIVE_SECONDS)
        except TimeoutError:
            yield None


async def session_event_stream(request: HttpRequest, session_id: UUID) -> HttpResponseBase:
    if request.method != "GET":
        return _error(405, "client_error", "method_not_allowed", "Only GET.")
    user, revocations = await _caller(request)
    if user is None:
        return _error(401, "client_error", "not_authenticated", "Send credentials.")
    if not await session_visible(session_id, user):
        return _error(404, "client_error", "not_found", "No such session.")
    after = parse_after(request.headers.get("Last-Event-ID") or request.GET.get("after"))
    if after is None:
        return _error(400, "validation_error", "invalid", "A non-negative integer.", attr="after")
    layer = get_channel_layer()
    channel = await layer.new_channel()
    group = session_group(session_id)

    async def frames() -> AsyncIterator[str]:
        sequencer = Sequencer(session_id=session_id, last=after)
        try:
            # Joined here, once the response is being sent, so that leaving is in the
            # same ``finally`` (a client gone before that never joins); still before
            # the backlog is read, as the WebSocket does (see sessions_app.streams).
            for joined in (group, revocations):
                if joined:
                    await subscribe(layer, joined, channel)
            yield "retry: 2000\n\n"
            async for events in stored_after(sequencer):
                for event in events:
                    yield _frame(event["type"], event, event["seq"])
            yield _frame("caught_up", {"seq": sequencer.last})
            async for message in _messages(channel):
                if message is None:
                    # Quiet for a while: also look for events the layer may have
                    # dropped at the end of a run (no later event shows that gap).
                    async for events in stored_after(sequencer):
                        for event in events:
                            yield _frame(event["type"], event, event["seq"])
                    yield ": keep-alive\n\n"
                elif message["type"] == "token.revoked":
                    yield _frame("error", {"code": "token_revoked", "detail": "Token revoked."})
                    return
                elif message["type"] == "run.delta":
                    delta = {k: message[k] for k in ("run", "turn", "text")}
                    yield _frame("delta", delta)
                elif message["type"] == "session.events":
                    ready, gap = sequencer.take(message["events"])
                    if gap and sequencer.gap() > MAX_LIVE_GAP:
                        for event in ready:
                            yield _frame(event["type"], event, event["seq"])
                        yield _frame("resync", {"after": sequencer.last})
                        return
                    if gap:
                        ready += await sequencer.fill()
                    for event in ready:
                        yield _frame(event["type"], event, event["seq"])
        finally:
            for joined in (group, revocations):
                if joined:
                    await layer.group_discard(joined, channel)

    return _stream(frames())


async def session_list_stream(request: HttpRequest) -> HttpResponseBase:
    if request.method != "GET":
        return _error(405, "client_error", "method_not_allowed", "Only GET.")
    user, revocations = await _caller(request)
    if user is None:
        return _error(401, "client_error", "not_authenticated", "Send credentials.")
    layer = get_channel_layer()
    channel = await layer.new_channel()
    group = user_group(user.pk)

    async def frames() -> AsyncIterator[str]:
        try:
            for joined in (group, revocations):
                if joined:
                    await subscribe(layer, joined, channel)
            yield "retry: 2000\n\n"
            yield _frame("ready", {})
            async for message in _messages(channel):
                if message is None:
                    yield ": keep-alive\n\n"
                elif message["type"] == "token.revoked":
                    yield _frame("error", {"code": "token_revoked", "detail": "Token revoked."})
                    return
                elif message["type"] == "user.change":
                    yield _frame(message["event"]["type"], message["event"])
        finally:
            for joined in (group, revocations):
                if joined:
                    await layer.group_discard(joined, channel)

    return _stream(frames())
