"""Live delivery of a session's committed events, and of the other messages live
subscribers get (streamed model text, a revoked token, a deleted session, a change
to what a user may read).

Nothing here writes to the database: the event log (:mod:`sessions_app.eventlog`)
hands events over once their transaction has committed, and a subscriber that
misses a message catches up from the database by sequence number.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import functools
import hashlib
import logging
import queue
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any, NamedTuple
from uuid import UUID

import redis
from channels.layers import InMemoryChannelLayer, get_channel_layer

from goaai.channel_layers import InMemoryChannelLayer as GoaaiInMemoryLayer
from goaai.channel_layers import RedisPubSubChannelLayer
from goaai.live_frames import (
    DeltaCoalescer,
    encode,
    frame_seconds,
    is_delta,
    with_delta_frame,
)
from goaai.runtime import payloads
from goaai.runtime.vocabulary import SESSION_LIST_EVENT_TYPES
from sessions_app.metrics import observe_publish_lag

logger = logging.getLogger(__name__)


class Written(NamedTuple):
    """An event as a step wrote it to the log: what live subscribers are sent."""

    session_id: UUID
    run_id: UUID | None
    seq: int
    type: str
    data: dict[str, Any]
    created_at: dt.datetime

    def as_dict(self) -> dict[str, Any]:
        return payloads.logged(
            seq=self.seq,
            type=self.type,
            run=self.run_id,
            data=self.data,
            created_at=self.created_at,
        )


# The most messages the publisher thread takes from its queue to send as one batch.
MAX_BATCH = 1000
# How long the thread that opens a Redis layer's publishing connections waits after a
# failed attempt before the next.
RECONNECT_SECONDS = 1.0


def merge_steps(batch: Iterable[tuple[str, Any, float]]) -> list[tuple[str, Any, list[float]]]:
    """The messages to send for ``batch`` (``(group, message, when it was handed
    over)``, in the order handed over): consecutive steps of events to one group
    become one step, sent to a subscriber that asks for them as one ``events`` frame.
    Everything else is kept as it is, in order; each message comes with the hand-over
    times of the steps in it."""
    merged: list[tuple[str, Any, list[float]]] = []
    for group, item, committed in batch:
        if isinstance(item, tuple) and merged:
            last_group, last, moments = merged[-1]
            if last_group == group and isinstance(last, tuple) and last[1] == item[1]:
                merged[-1] = (group, (last[0] + item[0], item[1]), [*moments, committed])
                continue
        merged.append((group, item, [committed]))
    return merged


def session_group(session_id: UUID | str) -> str:
    """The channel-layer group of a session's live subscribers."""
    return f"session.{(session_id if type(session_id) is UUID else UUID(str(session_id))).hex}"


def user_group(user_id: int) -> str:
    """The channel-layer group of one user's session-list subscribers."""
    return f"user.{int(user_id)}"


