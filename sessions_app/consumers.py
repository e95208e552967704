"""Live updates over WebSocket: a session's events and token deltas, and the
session-list changes of one user. The frames and close codes are documented in the
README ("Live updates")."""

from __future__ import annotations

import asyncio
import functools
import json
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import parse_qs
from uuid import UUID

from channels.consumer import get_handler_name
from channels.exceptions import StopConsumer
from channels.generic.websocket import AsyncWebsocketConsumer
from channels.layers import get_channel_layer

from goaai.api.fields import nested_deeper_than
from goaai.api.parsers import MAX_JSON_DEPTH
from goaai.channel_layers import InMemoryChannelLayer, RedisPubSubChannelLayer
from sessions_app.publisher import publisher, session_group, user_group
from sessions_app.streams import (
    CLOSE_NO_SESSION,
    CLOSE_NOT_ALLOWED,
    CLOSE_NOT_AUTHENTICATED,
    CLOSE_RESYNC,
    MAX_LIVE_GAP,
    Sequencer,
    Stitcher,
    Watcher,
    checkpoints_again,
    delta_frame,
    encoded_events,
    handshake_request,
    join_steps,
    origin_allowed,
    parse_after,
    session_visible,
    still_allowed,
    stored_after,
    streaming_turns,
    subscribe,
)

# The largest frame a client may send (clients send only small control frames).
MAX_CLIENT_FRAME = 16 * 1024
CLOSE_BAD_REQUEST = 4400
# With ``?batch=1``, the most events one ``events`` frame holds: a step's events
# (committed together) go in one frame, a long backlog in frames of this many.
MAX_EVENTS_PER_FRAME = 100


