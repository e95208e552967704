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
from collections.abc import Iterable
from typing import Any, NamedTuple
from uuid import UUID

from channels.layers import InMemoryChannelLayer, get_channel_layer

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


def session_group(session_id: UUID | str) -> str:
    """The channel-layer group of a session's live subscribers."""
    return f"session.{(session_id if type(session_id) is UUID else UUID(str(session_id))).hex}"


def user_group(user_id: int) -> str:
    """The channel-layer group of one user's session-list subscribers."""
    return f"user.{int(user_id)}"


class _Publisher:
    """Hands committed events to the channel layer, in commit order, off the run's
    worker thread: a slow or unreachable layer never slows a run, and subscribers
    that miss a message catch up from the database by sequence number.

    The in-memory layer (the embedded default) keeps asyncio queues that belong to
    the server's event loop (which subscribers register with :meth:`attach_loop`):
    its messages go straight onto that loop, in order, one thread hop from the
    commit. Other layers (Redis) are sent to from one background thread with its
    own loop, fed by a queue.
    """

    def __init__(self) -> None:
        # (group, message, when it was handed over: time.monotonic())
        self._queue: queue.SimpleQueue[tuple[str, Any, float]] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._server_loop: asyncio.AbstractEventLoop | None = None
        # In-memory deliveries not finished yet (see drain()).
        self._inflight: set[asyncio.Task[None]] = set()

    def attach_loop(self, loop: asyncio.AbstractEventLoop) -> None:
        """Deliver in-memory messages on ``loop``, where the subscribers wait."""
        self._server_loop = loop

    def detach_loop(self, loop: asyncio.AbstractEventLoop) -> None:
        """Stop delivering in-memory messages on ``loop`` (its subscribers left and
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
        if isinstance(layer, InMemoryChannelLayer):
            server = self._server_loop
            if server is not None and not server.is_closed():
                server.call_soon_threadsafe(
                    self._deliver_in_memory, layer, group, message, committed
                )
            return
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
        while True:
            group, item, committed = self._queue.get()
            if isinstance(item, dict) and item.get("type") == "_drain":
                item["done"].set()
                continue
            layer = get_channel_layer()
            if layer is None:
                continue
            published = True
            for target, message in self._messages(group, item):
                try:
                    self._deliver(loop, layer, target, message)
                except Exception:
                    published = False
                    logger.exception("Publishing to %s failed", target)
            if published and isinstance(item, tuple):
                observe_publish_lag(
                    layer=type(layer).__name__, seconds=time.monotonic() - committed
                )

    @staticmethod
    def _messages(group: str, item: Any) -> list[tuple[str, dict[str, Any]]]:
        if not isinstance(item, tuple):
            return [(group, item)]
        # Formatting happens here, off the run's worker thread.
        events, owner_id = item
        formatted = [event.as_dict() for event in events]
        messages: list[tuple[str, dict[str, Any]]] = [
            (group, {"type": "session.events", "events": formatted})
        ]
        if owner_id is not None:
            session = str(events[0].session_id)
            messages += [
                (user_group(owner_id), {"type": "user.change", "event": {**e, "session": session}})
                for e in formatted
                if e["type"] in SESSION_LIST_EVENT_TYPES
            ]
        return messages

    @staticmethod
    def _deliver(
        loop: asyncio.AbstractEventLoop, layer: Any, group: str, message: dict[str, Any]
    ) -> None:
        loop.run_until_complete(layer.group_send(group, message))

    def _deliver_in_memory(
        self, layer: InMemoryChannelLayer, group: str, item: Any, committed: float
    ) -> None:
        # On the server's loop; callbacks run in the order they were handed over, and
        # each task they start is queued behind the one before.
        for target, message in self._messages(group, item):
            if target in layer.groups:
                task = asyncio.ensure_future(layer.group_send(target, message))
                self._inflight.add(task)
                task.add_done_callback(self._delivered)
                if target == group and isinstance(item, tuple):
                    task.add_done_callback(
                        functools.partial(_observe_delivered, type(layer).__name__, committed)
                    )

    def _delivered(self, task: asyncio.Task[None]) -> None:
        self._inflight.discard(task)
        if not task.cancelled() and task.exception() is not None:
            logger.error("Publishing to the in-memory layer failed", exc_info=task.exception())

    async def _settle(self) -> None:
        while self._inflight:
            await asyncio.gather(*list(self._inflight), return_exceptions=True)

    def drain(self, timeout: float = 5.0) -> None:
        """Wait until everything handed over so far was sent (for tests and
        shutdown). Called on the server's own loop it cannot wait, and returns."""
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


def _observe_delivered(layer: str, committed: float, task: asyncio.Task[None]) -> None:
    if not task.cancelled() and task.exception() is None:
        observe_publish_lag(layer=layer, seconds=time.monotonic() - committed)


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