class _Publisher:
    """Hands committed events to the channel layer, in commit order, without the
    run's worker thread ever waiting on the layer: a slow or unreachable layer never
    slows a run, and subscribers that miss a message catch up from the database by
    sequence number.

    In an ASGI server (its requests and its live subscribers register its event
    loop with :meth:`attach_loop`), messages go straight onto that loop, in order,
    one thread hop from the commit, and are sent to the layer from there: the
    in-memory layer (the embedded default) keeps asyncio queues that belong to that
    loop, and a Redis layer publishes on the connection the loop already has, from
    which its own subscribers receive. Elsewhere (a Celery worker), messages for a
    Redis layer are sent from one background thread with its own loop, fed by a
    queue: its hand-over and a loop run per batch cost a run start more of the
    server's CPU than a task on the loop that is running anyway.

    The layer ``REDIS_URL`` selects (goaai's RedisPubSubChannelLayer) is published
    to by the committing thread itself, without a hop (:class:`_DirectPublisher`): a
    write to a connection that waits for no answer, at most 50 ms for Redis to take
    its bytes. The paths above carry what it could not publish.
    """

    def __init__(self) -> None:
        # (group, message, when it was handed over: time.monotonic())
        self._queue: queue.SimpleQueue[tuple[str, Any, float]] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._server_loop: asyncio.AbstractEventLoop | None = None
        # Sends on the server loop not finished yet (see drain()).
        self._inflight: set[asyncio.Task[None]] = set()
        # The server loop's pieces of text held for their frame, whose frames last as
        # long as the group's subscribers ask (as far as this process knows them).
        self._coalescer = DeltaCoalescer(_frame_on_loop)
        # What committing threads handed to the server loop, not taken yet (under
        # _handoff_lock): (layer, group, message, when it was handed over).
        self._handoff: list[tuple[Any, str, Any, float]] = []
        self._handoff_lock = threading.Lock()
        # The server loop's messages about to be sent (see _send_batch()).
        self._batch: list[tuple[str, Any, float]] = []
        # Publishes from the committing thread to a layer that takes it.
        self._direct = _DirectPublisher(self._send_other_way)

    def attach_loop(self, loop: asyncio.AbstractEventLoop) -> None:
        """Deliver messages on ``loop``, where this process's subscribers wait."""
        if loop is self._server_loop:
            return
        self._server_loop = loop
        with self._handoff_lock:
            waiting = bool(self._handoff)
        if waiting:
            # Handed to a loop that stopped before taking them: this one takes them.
            loop.call_soon_threadsafe(self._take_handoff)

    def detach_loop(self, loop: asyncio.AbstractEventLoop) -> None:
        """Stop delivering messages on ``loop`` (its subscribers left and
        it is about to close), if it is still the one attached."""
        if self._server_loop is loop:
            self._server_loop = None

    @staticmethod
    def listened(group: str) -> bool:
        """Whether anyone may be subscribed to ``group``. The in-memory layer (the
        embedded default) knows its groups; with any other layer, assume so."""
        layer = get_channel_layer()
        if layer is None:
            return False
        # Only the in-memory layer is asked for its groups: RedisPubSubChannelLayer
        # answers attributes through the running loop's layer, and a committing
        # thread has none.
        return not isinstance(layer, InMemoryChannelLayer) or group in layer.groups

    def send(self, group: str, message: dict[str, Any] | tuple[list[Written], int | None]) -> None:
        # Events are handed over from their transaction's on_commit hook: this is
        # the moment of the commit, where their publication lag starts.
        committed = time.monotonic()
        layer = get_channel_layer()
        if isinstance(layer, RedisPubSubChannelLayer) and layer.publishes_now():
            # Published by this thread; what it could not publish goes the other way.
            for item in self._direct.send(layer, group, message, committed):
                self._send_other_way(layer, group, item, committed)
            return
        self._send_other_way(layer, group, message, committed)

    def _send_other_way(self, layer: Any, group: str, message: Any, committed: float) -> None:
        in_memory = isinstance(layer, InMemoryChannelLayer)
        server = self._server_loop
        # The in-memory layer's subscribers are on that loop whenever it runs again;
        # a Redis layer's may be elsewhere, and are sent to from the thread instead.
        if server is not None and not server.is_closed() and (in_memory or server.is_running()):
            self._hand_to_loop(server, (layer, group, message, committed))
            return
        if in_memory:
            return  # its subscribers waited on a loop that is closed
        if self._thread is None:
            with self._lock:
                if self._thread is None:
                    self._thread = threading.Thread(
                        target=self._run, name="goaai-publisher", daemon=True
                    )
                    self._thread.start()
        self._queue.put((group, message, committed))

    def _run(self) -> None:
        loop = asyncio.new_event_loop()
        coalescer = DeltaCoalescer()
        while True:
            due = coalescer.next_due()
            handed: list[tuple[str, Any, float]] = []
            try:
                timeout = None if due is None else max(0.0, due - time.monotonic())
                handed.append(self._queue.get(timeout=timeout))
                # What was handed over while the last batch was being sent goes out
                # with it (see merge_steps).
                while len(handed) < MAX_BATCH:
                    handed.append(self._queue.get_nowait())
            except queue.Empty:
                pass
            batch = [(group, piece, 0.0) for group, piece, _ in coalescer.due(time.monotonic())]
            for group, item, committed in handed:
                if isinstance(item, dict) and item.get("type") == "_drain":
                    batch += [(held, piece, 0.0) for held, piece in coalescer.flush()]
                    self._publish_all(loop, batch)
                    batch = []
                    item["done"].set()
                    continue
                taken = coalescer.take(group, item, time.monotonic())[0]
                batch += [(group, message, committed) for message in taken]
            self._publish_all(loop, batch)

    def _publish_all(
        self, loop: asyncio.AbstractEventLoop, batch: list[tuple[str, Any, float]]
    ) -> None:
        for group, item, committed in merge_steps(batch):
            self._publish(loop, group, item, committed)

    def _publish(
        self, loop: asyncio.AbstractEventLoop, group: str, item: Any, committed: list[float]
    ) -> None:
        layer = get_channel_layer()
        if layer is None:
            return
        published = True
        for target, message in layer_messages(group, item):
            try:
                self._deliver(loop, layer, target, message)
            except Exception:
                published = False
                logger.exception("Publishing to %s failed", target)
        if published and isinstance(item, tuple):
            now = time.monotonic()
            for moment in committed:
                observe_publish_lag(layer=type(layer).__name__, seconds=now - moment)

    @staticmethod
    def _deliver(
        loop: asyncio.AbstractEventLoop, layer: Any, group: str, message: dict[str, Any]
    ) -> None:
        loop.run_until_complete(layer.group_send(group, message))

    def _hand_to_loop(
        self, loop: asyncio.AbstractEventLoop, handed: tuple[Any, str, Any, float]
    ) -> None:
        """Queue ``handed`` for the server loop, where one callback takes everything
        handed over until it runs: an idle server sends at once, in the callback that
        wakes it, and the steps that commit while it is busy sending (to hundreds of
        sockets, tens of milliseconds) go out together (:func:`merge_steps`)."""
        with self._handoff_lock:
            first = not self._handoff
            self._handoff.append(handed)
        if not first:
            return  # the callback that takes it is already on its way
        try:
            loop.call_soon_threadsafe(self._take_handoff)
        except RuntimeError:
            # The loop closed meanwhile, and with it its subscribers' queues.
            with self._handoff_lock:
                self._handoff.clear()

    def take_handed_over(self) -> None:
        """On the server loop, send now what committing threads handed over and the
        loop has not taken yet. A subscriber calls it before sending what it received:
        while the server writes one step to hundreds of sockets, the next step
        commits, and the sockets not written to yet get both in one frame."""
        if self._handoff and asyncio.get_running_loop() is self._server_loop:
            self._take_handoff()

    def _take_handoff(self) -> None:
        # On the server loop: what was handed over, in order, through the coalescer.
        with self._handoff_lock:
            handed, self._handoff = self._handoff, []
        if not handed:
            return
        now = time.monotonic()
        for layer, group, item, committed in handed:
            items, opened = self._coalescer.take(group, item, now)
            if opened is not None:
                asyncio.get_running_loop().call_later(opened, self._flush_on_loop, layer)
            self._batch += [(group, each, committed) for each in items]
        self._send_batch(layer)

    def _flush_on_loop(self, layer: Any) -> None:
        """Send the pieces held for a frame that ended."""
        for group, piece, interval in self._coalescer.due(time.monotonic()):
            self._batch.append((group, piece, 0.0))
            asyncio.get_running_loop().call_later(interval, self._flush_on_loop, layer)
        self._send_batch(layer)

    def _send_batch(self, layer: Any) -> None:
        batch, self._batch = self._batch, []
        for group, item, committed in merge_steps(batch):
            self._group_send_on_loop(layer, group, item, committed)

    def _group_send_on_loop(
        self, layer: Any, group: str, item: Any, committed: list[float]
    ) -> None:
        # The messages built here for the send are handed over: goaai's layer queues
        # them for the group's members at once, without a copy or a task each. Any
        # other layer sends each from a task of its own, started in order (a Redis
        # layer publishes them on one connection, in that order).
        owned = isinstance(item, tuple) or is_delta(item)
        for target, message in layer_messages(group, item):
            if isinstance(layer, InMemoryChannelLayer) and target not in layer.groups:
                continue
            if isinstance(layer, GoaaiInMemoryLayer):
                try:
                    layer.group_send_now(target, message, copy=not owned)
                except Exception:
                    logger.exception("Publishing to the in-memory layer failed")
                    continue
                if target == group and isinstance(item, tuple):
                    now = time.monotonic()
                    for moment in committed:
                        observe_publish_lag(layer=type(layer).__name__, seconds=now - moment)
                continue
            task = asyncio.get_running_loop().create_task(layer.group_send(target, message))
            self._inflight.add(task)
            timed = committed if target == group and isinstance(item, tuple) else ()
            task.add_done_callback(functools.partial(self._delivered, type(layer).__name__, timed))

    def _delivered(self, layer: str, committed: Iterable[float], task: asyncio.Task[None]) -> None:
        self._inflight.discard(task)
        if task.cancelled():
            return
        if task.exception() is not None:
            logger.error("Publishing to the channel layer failed", exc_info=task.exception())
            return
        now = time.monotonic()
        for moment in committed:
            observe_publish_lag(layer=layer, seconds=now - moment)

    async def _settle(self) -> None:
        self._take_handoff()
        layer = get_channel_layer()
        if layer is not None:
            self._batch += [(group, piece, 0.0) for group, piece in self._coalescer.flush()]
            self._send_batch(layer)
        while self._inflight:
            await asyncio.gather(*list(self._inflight), return_exceptions=True)

    def drain(self, timeout: float = 5.0) -> None:
        """Wait until everything handed over so far was sent (for tests and
        shutdown). Called on the server's own loop it cannot wait, and returns."""
        self._direct.drain()
        server = self._server_loop
        if server is not None and server.is_running():
            try:
                running = asyncio.get_running_loop()
            except RuntimeError:
                running = None
            if running is not server:
                # Runs after every delivery handed over before it (FIFO callbacks).
                settled = asyncio.run_coroutine_threadsafe(self._settle(), server)
                with contextlib.suppress(TimeoutError):
                    settled.result(timeout)
        if self._thread is None:
            return
        done = threading.Event()
        self._queue.put(("", {"type": "_drain", "done": done}, 0.0))
        done.wait(timeout)