class _Consumer(AsyncWebsocketConsumer):
    """Authentication, origin checks, the client's control frames, and closing
    once the socket's credentials stop giving access."""

    groups_joined: list[str]
    watcher: Watcher
    # The session whose events the socket streams (None for the session list).
    watched: UUID | None = None
    ended = False

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        # channels' AsyncConsumer.__call__, with the messages of the client and of
        # the channel layer each read by a task of its own for the socket's life.
        # channels makes a task and waits on both sources anew for every message: for
        # a session followed by 500 sockets, 500 tasks and waits per message, as much
        # as the rest of handing it to a subscriber. Messages are still handled one
        # at a time, in the order they arrive.
        self.scope = scope
        self.base_send = send
        self.channel_layer = get_channel_layer(self.channel_layer_alias)
        if self.channel_layer is not None:
            self.channel_name = await self.channel_layer.new_channel()
            self.channel_receive = functools.partial(self.channel_layer.receive, self.channel_name)
        one_at_a_time = asyncio.Lock()
        pumps = [asyncio.ensure_future(self._pump(receive, one_at_a_time))]
        if isinstance(self.channel_layer, InMemoryChannelLayer | RedisPubSubChannelLayer):
            pumps.append(
                asyncio.ensure_future(
                    self._pump(self.channel_receive, one_at_a_time, self._also_waiting)
                )
            )
        elif self.channel_layer is not None:
            pumps.append(asyncio.ensure_future(self._pump(self.channel_receive, one_at_a_time)))
        try:
            done, _ = await asyncio.wait(pumps, return_when=asyncio.FIRST_COMPLETED)
            for finished in done:
                finished.result()  # StopConsumer once disconnected, or a handler's error
        except StopConsumer:
            pass
        finally:
            for each in pumps:
                each.cancel()
            await asyncio.gather(*pumps, return_exceptions=True)

    async def _pump(
        self,
        source: Callable[[], Awaitable[dict[str, Any]]],
        one_at_a_time: asyncio.Lock,
        also_waiting: Callable[[], list[dict[str, Any]]] | None = None,
    ) -> None:
        while True:
            messages = [await source()]
            if also_waiting is not None:
                messages = join_steps([*messages, *also_waiting()])
            async with one_at_a_time:
                for message in messages:
                    await self.dispatch(message)

    def _also_waiting(self) -> list[dict[str, Any]]:
        # goaai's layers hand over everything the channel holds: a socket
        # the server reached late (it was writing a step to hundreds of others)
        # sends the steps committed meanwhile in one frame.
        publisher.take_handed_over()
        return self.channel_layer.receive_ready(self.channel_name)  # type: ignore[no-any-return]

    async def dispatch(self, message: dict[str, Any]) -> None:
        # channels closes the thread's stale database connections before handling
        # any message: a hop to a worker thread per message and socket, for 500
        # sockets of one session 500 hops per event. The handlers here reach the
        # database only through database_sync_to_async, which closes them itself.
        handler = getattr(self, get_handler_name(message), None)
        if handler is None:
            raise ValueError(f"No handler for message type {message['type']}")
        await handler(message)

    async def admit(self) -> Any:
        """Accept the socket and return the user, or close it with the code that
        says why not (a close code reaches the client only after accepting)."""
        self.groups_joined = []
        await self.accept()
        if not origin_allowed(handshake_request(self.scope)):
            await self.end(CLOSE_NOT_ALLOWED)
            return None
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self.end(CLOSE_NOT_AUTHENTICATED)
            return None
        token_id = self.scope.get("api_token_id")
        session = self.scope.get("session") if token_id is None else None
        self.watcher = Watcher(
            user_id=user.pk,
            token_id=token_id,
            browser_session=getattr(session, "session_key", None),
        )
        # Told from now on of any change to the credentials; the credentials are
        # then read again, so that one made before joining is not missed either.
        for group in self.watcher.groups():
            await self.join(group)
        user = await still_allowed(self.watcher)
        if user is None:
            await self.end(CLOSE_NOT_AUTHENTICATED)
        return user

    async def end(self, code: int, error: tuple[str, str] | None = None) -> None:
        """Close the socket with ``code``, after an error frame (code, detail) that
        says why; nothing is sent after that."""
        if self.ended:
            return
        if error is not None:
            await self.error(*error)
        self.ended = True
        await self.close(code)

    async def token_revoked(self, message: dict[str, Any]) -> None:
        """The API token this socket authenticated with was revoked."""
        await self.end(
            CLOSE_NOT_AUTHENTICATED,
            ("token_revoked", "The token this connection used was revoked."),
        )

    async def access_signed_out(self, message: dict[str, Any]) -> None:
        """The browser session this socket authenticated with signed out."""
        await self.end(
            CLOSE_NOT_AUTHENTICATED,
            ("signed_out", "The browser session this connection used signed out."),
        )

    async def access_changed(self, message: dict[str, Any]) -> None:
        """The user changed (deactivated, demoted, a permission taken away...):
        ask again whether this socket may stay open."""
        if not self.ended and await still_allowed(self.watcher, self.watched) is None:
            await self.end(
                CLOSE_NOT_AUTHENTICATED,
                ("access_revoked", "The credentials of this connection no longer give access."),
            )

    async def on_ping(self) -> None:
        """After a pong: a chance to look for anything missed (see SessionConsumer)."""

    async def join(self, group: str) -> None:
        await subscribe(self.channel_layer, group, self.channel_name)
        self.groups_joined.append(group)

    async def disconnect(self, code: int) -> None:
        for group in getattr(self, "groups_joined", []):
            await self.channel_layer.group_discard(group, self.channel_name)

    async def send_frame(self, frame: dict[str, Any]) -> None:
        if not self.ended:
            await self.send(text_data=json.dumps(frame, separators=(",", ":")))

    async def send_text(self, text: str) -> None:
        """A frame already encoded (once for all the group's sockets), handed
        straight to the server."""
        if not self.ended:
            await self.base_send({"type": "websocket.send", "text": text})

    async def error(self, code: str, detail: str) -> None:
        await self.send_frame({"type": "error", "code": code, "detail": detail})

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None) -> None:
        if text_data is None:
            await self.error("binary_frame", "Send JSON text frames.")
            return
        if len(text_data) > MAX_CLIENT_FRAME or len(text_data.encode()) > MAX_CLIENT_FRAME:
            await self.error("frame_too_large", f"Frames are at most {MAX_CLIENT_FRAME} bytes.")
            return
        try:
            frame = json.loads(text_data)
            too_deep = nested_deeper_than(frame, MAX_JSON_DEPTH)
        except ValueError:
            await self.error("invalid_json", "The frame is not JSON.")
            return
        except RecursionError:
            too_deep = True
        if too_deep:
            await self.error(
                "invalid_json", f"The frame is nested more than {MAX_JSON_DEPTH} levels deep."
            )
            return
        if not isinstance(frame, dict) or not isinstance(frame.get("type"), str):
            await self.error("invalid_frame", 'A frame is an object with a "type".')
            return
        if frame["type"] == "ping":
            await self.send_frame({"type": "pong"})
            await self.on_ping()
            return
        await self.error("unknown_type", f"Unknown frame type {frame['type'][:40]!r}.")


