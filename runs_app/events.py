"""Writing the event log: sequence numbers that never repeat or skip.

Every service that changes a session's runs, turns, tool calls or memory does it
inside :func:`recording`, which

1. locks the session row first (so every writer takes its locks in the same order
   and concurrent writers cannot deadlock),
2. lets the service make its change and add the events that describe it,
3. numbers those events from the session's counter and inserts them in one
   statement, in the same transaction as the change, and
4. publishes them to live subscribers only after the transaction commits.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import functools
import logging
import queue
import sys
import threading
from collections.abc import Callable
from types import TracebackType
from typing import Any, NamedTuple
from uuid import UUID

from channels.layers import InMemoryChannelLayer, get_channel_layer
from django.db import transaction
from django.utils import timezone

from goaai.runtime.errors import NotFound
from runs_app import lean
from runs_app.models import RunEvent
from sessions_app.models import Session

logger = logging.getLogger(__name__)


def session_group(session_id: UUID | str) -> str:
    """The channel-layer group of a session's live subscribers."""
    return f"session.{(session_id if type(session_id) is UUID else UUID(str(session_id))).hex}"


class Event(NamedTuple):
    """An event as written: what the log row holds, without the ORM's cost."""

    session_id: UUID
    run_id: UUID | None
    seq: int
    type: str
    data: dict[str, Any]
    created_at: dt.datetime


class EventBatch:
    """The events of one transaction of one session, numbered on flush."""

    __slots__ = (
        "after_commit",
        "cursor",
        "last_seq",
        "now",
        "pending",
        "reserved",
        "session_agent",
        "session_id",
        "session_owner_id",
        "session_status",
    )

    def __init__(
        self,
        *,
        session_id: UUID,
        last_seq: int,
        reserved: int,
        session_status: str,
        session_owner_id: int,
        session_agent: str,
        cursor: Any,
        now: dt.datetime | None = None,
    ) -> None:
        self.session_id = session_id
        # The session's counter as this transaction found it, plus what it reserved.
        self.last_seq = last_seq
        self.reserved = reserved
        self.session_status = session_status
        self.session_owner_id = session_owner_id
        self.session_agent = session_agent
        self.cursor = cursor
        self.pending: list[tuple[str, dict[str, Any], UUID | None]] = []
        # Set when the batch runs its own transaction (see ``recording(fast=True)``):
        # what to do once it has committed.
        self.after_commit: list[Callable[[], None]] | None = None
        # The step's time: its rows and its events carry the same instant.
        self.now = now or timezone.now()

    def add(self, type: str, data: dict[str, Any], *, run_id: UUID | None = None) -> None:
        self.pending.append((type, data, run_id))

    def flush(self) -> list[Event]:
        """Number and insert the pending events, and return them."""
        count = len(self.pending)
        if count != self.reserved:
            # Fewer or more events than reserved: move the counter by the difference,
            # so that it ends exactly at the last event written (no gap).
            lean.execute(self.cursor, _MOVE_COUNTER, [count - self.reserved, self.session_id])
            self.reserved = count
        if not count:
            return []
        now = self.now
        session_id = self.session_id
        first = self.last_seq + 1
        events = [
            Event(session_id, run_id, first + position, type, data, now)
            for position, (type, data, run_id) in enumerate(self.pending)
        ]
        if lean.vendor() == "sqlite":
            # Every step runs this statement: its values are adapted here, in one
            # pass, rather than value by value through lean's generic handling.
            session, created = session_id.hex, lean.sqlite_datetime(now)
            rows = [
                (
                    session,
                    lean.adapt(event.run_id, sqlite=True),
                    event.seq,
                    lean.adapt(event.type, sqlite=True),
                    lean.json_text(event.data),
                    created,
                )
                for event in events
            ]
            # SQLite runs a multi-row VALUES as a subquery, slower than the one-row
            # statement run once a row (still one call into the driver).
            lean.run(self.cursor, lean.driver_sql(_INSERT_EVENT), rows)
        elif count == 1:
            lean.execute(self.cursor, _INSERT_EVENT, events[0])
        else:
            # One round trip however many events the step wrote.
            lean.execute(
                self.cursor,
                _insert_events(count),
                [value for event in events for value in event],
            )
        self.last_seq += count
        self.reserved = 0
        self.pending = []
        owner_id = self.session_owner_id
        if self.after_commit is not None:
            self.after_commit.append(lambda: publish_events(events, owner_id))
        else:
            transaction.on_commit(lambda: publish_events(events, owner_id))
        return events


