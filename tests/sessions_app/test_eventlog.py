"""The event log's transactions are Django's: ``atomic`` nests, and what leaves the
transaction (live delivery) happens only once the outermost one has committed, on
SQLite and on PostgreSQL alike."""

from __future__ import annotations

import datetime as dt
import threading
from collections.abc import Callable
from typing import Any

import pytest
from django.db import IntegrityError, connection, connections, transaction
from django.test.utils import CaptureQueriesContext

from goaai.runtime.vocabulary import EventType
from runs_app import services as run_services
from runs_app.models import Run
from sessions_app import eventlog
from sessions_app.eventlog import event_append, recording
from sessions_app.models import RunEvent, Session
from tests.factories import SessionFactory
from tests.statement_tally import tallying

pytestmark = pytest.mark.django_db(transaction=True)


def _from_another_connection(read: Callable[[], Any]) -> Any:
    """``read()`` on a connection of its own: it sees only what has committed."""
    seen: list[Any] = []

    def reader() -> None:
        try:
            seen.append(read())
        finally:
            connections.close_all()

    worker = threading.Thread(target=reader)
    worker.start()
    worker.join(10)
    return seen[0]


def _committed_events(session_id: Any) -> int:
    return RunEvent.objects.filter(session_id=session_id).count()


def test_on_commit_callbacks_run_once_the_step_has_committed():
    session = SessionFactory()
    seen: list[int] = []

    with recording(session.id, expect=1) as batch:
        batch.add(EventType.POLICY_DECISION, {"rule": "r", "verdict": "allow", "reason": ""})
        transaction.on_commit(
            lambda: seen.append(_from_another_connection(lambda: _committed_events(session.id)))
        )
        # Not yet: the step has not committed.
        assert seen == []

    assert seen == [1]


def test_live_delivery_happens_after_the_commit_and_sees_the_rows(monkeypatch):
    session = SessionFactory()
    delivered: list[tuple[list[int], int]] = []

    def publish(events: list[RunEvent], owner_id: int | None = None) -> None:
        visible = _from_another_connection(lambda: _committed_events(session.id))
        delivered.append(([event.seq for event in events], visible))

    monkeypatch.setattr(eventlog, "publish_events", publish)

    run = run_services.run_create(session_id=session.id, agent="assistant", input="hi")
    run_services.run_claim(run_id=run.id, owner="worker-1", lease_seconds=60)

    assert delivered == [([1], 1), ([2], 2)]


def test_a_step_inside_an_outer_transaction_publishes_after_the_outer_commit(monkeypatch):
    session = SessionFactory()
    delivered: list[list[int]] = []
    monkeypatch.setattr(
        eventlog,
        "publish_events",
        lambda events, owner_id=None: delivered.append([e.seq for e in events]),
    )

    with transaction.atomic():
        event_append(session_id=session.id, type=EventType.USAGE, data={})
        event_append(session_id=session.id, type=EventType.USAGE, data={})
        assert delivered == []

    assert delivered == [[1], [2]]


def test_an_outer_rollback_takes_the_events_and_their_delivery_with_it(monkeypatch):
    session = SessionFactory()
    delivered: list[list[int]] = []
    monkeypatch.setattr(
        eventlog,
        "publish_events",
        lambda events, owner_id=None: delivered.append([e.seq for e in events]),
    )

    class Undo(Exception):
        pass

    def append_then_fail() -> None:
        with transaction.atomic():
            event_append(session_id=session.id, type=EventType.USAGE, data={})
            raise Undo

    with pytest.raises(Undo):
        append_then_fail()

    assert delivered == []
    assert _committed_events(session.id) == 0
    assert Session.objects.get(pk=session.id).last_event_seq == 0


def test_a_nested_atomic_block_inside_a_step_is_a_savepoint():
    session = SessionFactory()

    class Skip(Exception):
        pass

    def rename_then_fail() -> None:
        with transaction.atomic():
            Session.objects.filter(pk=session.id).update(title="rolled back")
            raise Skip

    with recording(session.id) as batch:
        batch.add(EventType.USAGE, {"kept": True})
        with pytest.raises(Skip):
            rename_then_fail()

    title = session.title
    session.refresh_from_db()
    assert session.title == title
    assert [e.data for e in RunEvent.objects.filter(session=session)] == [{"kept": True}]
    assert not connection.in_atomic_block