class SessionConsumer(_Consumer):
    """``/ws/sessions/<id>/?after=N``: the session's events after N, then live;
    ``&batch=1`` asks for the events in ``events`` frames (see :meth:`send_events`)."""

    batched = False

    async def connect(self) -> None:
        user = await self.admit()
        if user is None:
            return
        session_id = self.scope["url_route"]["kwargs"]["session_id"]
        if not await session_visible(session_id, user):
            await self.end(CLOSE_NO_SESSION)
            return
        self.watched = session_id
        query = parse_qs(self.scope.get("query_string", b"").decode("latin1"))
        after = parse_after((query.get("after") or [None])[0])
        if after is None:
            await self.end(CLOSE_BAD_REQUEST, ("invalid_after", "after is a non-negative integer."))
            return
        batch = (query.get("batch") or ["0"])[0]
        if batch not in ("0", "1"):
            await self.end(CLOSE_BAD_REQUEST, ("invalid_batch", "batch is 0 or 1."))
            return
        self.batched = batch == "1"
        # Join before reading: an event committed after the read is then published
        # to this socket; one that comes both ways is dropped by its sequence number.
        await self.join(session_group(session_id))
        self.sequencer = Sequencer(session_id=session_id, last=after)
        self.stitcher = Stitcher()
        async for events in stored_after(self.sequencer):
            await self.send_events(events)
        # The text of the answers being written now, which no stored event holds yet;
        # events stored meanwhile (those turns' own turn.started among them) first.
        texts = await streaming_turns(session_id)
        async for events in stored_after(self.sequencer):
            await self.send_events(events)
        for frame in self.stitcher.caught_up(texts):
            await self.send_frame(frame)
        await self.send_frame({"type": "caught_up", "seq": self.sequencer.last})

    async def on_ping(self) -> None:
        # A gap shows only when a later event arrives; the last events of a run that
        # the layer dropped would never show one. Clients ping while idle, so each
        # ping also reads what the database has after the last event sent.
        if hasattr(self, "sequencer"):
            async for events in stored_after(self.sequencer):
                await self.send_events(events)
            await self.send_checkpoints()

    async def send_events(
        self, events: list[dict[str, Any]], encoded: dict[int, str] | None = None
    ) -> None:
        """Send ``events``, each as the JSON ``encoded`` holds for its number if it
        holds one (events published live, encoded once for the group), else encoded
        here (events read back): one ``event`` frame each, or with ``?batch=1``
        ``events`` frames of up to :data:`MAX_EVENTS_PER_FRAME` (a step's events, which
        arrive together, in one)."""
        self.stitcher.observe(events)
        texts = [_encoded(event, encoded) for event in events]
        if self.batched:
            for start in range(0, len(texts), MAX_EVENTS_PER_FRAME):
                joined = ",".join(texts[start : start + MAX_EVENTS_PER_FRAME])
                await self.send_text(f'{{"type":"events","events":[{joined}]}}')
        else:
            for text in texts:
                await self.send_text(f'{{"type":"event","event":{text}}}')

    async def send_checkpoints(self) -> None:
        """Fill a hole in a turn's streamed text from its checkpoint, if one is held."""
        if self.stitcher.wants_checkpoints():
            texts = await checkpoints_again(self.sequencer.session_id)
            for frame in self.stitcher.checkpoints(texts):
                await self.send_frame(frame)

    async def session_events(self, message: dict[str, Any]) -> None:
        if not hasattr(self, "sequencer"):
            return
        ready, gap = self.sequencer.take(message["events"])
        await self.send_events(ready, encoded_events(message))
        if gap:
            if self.sequencer.gap() > MAX_LIVE_GAP:
                await self.send_frame({"type": "resync", "after": self.sequencer.last})
                await self.end(CLOSE_RESYNC)
                return
            await self.send_events(await self.sequencer.fill())

    async def session_deleted(self, message: dict[str, Any]) -> None:
        """The session was deleted: there is nothing more to stream."""
        await self.end(CLOSE_NO_SESSION, ("session_deleted", "The session was deleted."))

    async def run_delta(self, message: dict[str, Any]) -> None:
        if hasattr(self, "stitcher"):
            frames = self.stitcher.delta(message)
            if (text := delta_frame(message, frames)) is not None:
                await self.send_text(text)
            else:
                for frame in frames:
                    await self.send_frame(frame)
            await self.send_checkpoints()


def _encoded(event: dict[str, Any], encoded: dict[int, str] | None) -> str:
    text = encoded.get(event["seq"]) if encoded else None
    return text if text is not None else json.dumps(event, separators=(",", ":"))


class SessionListConsumer(_Consumer):
    """``/ws/sessions/``: the caller's session-level changes, for a session list
    (created, renamed, ended, deleted, and each run's status). Not replayed: a
    client that reconnects reloads the list."""

    async def connect(self) -> None:
        user = await self.admit()
        if user is None:
            return
        await self.join(user_group(user.pk))
        await self.send_frame({"type": "ready"})

    async def user_change(self, message: dict[str, Any]) -> None:
        await self.send_frame({"type": "event", "event": message["event"]})


class NoSuchStream(AsyncWebsocketConsumer):
    """Any other WebSocket path: accepted only to be closed with 4404."""

    async def connect(self) -> None:
        await self.accept()
        await self.close(CLOSE_NO_SESSION)