_SESSIONS = Session._meta.db_table
_EVENTS = RunEvent._meta.db_table
_EVENT_COLUMNS = "session_id, run_id, seq, type, data, created_at"
_INSERT_EVENT = f"INSERT INTO {_EVENTS} ({_EVENT_COLUMNS}) VALUES (%s, %s, %s, %s, %j, %s)"
_MOVE_COUNTER = f"UPDATE {_SESSIONS} SET last_event_seq = last_event_seq + %s WHERE id = %s"
_OPEN = (
    f"UPDATE {_SESSIONS} SET last_event_seq = last_event_seq + %s WHERE id = %s "
    "RETURNING last_event_seq, status, owner_id, agent"
)


@functools.cache
def _insert_events(count: int) -> str:
    # One text per count, so that the driver prepares each shape once.
    return f"INSERT INTO {_EVENTS} ({_EVENT_COLUMNS}) VALUES " + ", ".join(
        ["(%s, %s, %s, %s, %j, %s)"] * count
    )


def recording(session_id: UUID, *, expect: int = 0, fast: bool = False) -> _Recording:
    """A transaction on one session whose events are numbered and stored on exit
    (a context manager that gives the :class:`EventBatch`).

    It starts by moving the session's event counter by ``expect`` (the number of
    events the caller will add, when it knows): that one statement both locks the
    session row, first, so that every writer takes its locks in the same order and
    concurrent writers cannot deadlock, and reserves the sequence numbers.

    ``fast`` is for the turn loop's per-step services, which run a few statements
    and nothing that opens a transaction of its own: outside any ``atomic`` block,
    the batch then begins and commits its transaction on the driver directly,
    which costs a fraction of Django's transaction handling. Inside an ``atomic``
    block it joins that block as usual.
    """
    return _Recording(session_id, expect, fast)


class _Recording:
    """:func:`recording`. A class rather than a generator: every step of a run
    enters one, and a generator-based context manager costs several times more."""

    __slots__ = ("atomic", "batch", "expect", "fast", "session_id")

    def __init__(self, session_id: UUID, expect: int, fast: bool) -> None:
        self.session_id = session_id if type(session_id) is UUID else UUID(str(session_id))
        self.expect = expect
        self.fast = fast
        self.atomic: transaction.Atomic | None = None

    def __enter__(self) -> EventBatch:
        if self.fast:
            # Connects if needed, and refuses to run in an event loop, as Django does.
            db = lean.connected()
            if db.autocommit and not db.in_atomic_block:
                return self._begin(db)
        else:
            db = lean.thread_connection()
        atomic = transaction.atomic()
        atomic.__enter__()
        self.atomic = atomic
        try:
            cursor = lean.driver_cursor(db)
            try:
                self.batch = _open(cursor, self.session_id, self.expect)
            except BaseException:
                cursor.close()
                raise
        except BaseException:
            atomic.__exit__(*sys.exc_info())
            raise
        return self.batch

    def _begin(self, db: Any) -> EventBatch:
        # The same isolation Django's atomic gives: SQLite takes its write lock at once
        # (as the IMMEDIATE transaction mode of the settings does), PostgreSQL reads
        # committed.
        cursor = lean.driver_cursor(db)
        try:
            lean.command(cursor, "BEGIN IMMEDIATE" if lean.vendor() == "sqlite" else "BEGIN")
            try:
                batch = _open(cursor, self.session_id, self.expect)
            except BaseException:
                self._roll_back(cursor)
                raise
        except BaseException:
            cursor.close()
            raise
        batch.after_commit = []
        self.batch = batch
        return batch

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        batch = self.batch
        cursor = batch.cursor
        atomic = self.atomic
        if atomic is not None:
            try:
                try:
                    if exc_type is None:
                        batch.flush()
                finally:
                    cursor.close()
            except BaseException:
                atomic.__exit__(*sys.exc_info())
                raise
            atomic.__exit__(exc_type, exc, traceback)
            return
        try:
            if exc_type is not None:
                self._roll_back(cursor)
                return
            try:
                batch.flush()
                lean.command(cursor, "COMMIT")
            except BaseException:
                self._roll_back(cursor)
                raise
        finally:
            cursor.close()
        for callback in batch.after_commit or ():
            try:
                callback()
            except Exception:
                logger.exception("An after-commit step of session %s failed", self.session_id)

    def _roll_back(self, cursor: Any) -> None:
        try:
            lean.command(cursor, "ROLLBACK")
        except Exception:
            # The original error says more than a failed rollback on a broken link.
            logger.exception("Rolling back a step of session %s failed", self.session_id)


def _open(cursor: Any, session_id: UUID, expect: int) -> EventBatch:
    row = lean.execute(cursor, _OPEN, [expect, session_id]).fetchone()
    if row is None:
        raise NotFound(f"No session {session_id}.")
    return EventBatch(
        session_id=session_id,
        last_seq=row[0] - expect,
        reserved=expect,
        session_status=row[1],
        session_owner_id=row[2],
        session_agent=row[3],
        cursor=cursor,
    )