def _frame_on_loop(group: str) -> float:
    # Only the in-memory layer knows a group's subscribers; with another, a frame
    # lasts as long as for one server's few.
    layer = get_channel_layer()
    members = layer.groups.get(group, ()) if isinstance(layer, InMemoryChannelLayer) else ()
    return frame_seconds(len(members))


def layer_messages(group: str, item: Any) -> list[tuple[str, dict[str, Any]]]:
    """The channel-layer messages that carry ``item`` (a step's events, a piece of
    text, any other message) to ``group``, and to the owner's session-list group."""
    if is_delta(item):
        # Encoded once here for every subscriber (the frame they pass on).
        return [(group, with_delta_frame(item))]
    if not isinstance(item, tuple):
        return [(group, item)]
    # Formatting happens here, off the run's worker thread, and each event is
    # encoded once for every subscriber (see sessions_app.streams.encoded_events).
    events, owner_id = item
    formatted = [event.as_dict() for event in events]
    messages: list[tuple[str, dict[str, Any]]] = [
        (
            group,
            {
                "type": "session.events",
                "events": formatted,
                "encoded": [encode(event) for event in formatted],
            },
        )
    ]
    if owner_id is not None:
        session = str(events[0].session_id)
        messages += [
            (user_group(owner_id), {"type": "user.change", "event": {**e, "session": session}})
            for e in formatted
            if e["type"] in SESSION_LIST_EVENT_TYPES
        ]
    return messages


