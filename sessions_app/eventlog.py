"""Writing a session's event log: sequence numbers that never repeat or skip.

Every service that changes a session, its runs, turns, tool calls or memory does it
inside :func:`recording`, which

1. opens a transaction (``transaction.atomic()``, joining the caller's if there is
   one) and locks the session row first, so that every writer takes its locks in
   the same order and concurrent writers cannot deadlock,
2. lets the service make its change and add the events that describe it,
3. numbers those events from the session's counter and inserts them, in the same
   transaction as the change (the statement that locks the session also moves its
   ``last_activity_at`` to the step's time), and
4. publishes them to live subscribers with ``transaction.on_commit``: only once
   the outermost transaction has committed (and queues, in the transaction, the
   webhook deliveries of those that are webhook messages).
"""

from __future__ import annotations

import datetime as dt
from types import TracebackType
from typing import Any
from uuid import UUID

from django.db import models, transaction
from django.db.models import QuerySet
from django.utils import timezone

from goaai import sql
from goaai.runtime.errors import NotFound
from sessions_app.models import RunEvent, Session
from sessions_app.publisher import Written, publish_events
from sessions_app.selectors import remember_owner_and_agent
from sessions_app.webhooks.outbox import webhook_enqueue_logged


class EventBatch:
    """The events of one transaction of one session, numbered on flush, and what
    the transaction found of the session when it locked it."""

    __slots__ = (
        "last_seq",
        "now",
        "pending",
        "reserved",
        "row",
        "rows",
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
        row: tuple[Any, ...] = (),
        now: dt.datetime | None = None,
    ) -> None:
        self.session_id = session_id
        # The session's counter as this transaction found it, and what it reserved.
        self.last_seq = last_seq
        self.reserved = reserved
        self.session_status = session_status
        self.session_owner_id = session_owner_id
        self.session_agent = session_agent
        # What the step read of its row, when it asked (``recording(read=...)``).
        self.row = row
        self.pending: list[tuple[str, dict[str, Any], UUID | None]] = []
        # Rows of the step inserted with its events (see insert()).
        self.rows: list[tuple[str, list[Any]]] = []
        # The step's time, for the timestamps its rows carry (and the session's
        # last activity, which reserving the numbers moved to it).
        self.now: dt.datetime = now or timezone.now()

    def add(self, type: str, data: dict[str, Any], *, run_id: UUID | None = None) -> None:
        self.pending.append((type, data, run_id))

    def insert(self, instance: models.Model, *, now: dt.datetime | None = None) -> None:
        """Insert ``instance`` with the step's events, by the statement that inserts
        them (:func:`goaai.sql.insert_events`), for a row the step reads no more
        before it ends: its values are taken now, and a constraint it breaks
        (``IntegrityError``) is raised by :meth:`flush`."""
        self.rows.append(sql.insert_statement(instance, now=now))

    def flush(self) -> list[Written]:
        """Number and insert the pending events, and return them as written."""
        pending, self.pending = self.pending, []
        rows, self.rows = self.rows, []
        count = len(pending)
        # Fewer or more events than reserved: the counter moves by the difference,
        # so that it ends exactly at the last event written (no gap).
        moved = count - self.reserved
        self.reserved = 0
        if not count:
            for statement, values in rows:
                sql.execute(statement, values)
            if moved:
                sql.move_event_counter(RunEvent, self.session_id, moved)
            return []
        now, session_id = self.now, self.session_id
        events = [
            Written(session_id, run_id, seq, str(type), data, now)
            for seq, (type, data, run_id) in enumerate(pending, start=self.last_seq + 1)
        ]
        sql.insert_events(
            RunEvent,
            session_id=session_id,
            created_at=now,
            events=[(event.run_id, event.seq, event.type, event.data) for event in events],
            counter_moved=moved,
            rows=rows,
        )
        self.last_seq += count
        owner_id = self.session_owner_id
        # Webhook messages the events are, in the same transaction (an outbox).
        webhook_enqueue_logged(owner_id=owner_id, agent=self.session_agent, events=events, at=now)
        transaction.on_commit(lambda: publish_events(events, owner_id))
        return events


class recording:
    """A transaction on one session whose events are numbered and stored on exit;
    entering it gives the :class:`EventBatch`.

    It starts by moving the session's event counter by ``expect`` (the number of
    events the caller will add, when it knows): that one statement both locks the
    session row and reserves the numbers. With ``of``, ``pk`` is a row of that model
    (a run, a turn, a tool call) and the session is that row's, found by the same
    statement, and ``read`` names the fields of that row the step needs, which the
    same statement reads too (``batch.row``). :class:`NotFound` if there is no such
    session or row. With ``savepoint=False`` a step inside its caller's transaction
    takes no savepoint of its own: if it fails, the caller's transaction fails with it.
    """

    __slots__ = ("atomic", "batch", "expect", "of", "pk", "read")

    def __init__(
        self,
        pk: UUID,
        *,
        expect: int = 0,
        of: type[models.Model] | None = None,
        read: tuple[str, ...] = (),
        savepoint: bool = True,
    ) -> None:
        self.pk = pk if type(pk) is UUID else UUID(str(pk))
        self.expect = expect
        self.of = of
        self.read = read
        self.atomic = transaction.atomic(savepoint=savepoint)

    def __enter__(self) -> EventBatch:
        self.atomic.__enter__()
        now = timezone.now()
        try:
            found = sql.reserve_event_numbers(
                Session, self.pk, self.expect, now=now, of=self.of, read=self.read
            )
            if found is None:
                what = (self.of or Session)._meta.verbose_name
                raise NotFound(f"No {what} {self.pk}.")
        except BaseException as error:
            self.atomic.__exit__(type(error), error, error.__traceback__)
            raise
        remember_owner_and_agent(found.session_id, found.owner_id, found.agent)
        self.batch = EventBatch(
            session_id=found.session_id,
            last_seq=found.counter - self.expect,
            reserved=self.expect,
            session_status=found.status,
            session_owner_id=found.owner_id,
            session_agent=found.agent,
            row=found.row,
            now=now,
        )
        return self.batch

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if exc_type is None:
            try:
                self.batch.flush()
            except BaseException as error:
                self.atomic.__exit__(type(error), error, error.__traceback__)
                raise
        self.atomic.__exit__(exc_type, exc, traceback)


def event_append(
    *, session_id: UUID, type: str, data: dict[str, Any], run_id: UUID | None = None
) -> RunEvent:
    """Append one event to a session's log with the next sequence number; returns
    it as stored."""
    with recording(session_id, expect=1) as batch:
        batch.add(type, data, run_id=run_id)
        (event,) = batch.flush()
    return RunEvent.objects.get(session_id=event.session_id, seq=event.seq)


def events_after(*, session_id: UUID, after: int = 0, limit: int = 1000) -> QuerySet[RunEvent]:
    """The session's events with ``seq > after``, oldest first."""
    return RunEvent.objects.filter(session_id=session_id, seq__gt=after).order_by("seq")[:limit]
