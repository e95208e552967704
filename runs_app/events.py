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

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any
from uuid import UUID

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.db import connection, transaction

from goaai.runtime.errors import NotFound
from runs_app.models import RunEvent
from sessions_app.models import Session

logger = logging.getLogger(__name__)


def session_group(session_id: UUID | str) -> str:
    """The channel-layer group of a session's live subscribers."""
    return f"session.{UUID(str(session_id)).hex}"


@dataclass
class EventBatch:
    """The events of one transaction of one session, numbered on flush."""

    session_id: UUID
    last_seq: int
    session_status: str
    session_owner_id: int
    session_agent: str
    pending: list[RunEvent] = field(default_factory=list)

    def add(self, type: str, data: dict[str, Any], *, run_id: UUID | None = None) -> None:
        self.pending.append(
            RunEvent(session_id=self.session_id, run_id=run_id, type=type, data=data)
        )

    def flush(self) -> list[RunEvent]:
        if not self.pending:
            return []
        for event in self.pending:
            self.last_seq += 1
            event.seq = self.last_seq
        # The counter moves with the events; the row is already locked by us.
        Session.objects.filter(pk=self.session_id).update(last_event_seq=self.last_seq)
        written = RunEvent.objects.bulk_create(self.pending)
        self.pending = []
        transaction.on_commit(lambda: publish_events(written))
        return written


def _lock_session(session_id: UUID) -> EventBatch:
    table = connection.ops.quote_name(Session._meta.db_table)
    lock = " FOR UPDATE" if connection.features.has_select_for_update else ""
    # A lean statement: this runs once per recorded step, so no queryset machinery.
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT last_event_seq, status, owner_id, agent FROM {table} WHERE id = %s{lock}",  # noqa: S608
            [Session._meta.pk.get_db_prep_value(session_id, connection)],
        )
        row = cursor.fetchone()
    if row is None:
        raise NotFound(f"No session {session_id}.")
    return EventBatch(
        session_id=session_id,
        last_seq=row[0],
        session_status=row[1],
        session_owner_id=row[2],
        session_agent=row[3],
    )


@contextmanager
def recording(session_id: UUID) -> Iterator[EventBatch]:
    """A transaction on one session whose events are numbered and stored on exit."""
    with transaction.atomic():
        batch = _lock_session(UUID(str(session_id)))
        yield batch
        batch.flush()


def event_as_dict(event: RunEvent) -> dict[str, Any]:
    """An event as the API, the live stream and exports show it."""
    return {
        "seq": event.seq,
        "type": event.type,
        "run": str(event.run_id) if event.run_id else None,
        "data": event.data,
        "created_at": event.created_at.isoformat(),
    }


def publish_events(events: list[RunEvent]) -> None:
    """Send committed events to the session's live subscribers.

    Failures are logged, not raised: the events are already stored, and a
    subscriber that missed one catches up from the database by sequence number.
    """
    layer = get_channel_layer()
    if layer is None or not events:
        return
    try:
        async_to_sync(layer.group_send)(
            session_group(events[0].session_id),
            {"type": "session.events", "events": [event_as_dict(e) for e in events]},
        )
    except Exception:
        logger.exception(
            "Publishing %d events of session %s failed", len(events), events[0].session_id
        )


def publish_delta(session_id: UUID, run_id: UUID, turn_id: UUID, text: str) -> None:
    """Send a piece of streamed model text to live subscribers; it is never stored."""
    layer = get_channel_layer()
    if layer is None:
        return
    try:
        async_to_sync(layer.group_send)(
            session_group(session_id),
            {"type": "run.delta", "run": str(run_id), "turn": str(turn_id), "text": text},
        )
    except Exception:
        logger.exception("Publishing a delta of run %s failed", run_id)
