"""The event log: numbers 1, 2, 3... per session, never a gap, never a duplicate,
even when transactions roll back or many writers append at once."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable

import pytest
from django.db import connection, transaction

from goaai.runtime.errors import NotFound
from goaai.runtime.vocabulary import EventType
from runs_app import services
from runs_app.models import Run
from sessions_app import eventlog
from sessions_app.eventlog import events_after
from sessions_app.models import RunEvent, Session
from tests.factories import RunFactory, SessionFactory


def _seqs(session: Session) -> list[int]:
    return list(
        RunEvent.objects.filter(session=session).order_by("seq").values_list("seq", flat=True)
    )


def _append(session: Session, n: int = 0) -> RunEvent:
    return eventlog.event_append(
        session_id=session.id, type=EventType.POLICY_DECISION, data={"n": n}
    )


class Boom(Exception):
    pass


@pytest.mark.django_db
def test_events_are_numbered_one_two_three_within_a_session():
    session = SessionFactory()

    events = [_append(session, n) for n in range(3)]

    assert [e.seq for e in events] == [1, 2, 3]
    assert _seqs(session) == [1, 2, 3]
    session.refresh_from_db()
    assert session.last_event_seq == 3


@pytest.mark.django_db
def test_each_session_has_its_own_numbering():
    first, second = SessionFactory(), SessionFactory()

    _append(first)
    _append(first)
    _append(second)
    _append(first)
    _append(second)

    assert _seqs(first) == [1, 2, 3]
    assert _seqs(second) == [1, 2]


@pytest.mark.django_db
def test_an_appended_event_keeps_its_type_data_and_run():
    run = RunFactory()

    event = eventlog.event_append(
        session_id=run.session_id, type=EventType.USAGE, data={"total_tokens": 7}, run_id=run.id
    )

    stored = RunEvent.objects.get(pk=event.pk)
    assert (stored.session_id, stored.run_id, stored.type, stored.data) == (
        run.session_id,
        run.id,
        EventType.USAGE,
        {"total_tokens": 7},
    )
    assert stored.as_dict() == {
        "seq": 1,
        "type": "usage",
        "run": str(run.id),
        "data": {"total_tokens": 7},
        "created_at": stored.created_at.isoformat(),
    }


@pytest.mark.django_db
def test_appending_to_an_unknown_session_is_not_found():
    with pytest.raises(NotFound):
        eventlog.event_append(session_id=uuid.uuid4(), type=EventType.USAGE, data={})
    assert not RunEvent.objects.exists()


@pytest.mark.django_db
def test_a_rolled_back_append_leaves_no_gap():
    session = SessionFactory()
    _append(session, 1)

    def append_then_fail() -> None:
        with transaction.atomic():
            _append(session, 2)
            raise Boom

    with pytest.raises(Boom):
        append_then_fail()

    assert _seqs(session) == [1]
    session.refresh_from_db()
    assert session.last_event_seq == 1
    # The next event takes the number the rolled-back one would have had.
    assert _append(session, 3).seq == 2
    assert list(RunEvent.objects.filter(session=session).values_list("seq", "data")) == [
        (1, {"n": 1}),
        (2, {"n": 3}),
    ]


@pytest.mark.django_db
def test_a_service_that_fails_midway_takes_its_events_with_it():
    """run_create refuses an ended session after locking it: nothing is numbered."""
    session = SessionFactory()
    _append(session)
    Session.objects.filter(pk=session.pk).update(status="ended", ended_at=session.created_at)

    with pytest.raises(Exception, match="has ended"):
        services.run_create(session_id=session.id, agent="assistant", input="hi")

    assert _seqs(session) == [1]
    assert _append(session).seq == 2


@pytest.mark.django_db
def test_events_after_returns_the_missed_events_in_order():
    session = SessionFactory()
    for n in range(5):
        _append(session, n)

    assert [e.seq for e in events_after(session_id=session.id, after=3)] == [4, 5]
    assert [e.seq for e in events_after(session_id=session.id, after=0, limit=2)] == [1, 2]
    assert list(events_after(session_id=session.id, after=5)) == []


# Concurrent writers (PostgreSQL: SQLite serialises whole transactions anyway)

THREADS = 8


def _in_threads(work: Callable[[int], None]) -> list[BaseException]:
    """Run ``work(i)`` in THREADS threads released together; their errors."""
    barrier = threading.Barrier(THREADS)
    errors: list[BaseException] = []

    def target(i: int) -> None:
        try:
            barrier.wait(timeout=30)
            work(i)
        except BaseException as exc:
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=target, args=(i,)) for i in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=90)
    assert not any(thread.is_alive() for thread in threads), "a writer is stuck (deadlock?)"
    return errors


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_concurrent_appends_to_one_session_get_every_number_once():
    session = SessionFactory()
    per_thread = 25

    def work(i: int) -> None:
        for n in range(per_thread):
            _append(session, i * 1000 + n)

    errors = _in_threads(work)

    assert errors == []
    total = THREADS * per_thread
    assert _seqs(session) == list(range(1, total + 1))
    # Every append landed once: no event was lost or written twice.
    assert RunEvent.objects.filter(session=session).values("data").distinct().count() == total
    session.refresh_from_db()
    assert session.last_event_seq == total


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_concurrent_runs_in_one_session_do_not_deadlock_and_number_contiguously():
    session = SessionFactory()
    other = SessionFactory()
    runs_per_thread = 5

    def work(i: int) -> None:
        for n in range(runs_per_thread):
            run = services.run_create(session_id=session.id, agent="assistant", input=f"{i}/{n}")
            # A session executes one run at a time: each waits for the runs before it.
            while services.run_claim(run_id=run.id, owner="worker-1", lease_seconds=60) is None:
                time.sleep(0.002)
            _append(other, i)
            services.run_complete(run_id=run.id, output=f"done {i}/{n}")

    errors = _in_threads(work)

    assert errors == []
    runs = THREADS * runs_per_thread
    assert Run.objects.filter(session=session, status="completed").count() == runs
    queued = RunEvent.objects.filter(session=session, type=EventType.RUN_QUEUED).count()
    assert _seqs(session) == list(range(1, 3 * runs + queued + 1))
    assert _seqs(other) == list(range(1, runs + 1))
    session.refresh_from_db()
    assert session.last_event_seq == 3 * runs + queued
    # Each run's own events are in the order its writer made them.
    for run in Run.objects.filter(session=session):
        types = list(run.events.order_by("seq").values_list("type", flat=True))
        assert [t for t in types if t != EventType.RUN_QUEUED] == [
            EventType.RUN_CREATED,
            EventType.RUN_STARTED,
            EventType.RUN_COMPLETED,
        ]
        assert types.count(EventType.RUN_QUEUED) <= 1