class _DirectPublisher:
    """Publishes from the committing thread, to a layer that takes a publish from
    any thread without waiting (goaai.channel_layers.RedisPubSubChannelLayer): no
    hop to an event loop, in the order the threads publish (one lock).

    Pieces of streamed text are joined per frame as on the other paths; a thread of
    its own sends the pieces held when their frame ends, and opens the layer's
    connections, so that a committing thread never waits to connect: until they are
    open, and after a write failed, messages go the other way (``other_way``).
    """

    def __init__(self, other_way: Callable[[Any, str, Any, float], None]) -> None:
        self._other_way = other_way
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._coalescer = DeltaCoalescer()
        self._thread: threading.Thread | None = None
        # A layer whose connections the thread is to open.
        self._to_open: RedisPubSubChannelLayer | None = None

    def send(
        self, layer: RedisPubSubChannelLayer, group: str, item: Any, committed: float
    ) -> list[Any]:
        """Publish ``item`` now; returns what could not be published, in order."""
        with self._lock:
            if not layer.publishing_open():
                self._open_later(layer)
                return [item]
            taken, opened = self._coalescer.take(group, item, time.monotonic())
            for position, each in enumerate(taken):
                if not self._write(layer, group, each, committed):
                    return taken[position:]
            if opened is not None:
                self._start()
                self._wake.notify()
            return []

    def _write(
        self, layer: RedisPubSubChannelLayer, group: str, item: Any, committed: float | None
    ) -> bool:
        # Under the lock. False if the layer's connection is not open or failed.
        for target, message in layer_messages(group, item):
            try:
                if not layer.publish_now(target, message):
                    self._open_later(layer)
                    return False
            except redis.RedisError:
                logger.warning("Publishing to Redis failed; connecting again", exc_info=True)
                self._open_later(layer)
                return False
        if committed is not None and isinstance(item, tuple):
            observe_publish_lag(layer=type(layer).__name__, seconds=time.monotonic() - committed)
        return True

    def _open_later(self, layer: RedisPubSubChannelLayer) -> None:
        # Under the lock.
        self._to_open = layer
        self._start()
        self._wake.notify()

    def _start(self) -> None:
        # Under the lock; a forked child starts its own.
        if self._thread is None or not self._thread.is_alive():
            self._thread = threading.Thread(
                target=self._run, name="goaai-direct-publisher", daemon=True
            )
            self._thread.start()

    def _run(self) -> None:
        failing = False
        while True:
            with self._wake:
                if self._to_open is None:
                    due = self._coalescer.next_due()
                    self._wake.wait(None if due is None else max(0.0, due - time.monotonic()))
                self._flush(self._coalescer.due(time.monotonic()))
                layer = self._to_open
            if layer is None:
                continue
            if get_channel_layer() is not layer:
                # The settings changed (tests do): the layer is no longer used.
                with self._lock:
                    if self._to_open is layer:
                        self._to_open = None
                continue
            try:
                layer.open_for_publishing()
            except Exception:
                # Said once, not at every attempt while Redis is away.
                log = logger.debug if failing else logger.warning
                log("Connecting to Redis to publish failed; trying again", exc_info=True)
                failing = True
                time.sleep(RECONNECT_SECONDS)
                continue
            if failing:
                logger.info("Publishing to Redis again")
                failing = False
            with self._lock:
                if self._to_open is layer:
                    self._to_open = None

    def _flush(self, held: list[tuple[str, dict[str, Any], float]]) -> None:
        # Under the lock: pieces whose frame ended (or all of them, see drain()).
        layer = get_channel_layer()
        for position, (group, piece, _) in enumerate(held):
            if not isinstance(layer, RedisPubSubChannelLayer) or not self._write(
                layer, group, piece, None
            ):
                for other, rest, _ in held[position:]:
                    self._other_way(layer, other, rest, 0.0)
                return

    def drain(self) -> None:
        """Send every piece held now."""
        with self._lock:
            self._flush([(group, piece, 0.0) for group, piece in self._coalescer.flush()])