def test_recording_moves_the_sessions_last_activity_in_its_first_statement():
    session = SessionFactory()
    long_ago = session.created_at - dt.timedelta(days=3)
    Session.objects.filter(pk=session.pk).update(last_activity_at=long_ago)

    with CaptureQueriesContext(connection) as queries:
        event = event_append(session_id=session.pk, type=EventType.SESSION_UPDATED, data={})

    session.refresh_from_db()
    assert session.last_activity_at == event.created_at
    assert session.last_activity_at > long_ago
    table = Session._meta.db_table
    writes = [q["sql"] for q in queries.captured_queries if f'UPDATE "{table}"' in q["sql"]]
    # One statement reserves the number, locks the row and moves the activity.
    assert len(writes) == 1
    assert "last_activity_at" in writes[0]
    assert "last_event_seq" in writes[0]


def test_a_step_on_a_run_moves_its_sessions_last_activity(owner):
    session = SessionFactory(owner=owner)
    run = run_services.run_create(session_id=session.pk, agent="assistant", input="hi")
    Session.objects.filter(pk=session.pk).update(
        last_activity_at=session.created_at - dt.timedelta(days=1)
    )
    with recording(run.pk, of=Run, expect=1) as batch:
        batch.add(EventType.POLICY_DECISION, {"rule": "r"}, run_id=run.pk)
    session.refresh_from_db()
    newest = RunEvent.objects.filter(session=session).order_by("-seq").first()
    assert newest is not None
    assert session.last_activity_at == newest.created_at


@pytest.mark.parametrize(("reserved", "written"), [(1, 3), (3, 1), (2, 0), (2, 2)])
def test_a_step_that_writes_more_or_fewer_events_than_it_reserved_leaves_no_gap(reserved, written):
    """The counter ends at the step's last event, and the next step numbers on from
    it. On PostgreSQL the difference moves the counter in the statement that
    inserts the events."""
    session = SessionFactory()
    event_append(session_id=session.pk, type=EventType.SESSION_UPDATED, data={})
    with tallying() as tally, recording(session.pk, expect=reserved) as batch:
        for number in range(written):
            batch.add(EventType.POLICY_DECISION, {"rule": f"r{number}"})
    after = event_append(session_id=session.pk, type=EventType.SESSION_UPDATED, data={})
    seqs = list(
        RunEvent.objects.filter(session=session).order_by("seq").values_list("seq", flat=True)
    )
    assert seqs == list(range(1, written + 3))
    assert after.seq == written + 2
    session.refresh_from_db()
    assert session.last_event_seq == written + 2
    # The reserving UPDATE, then what writing the events took.
    inserts = written if connection.vendor == "sqlite" else min(written, 1)
    moves = reserved != written and (connection.vendor == "sqlite" or not written)
    assert tally.statements == 1 + inserts + moves


def test_a_row_inserted_with_the_steps_events_goes_in_their_statement(owner):
    """On PostgreSQL the row, the counter's correction and the events are one
    statement; SQLite runs the row's insert before. A broken constraint comes from
    the flush, and the step leaves nothing behind."""
    session = SessionFactory(owner=owner)
    run = Run(session_id=session.pk, agent="assistant", input="hi")
    with tallying() as tally, recording(session.pk, expect=1) as batch:
        batch.insert(run)
        batch.add(EventType.RUN_CREATED, {"agent": "assistant"}, run_id=run.pk)
        batch.add(EventType.RUN_QUEUED, {"ahead": 1}, run_id=run.pk)
    stored = Run.objects.get(pk=run.pk)
    assert stored.created_at == run.created_at
    assert list(RunEvent.objects.filter(run=stored).values_list("seq", flat=True)) == [1, 2]
    # The reserving UPDATE, then the rest: one statement, or the row, the counter's
    # move and the two events on their own.
    assert tally.statements == (1 + 4 if connection.vendor == "sqlite" else 1 + 1)

    def insert_again() -> None:
        again = Run(id=run.pk, session_id=session.pk, agent="assistant", input="again")
        with recording(session.pk, expect=1) as batch:
            batch.insert(again)
            batch.add(EventType.RUN_CREATED, {"agent": "assistant"}, run_id=again.pk)

    with pytest.raises(IntegrityError):
        insert_again()
    assert Run.objects.get(pk=run.pk).input == "hi"
    assert RunEvent.objects.filter(session=session).count() == 2
    session.refresh_from_db()
    assert session.last_event_seq == 2
