"""Creating, renaming and ending sessions, and what an ended session refuses."""

from __future__ import annotations

import datetime as dt
import uuid

import pytest
from django.utils import timezone

from goaai.runtime.errors import NotFound, SessionEnded
from goaai.runtime.vocabulary import EventType, RunStatus, SessionStatus
from runs_app import services as run_services
from runs_app import sessions as run_sessions
from runs_app.models import Run
from runs_app.store import OrmRunStore
from sessions_app import services
from sessions_app.models import RunEvent, Session
from tests.factories import RunFactory, SessionFactory

pytestmark = pytest.mark.django_db


def _events(session: Session) -> list[tuple[int, str, dict]]:
    return list(
        RunEvent.objects.filter(session=session).order_by("seq").values_list("seq", "type", "data")
    )


# session_create


def test_session_create_starts_an_active_session_and_records_it(owner):
    session = services.session_create(
        owner_id=owner.pk, agent="assistant", title="Colours", metadata={"user_id": "user-123"}
    )

    session.refresh_from_db()
    assert (session.owner, session.agent, session.title, session.metadata) == (
        owner,
        "assistant",
        "Colours",
        {"user_id": "user-123"},
    )
    assert session.status == SessionStatus.ACTIVE
    assert session.ended_at is None
    assert session.last_event_seq == 1
    assert _events(session) == [
        (
            1,
            EventType.SESSION_CREATED,
            {"agent": "assistant", "title": "Colours", "metadata": {"user_id": "user-123"}},
        )
    ]


def test_session_create_cuts_an_overlong_title(owner):
    session = services.session_create(owner_id=owner.pk, agent="assistant", title="x" * 500)

    assert len(Session.objects.get(pk=session.pk).title) == services.MAX_TITLE_LENGTH


def test_session_create_for_an_unknown_user_is_not_found(owner):
    with pytest.raises(NotFound):
        services.session_create(owner_id=owner.pk + 1000, agent="assistant")

    assert not Session.objects.exists()
    assert not RunEvent.objects.exists()


# session_update


def test_session_update_renames_and_records_the_change(owner):
    session = SessionFactory(owner=owner, title="Old", metadata={"a": 1})

    updated = services.session_update(session_id=session.id, title="New")

    assert (updated.title, updated.metadata) == ("New", {"a": 1})
    assert _events(session) == [(1, EventType.SESSION_UPDATED, {"title": "New"})]


def test_session_update_replaces_the_metadata(owner):
    session = SessionFactory(owner=owner, title="Same", metadata={"a": 1, "b": 2})

    updated = services.session_update(session_id=session.id, metadata={"user_id": "user-9"})

    assert (updated.title, updated.metadata) == ("Same", {"user_id": "user-9"})
    assert Session.objects.get(pk=session.pk).metadata == {"user_id": "user-9"}
    assert _events(session) == [(1, EventType.SESSION_UPDATED, {"metadata": {"user_id": "user-9"}})]


def test_session_update_moves_updated_at(owner):
    session = SessionFactory(owner=owner)
    an_hour_ago = timezone.now() - dt.timedelta(hours=1)
    Session.objects.filter(pk=session.pk).update(updated_at=an_hour_ago)

    updated = services.session_update(session_id=session.id, title="Later")

    assert updated.updated_at > an_hour_ago + dt.timedelta(minutes=59)


def test_session_update_with_nothing_to_change_records_nothing(owner):
    session = SessionFactory(owner=owner, title="Same")

    updated = services.session_update(session_id=session.id)

    assert updated.title == "Same"
    assert _events(session) == []


def test_session_update_of_an_unknown_session_is_not_found():
    with pytest.raises(NotFound):
        services.session_update(session_id=uuid.uuid4(), title="x")


# session_end


def test_session_end_ends_the_session_and_stops_its_runs(owner):
    session = SessionFactory(owner=owner)
    pending = RunFactory(session=session, status=RunStatus.PENDING)
    waiting = RunFactory(session=session, status=RunStatus.AWAITING_INPUT)
    running = RunFactory(
        session=session,
        status=RunStatus.RUNNING,
        lease_owner="worker-1",
        lease_expires_at=timezone.now() + dt.timedelta(minutes=1),
    )
    finished = RunFactory(session=session, status=RunStatus.COMPLETED, output="done")
    elsewhere = RunFactory(session=SessionFactory(owner=owner), status=RunStatus.PENDING)

    ended = run_sessions.session_end(session_id=session.id)

    assert ended.status == SessionStatus.ENDED
    assert ended.ended_at is not None
    for run in (pending, waiting):
        run.refresh_from_db()
        assert run.status == RunStatus.CANCELED
        assert run.cancel_reason == "session_ended"
    running.refresh_from_db()
    # The loop stepping through a running run cancels it at its next step.
    assert running.status == RunStatus.RUNNING
    assert running.cancel_requested_at is not None
    assert OrmRunStore().cancel_requested(running.id) == "session_ended"
    assert Run.objects.get(pk=finished.pk).status == RunStatus.COMPLETED
    assert Run.objects.get(pk=elsewhere.pk).status == RunStatus.PENDING

    events = _events(session)
    assert sorted((e[1], e[2]["reason"]) for e in events[:-1]) == [
        (EventType.RUN_CANCELED, "session_ended"),
        (EventType.RUN_CANCELED, "session_ended"),
    ]
    assert [e[0] for e in events] == [1, 2, 3]
    _seq, last_type, data = events[-1]
    assert last_type == EventType.SESSION_ENDED
    assert data["ended_at"] == ended.ended_at.isoformat()


def test_ending_an_ended_session_changes_nothing(owner):
    session = SessionFactory(owner=owner)
    first = run_sessions.session_end(session_id=session.id)
    events = _events(session)

    second = run_sessions.session_end(session_id=session.id)

    assert second.status == SessionStatus.ENDED
    assert second.ended_at == first.ended_at
    assert _events(session) == events


def test_ending_an_unknown_session_is_not_found():
    with pytest.raises(NotFound):
        run_sessions.session_end(session_id=uuid.uuid4())


def test_an_ended_session_accepts_no_new_run(owner):
    session = SessionFactory(owner=owner)
    run_sessions.session_end(session_id=session.id)
    session.refresh_from_db()
    seq = session.last_event_seq

    with pytest.raises(SessionEnded, match="has ended"):
        run_services.run_create(session_id=session.id, agent="assistant", input="hello?")

    assert not Run.objects.filter(session=session).exists()
    session.refresh_from_db()
    assert session.last_event_seq == seq
    assert RunEvent.objects.filter(session=session).count() == seq


def test_run_create_in_an_active_session_records_a_pending_run(owner):
    session = SessionFactory(owner=owner)

    run = run_services.run_create(
        session_id=session.id, agent="assistant", input="hello", labels={"tier": "free"}
    )

    assert run.status == RunStatus.PENDING
    assert _events(session) == [
        (
            1,
            EventType.RUN_CREATED,
            {
                "agent": "assistant",
                "input": "hello",
                "labels": {"tier": "free"},
                "parent_run": None,
                # The session's first run: it continues from nothing, redoes nothing.
                "previous_run": None,
                "retry_of": None,
                "regenerates": None,
                "edit_of": None,
            },
        )
    ]


def test_session_delete_of_an_unknown_session_is_not_found():
    with pytest.raises(NotFound):
        services.session_delete(session_id=uuid.uuid4())
