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
import datetime as dt
import logging
import queue
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, NamedTuple
from uuid import UUID

from channels.layers import InMemoryChannelLayer, get_channel_layer
from django.db import connection, transaction
from django.utils import timezone

from goaai.runtime.errors import NotFound
from runs_app import lean
from runs_app.models import RunEvent
from sessions_app.models import Session

logger = logging.getLogger(__name__)


def session_group(session_id: UUID | str) -> str:
    """The channel-layer group of a session's live subscribers."""
    return f"session.{UUID(str(session_id)).hex}"


class Event(NamedTuple):
    """An event as written: what the log row holds, without the ORM's cost."""

    session_id: UUID
    run_id: UUID | None
    seq: int
    type: str
    data: dict[str, Any]
    created_at: dt.datetime


@dataclass
class EventBatch:
    """The events of one transaction of one session, numbered on flush."""

    session_id: UUID
    # The session's counter as this transaction found it, plus what it reserved.
    last_seq: int
    reserved: int
    session_status: str
    session_owner_id: int
    session_agent: str
    cursor: Any
    pending: list[tuple[str, dict[str, Any], UUID | None]] = field(default_factory=list)
    # Set when the batch runs its own transaction (see ``recording(fast=True)``):
    # what to do once it has committed.
    after_commit: list[Callable[[], None]] | None = None

    def add(self, type: str, data: dict[str, Any], *, run_id: UUID | None = None) -> None:
        self.pending.append((type, data, run_id))

    def flush(self) -> list[Event]:
        """Number and insert the pending events, and return them."""
        count = len(self.pending)
        if count != self.reserved:
            # Fewer or more events than reserved: move the counter by the difference,
            # so that it ends exactly at the last event written (no gap).
            lean.execute(
                self.cursor,
                f"UPDATE {_SESSIONS} SET last_event_seq = last_event_seq + %s WHERE id = %s",
                [count - self.reserved, self.session_id],
            )
            self.reserved = count
        if not count:
            return []
        now = timezone.now()
        events = [
            Event(self.session_id, run_id, self.last_seq + position, type, data, now)
            for position, (type, data, run_id) in enumerate(self.pending, start=1)
        ]
        # One multi-row INSERT: one round trip however many events the step wrote.
        lean.execute(
            self.cursor,
            f"INSERT INTO {_EVENTS} (session_id, run_id, seq, type, data, created_at) VALUES "
            + ", ".join(["(%s, %s, %s, %s, %j, %s)"] * count),
            [value for event in events for value in event],
        )
        self.last_seq += count
        self.reserved = 0
        self.pending = []
        if self.after_commit is not None:
            self.after_commit.append(lambda: publish_events(events))
        else:
            transaction.on_commit(lambda: publish_events(events))
        return events


_SESSIONS = Session._meta.db_table
_EVENTS = RunEvent._meta.db_table


@contextmanager
def recording(session_id: UUID, *, expect: int = 0, fast: bool = False) -> Iterator[EventBatch]:
    """A transaction on one session whose events are numbered and stored on exit.

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
    session_uuid = session_id if isinstance(session_id, UUID) else UUID(str(session_id))
    if fast and not connection.in_atomic_block and connection.get_autocommit():
        with lean.cursor() as cursor:
            yield from _own_transaction(cursor, session_uuid, expect)
        return
    with transaction.atomic(), lean.cursor() as cursor:
        batch = _open(cursor, session_uuid, expect)
        yield batch
        batch.flush()


def _open(cursor: Any, session_id: UUID, expect: int) -> EventBatch:
    row = lean.execute(
        cursor,
        f"UPDATE {_SESSIONS} SET last_event_seq = last_event_seq + %s WHERE id = %s "
        "RETURNING last_event_seq, status, owner_id, agent",
        [expect, session_id],
    ).fetchone()
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


def _own_transaction(cursor: Any, session_id: UUID, expect: int) -> Iterator[EventBatch]:
    # The same isolation Django's atomic gives: SQLite takes its write lock at once
    # (as the IMMEDIATE transaction mode of the settings does), PostgreSQL reads
    # committed.
    lean.command(cursor, "BEGIN IMMEDIATE" if lean.vendor() == "sqlite" else "BEGIN")
    try:
        batch = _open(cursor, session_id, expect)
        batch.after_commit = []
        yield batch
        batch.flush()
        lean.command(cursor, "COMMIT")
    except BaseException:
        try:
            lean.command(cursor, "ROLLBACK")
        except Exception:
            # The original error says more than a failed rollback on a broken link.
            logger.exception("Rolling back a step of session %s failed", session_id)
        raise
    for callback in batch.after_commit:
        try:
            callback()
        except Exception:
            logger.exception("An after-commit step of session %s failed", session_id)


def event_as_dict(event: RunEvent | Event) -> dict[str, Any]:
    """An event as the API, the live stream and exports show it."""
    return {
        "seq": event.seq,
        "type": event.type,
        "run": str(event.run_id) if event.run_id else None,
        "data": event.data,
        "created_at": event.created_at.isoformat(),
    }


class _Publisher:
    """Sends to the channel layer from one background thread, in commit order.

    A run's worker only puts committed events on a queue: a slow or unreachable
    channel layer never slows the run, and subscribers that miss a message catch
    up from the database by sequence number.
    """

    def __init__(self) -> None:
        self._queue: queue.SimpleQueue[tuple[str, Any]] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    @staticmethod
    def listened(group: str) -> bool:
        """Whether anyone may be subscribed to ``group``. The in-memory layer (the
        embedded default) knows its groups; with any other layer, assume so."""
        layer = get_channel_layer()
        if layer is None:
            return False
        groups = getattr(layer, "groups", None)
        return not isinstance(layer, InMemoryChannelLayer) or bool(groups and group in groups)

    def send(self, group: str, message: dict[str, Any] | list[Event]) -> None:
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
            if isinstance(item, list):
                # Formatting happens here, off the run's worker thread.
                message = {"type": "session.events", "events": [event_as_dict(e) for e in item]}
            elif item.get("type") == "_drain":
                item["done"].set()
                continue
            else:
                message = item
            layer = get_channel_layer()
            if layer is None:
                continue
            try:
                loop.run_until_complete(layer.group_send(group, message))
            except Exception:
                logger.exception("Publishing to %s failed", group)

    def drain(self, timeout: float = 5.0) -> None:
        """Wait until everything queued so far was sent (for tests and shutdown)."""
        if self._thread is None:
            return
        done = threading.Event()
        self._queue.put(("", {"type": "_drain", "done": done}))
        done.wait(timeout)


publisher = _Publisher()


def publish_events(events: list[Event]) -> None:
    """Queue committed events for the session's live subscribers."""
    if events:
        group = session_group(events[0].session_id)
        if publisher.listened(group):
            publisher.send(group, events)


def publish_delta(session_id: UUID, run_id: UUID, turn_id: UUID, text: str) -> None:
    """Queue a piece of streamed model text for live subscribers; it is never stored."""
    group = session_group(session_id)
    if publisher.listened(group):
        publisher.send(
            group, {"type": "run.delta", "run": str(run_id), "turn": str(turn_id), "text": text}
        )