publisher = _Publisher()


def publish_events(events: list[Written], owner_id: int | None = None) -> None:
    """Queue committed events for the session's live subscribers, and the ones a
    session list shows for the owner's (``owner_id``) stream of changes."""
    if not events:
        return
    group = session_group(events[0].session_id)
    to_owner = owner_id is not None and publisher.listened(user_group(owner_id))
    if to_owner or publisher.listened(group):
        publisher.send(group, (events, owner_id if to_owner else None))


def token_group(token_id: UUID | str) -> str:
    """The group of the live streams an API token opened (told when it is revoked)."""
    return f"token.{UUID(str(token_id)).hex}"


def access_group(user_id: int) -> str:
    """The group of every live stream a user has open, told when what the user may
    read could have changed (see :class:`sessions_app.streams.Watcher`)."""
    return f"access.{int(user_id)}"


def browser_group(session_key: str) -> str:
    """The group of the live streams one browser session opened, told when it signs
    out. Named by a digest of the session key: the key is a credential, and group
    names are seen by whoever can read the channel layer."""
    return f"browser.{hashlib.sha256(session_key.encode()).hexdigest()[:40]}"


def publish_access_changed(user_ids: Iterable[int]) -> None:
    """Tell the users' open streams to check that they may still be open."""
    for user_id in set(user_ids):
        publish_to(access_group(user_id), {"type": "access.changed"})


def publish_signed_out(session_key: str) -> None:
    """End the live streams a browser session opened: it signed out."""
    publish_to(browser_group(session_key), {"type": "access.signed_out"})


def publish_sessions_deleted(session_ids: Iterable[UUID]) -> None:
    """End the live streams of sessions that were deleted."""
    for session_id in session_ids:
        publish_to(session_group(session_id), {"type": "session.deleted"})


def publish_to(group: str, message: dict[str, Any]) -> None:
    """Queue one message for a group's subscribers, if it may have any."""
    if publisher.listened(group):
        publisher.send(group, message)


def publish_user_change(owner_id: int, event: dict[str, Any]) -> None:
    """Queue a change that is not in any session's log (a deleted session) for the
    owner's stream of changes."""
    publish_to(user_group(owner_id), {"type": "user.change", "event": event})


def publish_delta(session_id: UUID, run_id: UUID, turn_id: UUID, text: str, offset: int) -> None:
    """Queue a piece of streamed model text for live subscribers, with where it
    begins in the turn's text (``offset``); it is never stored as such (the turn's
    text so far is checkpointed instead, see ``sessions_app.streams.Stitcher``)."""
    group = session_group(session_id)
    if publisher.listened(group):
        publisher.send(
            group,
            {
                "type": "run.delta",
                "run": str(run_id),
                "turn": str(turn_id),
                "offset": offset,
                "text": text,
            },
        )
