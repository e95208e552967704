"""What a terminal chat sees of its session: committed events, in order, and the
model's text as it is written.

:class:`LiveFeed` subscribes to the session's channel-layer group, as the chat
page's socket does, from an event loop in a thread of its own, and hands every
message to the command's thread through a queue, in the order it was published.
With the in-memory layer (the embedded default) that is what runs executed in this
process publish, which is where the command's own runs execute unless a Celery
executor is configured; with channels_redis (``REDIS_URL``) it is what every
process publishes, Celery workers included.

:class:`Follower` puts the events in sequence order: an event seen already is
dropped, a gap is filled from the database, and while the layer is quiet the
database is asked as well (for an event the layer dropped, or when there is no
live feed at all). Streamed text is not stored: where it does not arrive, the
turn's ``message.completed`` event brings the whole text.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import queue
import threading
from concurrent.futures import Future
from dataclasses import dataclass
from types import TracebackType
from typing import Any
from uuid import UUID

from channels.layers import get_channel_layer

from sessions_app import eventlog
from sessions_app.publisher import publisher, session_group
from sessions_app.streams import CATCH_UP_PAGE, Sequencer, subscribe

logger = logging.getLogger(__name__)

# How long joining or leaving the session's group may take (a Redis that does not
# answer): past it the chat goes on without the live feed.
LAYER_TIMEOUT_SECONDS = 5.0


@dataclass(frozen=True)
class Delta:
    """A piece of a turn's text, as the model wrote it (``offset``: where the piece
    starts in the turn's text, when the publisher says)."""

    run: str
    turn: str
    text: str
    offset: int | None = None


@dataclass(frozen=True)
class Notice:
    """Something about the feed itself: ``lost`` (no more live messages:
    ``detail`` says why) or ``deleted`` (the session is gone)."""

    kind: str
    detail: str = ""


Item = dict[str, Any] | Delta | Notice


class LiveFeed:
    """The session's channel-layer messages, received in a thread of their own.

    A context manager: entering subscribes (``unavailable`` then says why there is
    no live feed, if there is none), leaving unsubscribes.
    """

    def __init__(self, session_id: UUID) -> None:
        self.group = session_group(session_id)
        self.messages: queue.SimpleQueue[dict[str, Any]] = queue.SimpleQueue()
        self.unavailable = ""
        self._layer: Any = None
        self._channel = ""
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._receiving: Future[None] | None = None

    def __enter__(self) -> LiveFeed:
        self.unavailable = self._start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()

    def _start(self) -> str:
        layer = get_channel_layer()
        if layer is None:
            return "no channel layer is configured"
        loop = asyncio.new_event_loop()
        self._layer, self._loop = layer, loop
        self._thread = threading.Thread(
            target=loop.run_forever, name="goaai-chat-feed", daemon=True
        )
        self._thread.start()
        try:
            asyncio.run_coroutine_threadsafe(self._join(), loop).result(LAYER_TIMEOUT_SECONDS)
        except Exception as exc:  # a layer that is down: Redis unreachable, say
            logger.warning("The terminal chat's live feed is unavailable", exc_info=True)
            self.stop()
            return str(exc) or type(exc).__name__
        self._receiving = asyncio.run_coroutine_threadsafe(self._receive(), loop)
        return ""

    async def _join(self) -> None:
        self._channel = await self._layer.new_channel()
        await subscribe(self._layer, self.group, self._channel)

    async def _receive(self) -> None:
        try:
            while True:
                self.messages.put(await self._layer.receive(self._channel))
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            logger.warning("The terminal chat's live feed was lost", exc_info=True)
            self.messages.put({"type": "feed.lost", "detail": str(exc) or type(exc).__name__})

    def stop(self) -> None:
        """Leave the group and end the feed's thread (once; safe to call again)."""
        loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return
        self._loop = None
        if self._receiving is not None:
            self._receiving.cancel()
        if self._channel:
            leaving = asyncio.run_coroutine_threadsafe(
                self._layer.group_discard(self.group, self._channel), loop
            )
            with contextlib.suppress(Exception):
                leaving.result(LAYER_TIMEOUT_SECONDS)
        publisher.detach_loop(loop)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(LAYER_TIMEOUT_SECONDS)
        if not thread.is_alive():
            loop.close()


class Follower:
    """A session's events after ``after``, in sequence order, with the streamed
    text between them, from ``feed`` and the database."""

    def __init__(self, session_id: UUID, after: int, feed: LiveFeed | None) -> None:
        self.sequencer = Sequencer(session_id=session_id, last=after)
        self.feed = feed if feed is not None and not feed.unavailable else None

    def next(self, timeout: float) -> list[Item]:
        """What happened next, waiting up to ``timeout`` seconds for the feed; when
        it stays quiet, what the database holds that was not seen yet."""
        if self.feed is None:
            return list(self.stored())
        try:
            message = self.feed.messages.get(timeout=timeout)
        except queue.Empty:
            return list(self.stored())
        return self._items(message)

    def _items(self, message: dict[str, Any]) -> list[Item]:
        kind = message.get("type")
        if kind == "run.delta":
            offset = message.get("offset")
            return [
                Delta(
                    run=str(message["run"]),
                    turn=str(message["turn"]),
                    text=str(message["text"]),
                    offset=offset if isinstance(offset, int) else None,
                )
            ]
        if kind == "session.events":
            ready, gap = self.sequencer.take(message["events"])
            return [*ready, *(self.stored() if gap else [])]
        if kind == "session.deleted":
            return [Notice("deleted")]
        if kind == "feed.lost":
            # The database is all there is from now on.
            self.feed = None
            return [Notice("lost", str(message.get("detail", ""))), *self.stored()]
        return []

    def stored(self) -> list[dict[str, Any]]:
        """The stored events after the last one let through, in order."""
        ready: list[dict[str, Any]] = []
        while True:
            page = [
                event.as_dict()
                for event in eventlog.events_after(
                    session_id=self.sequencer.session_id,
                    after=self.sequencer.last,
                    limit=CATCH_UP_PAGE,
                )
            ]
            taken, _ = self.sequencer.take(page)
            ready += taken
            if len(page) < CATCH_UP_PAGE or not taken:
                return ready