def event_as_dict(event: RunEvent | Event) -> dict[str, Any]:
    """An event as the API, the live stream and exports show it."""
    return {
        "seq": event.seq,
        "type": event.type,
        "run": str(event.run_id) if event.run_id else None,
        "data": event.data,
        "created_at": event.created_at.isoformat(),
    }


# The events a session list shows: they also go to the owner's stream of changes.
SESSION_LIST_EVENTS = frozenset(
    {
        "session.created",
        "session.updated",
        "session.ended",
        "run.created",
        "run.started",
        "run.awaiting_input",
        "run.resumed",
        "run.completed",
        "run.failed",
        "run.canceled",
        "run.timed_out",
    }
)


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
        self._queue: queue.SimpleQueue[tuple[str, Any]] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._server_loop: asyncio.AbstractEventLoop | None = None
        # In-memory deliveries not finished yet (see drain()).
        self._inflight: set[asyncio.Task[None]] = set()

    def attach_loop(self, loop: asyncio.AbstractEventLoop) -> None:
        """Deliver in-memory messages on ``loop``, where the subscribers wait."""
        self._server_loop = loop

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

    def send(self, group: str, message: dict[str, Any] | tuple[list[Event], int | None]) -> None:
        layer = get_channel_layer()
        if isinstance(layer, InMemoryChannelLayer):
            server = self._server_loop
            if server is not None and not server.is_closed():
                server.call_soon_threadsafe(self._deliver_in_memory, layer, group, message)
            return
        if self._thread is None:
            with self._lock:
                if self._thread is None:
                    self._thread = threading.Thread(
                        target=self._run, name="goaai-publisher", daemon=True
                    )
                    self._thread.start()
        self._queue.put((group, message))

    def _run(self) -> None:
        loop = asyncio.new_event_loop()
        while True:
            group, item = self._queue.get()
            if isinstance(item, dict) and item.get("type") == "_drain":
                item["done"].set()
                continue
            layer = get_channel_layer()
            if layer is None:
                continue
            for target, message in self._messages(group, item):
                try:
                    self._deliver(loop, layer, target, message)
                except Exception:
                    logger.exception("Publishing to %s failed", target)

    @staticmethod
    def _messages(group: str, item: Any) -> list[tuple[str, dict[str, Any]]]:
        if not isinstance(item, tuple):
            return [(group, item)]
        # Formatting happens here, off the run's worker thread.
        events, owner_id = item
        formatted = [event_as_dict(event) for event in events]
        messages: list[tuple[str, dict[str, Any]]] = [
            (group, {"type": "session.events", "events": formatted})
        ]
        if owner_id is not None:
            session = str(events[0].session_id)
            messages += [
                (user_group(owner_id), {"type": "user.change", "event": {**e, "session": session}})
                for e in formatted
                if e["type"] in SESSION_LIST_EVENTS
            ]
        return messages

    @staticmethod
    def _deliver(
        loop: asyncio.AbstractEventLoop, layer: Any, group: str, message: dict[str, Any]
    ) -> None:
        loop.run_until_complete(layer.group_send(group, message))

    def _deliver_in_memory(self, layer: InMemoryChannelLayer, group: str, item: Any) -> None:
        # On the server's loop; callbacks run in the order they were handed over, and
        # each task they start is queued behind the one before.
        for target, message in self._messages(group, item):
            if target in layer.groups:
                task = asyncio.ensure_future(layer.group_send(target, message))
                self._inflight.add(task)
                task.add_done_callback(self._delivered)

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
        self._queue.put(("", {"type": "_drain", "done": done}))
        done.wait(timeout)


publisher = _Publisher()


def publish_events(events: list[Event], owner_id: int | None = None) -> None:
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


def publish_to(group: str, message: dict[str, Any]) -> None:
    """Queue one message for a group's subscribers, if it may have any."""
    if publisher.listened(group):
        publisher.send(group, message)


def publish_user_change(owner_id: int, event: dict[str, Any]) -> None:
    """Queue a change that is not in any session's log (a deleted session) for the
    owner's stream of changes."""
    publish_to(user_group(owner_id), {"type": "user.change", "event": event})


def publish_delta(session_id: UUID, run_id: UUID, turn_id: UUID, text: str) -> None:
    """Queue a piece of streamed model text for live subscribers; it is never stored."""
    group = session_group(session_id)
    if publisher.listened(group):
        publisher.send(
            group, {"type": "run.delta", "run": str(run_id), "turn": str(turn_id), "text": text}
        )
