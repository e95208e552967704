"""Writing memory: versions, revisions with their actor, conditional writes, scope
checks, and the events that tell a session's log about a change."""

from __future__ import annotations

import datetime as dt

import pytest
from django.utils import timezone

from goaai.runtime.errors import InvalidMemoryScope, MemoryConflict
from goaai.runtime.vocabulary import EventType, MemoryScope, RunStatus, WriterKind
from memory_app import services
from memory_app.models import MemoryEntry, MemoryRevision, RevisionAction
from runs_app.store import OrmRunStore
from sessions_app.models import RunEvent, Session
from tests.factories import RunFactory, SessionFactory, ToolCallFactory, TurnFactory

pytestmark = pytest.mark.django_db


def _revisions(entry_id) -> list[tuple]:
    return list(
        MemoryRevision.objects.filter(entry_id=entry_id)
        .order_by("version")
        .values_list(
            "version", "action", "value", "actor_kind", "actor_user_id", "actor_run_id",
            "actor_tool_call_id",
        )
    )  # fmt: skip


def _store_session(session, value="green", **kwargs) -> MemoryEntry:
    return services.memory_store(
        key="favourite colour",
        value=value,
        scope=MemoryScope.SESSION,
        session_id=session.id,
        **kwargs,
    )


@pytest.fixture
def session(owner):
    return SessionFactory(owner=owner)


@pytest.fixture
def tool_call(session):
    run = RunFactory(session=session, status=RunStatus.RUNNING)
    return ToolCallFactory(turn=TurnFactory(run=run, index=0), name="memory_store")


# Create and update


def test_store_creates_an_entry_at_version_one_with_a_revision(session):
    entry = _store_session(session)

    entry.refresh_from_db()
    assert (entry.key, entry.value, entry.scope, entry.session_id, entry.version) == (
        "favourite colour",
        "green",
        MemoryScope.SESSION,
        session.id,
        1,
    )
    assert entry.written_by_kind == WriterKind.SYSTEM
    assert _revisions(entry.pk) == [
        (1, RevisionAction.CREATED, "green", WriterKind.SYSTEM, None, None, None)
    ]


def test_each_change_bumps_the_version_and_records_who_made_it(session, owner, tool_call):
    created = _store_session(session, "green")
    by_user = _store_session(session, "blue", written_by_user_id=owner.pk)
    by_run = _store_session(
        session,
        {"shade": "teal"},
        written_by_run_id=tool_call.run_id,
        written_by_tool_call_id=tool_call.id,
    )

    assert created.pk == by_user.pk == by_run.pk
    assert [created.version, by_user.version, by_run.version] == [1, 2, 3]
    entry = MemoryEntry.objects.get()
    assert (entry.value, entry.version) == ({"shade": "teal"}, 3)
    assert (entry.written_by_kind, entry.written_by_run_id, entry.written_by_tool_call_id) == (
        WriterKind.RUN,
        tool_call.run_id,
        tool_call.id,
    )
    assert entry.written_by_user_id is None
    assert _revisions(entry.pk) == [
        (1, RevisionAction.CREATED, "green", WriterKind.SYSTEM, None, None, None),
        (2, RevisionAction.UPDATED, "blue", WriterKind.USER, owner.pk, None, None),
        (
            3,
            RevisionAction.UPDATED,
            {"shade": "teal"},
            WriterKind.RUN,
            None,
            tool_call.run_id,
            tool_call.id,
        ),
    ]


def test_store_strips_the_key(session):
    entry = services.memory_store(
        key="  favourite colour ", value="green", scope=MemoryScope.SESSION, session_id=session.id
    )

    assert entry.key == "favourite colour"
    assert _store_session(session, "red").pk == entry.pk


def test_entries_of_different_scopes_and_owners_are_separate(session, owner, other_user):
    keys = {"key": "colour", "value": "x"}
    a = services.memory_store(scope=MemoryScope.SESSION, session_id=session.id, **keys)
    b = services.memory_store(scope=MemoryScope.USER, user_id=owner.pk, **keys)
    c = services.memory_store(scope=MemoryScope.USER, user_id=other_user.pk, **keys)
    d = services.memory_store(scope=MemoryScope.AGENT, agent="assistant", **keys)
    e = services.memory_store(scope=MemoryScope.GLOBAL, **keys)

    assert len({a.pk, b.pk, c.pk, d.pk, e.pk}) == 5
    assert all(entry.version == 1 for entry in (a, b, c, d, e))


def test_an_update_sets_the_expiry_it_is_given(session):
    later = timezone.now() + dt.timedelta(days=1)
    _store_session(session, "green", expires_at=later)

    assert MemoryEntry.objects.get().expires_at == later


# Conditional writes


def test_expected_version_zero_creates(session):
    entry = _store_session(session, expected_version=0)

    assert (entry.version, MemoryEntry.objects.get().value) == (1, "green")


def _assert_unchanged(entry: MemoryEntry, value, version: int, revisions: int) -> None:
    stored = MemoryEntry.objects.get(pk=entry.pk)
    assert (stored.value, stored.version) == (value, version)
    assert MemoryRevision.objects.filter(entry_id=entry.pk).count() == revisions


def test_expected_version_zero_refuses_an_existing_entry(session):
    entry = _store_session(session, "green")
    seq = Session.objects.get(pk=session.pk).last_event_seq

    with pytest.raises(MemoryConflict) as excinfo:
        _store_session(session, "red", expected_version=0)

    assert excinfo.value.current.pk == entry.pk
    assert excinfo.value.current.version == 1
    assert excinfo.value.current.value == "green"
    _assert_unchanged(entry, "green", 1, 1)
    assert Session.objects.get(pk=session.pk).last_event_seq == seq


def test_expected_version_n_updates_an_entry_still_at_n(session):
    _store_session(session, "green")
    _store_session(session, "blue")

    entry = _store_session(session, "red", expected_version=2)

    assert (entry.version, entry.value) == (3, "red")
    assert MemoryRevision.objects.filter(entry_id=entry.pk).count() == 3


def test_a_stale_version_is_refused_with_the_current_entry_and_changes_nothing(session):
    _store_session(session, "green")
    entry = _store_session(session, "blue")
    seq = Session.objects.get(pk=session.pk).last_event_seq

    with pytest.raises(MemoryConflict, match="version 2, not 1") as excinfo:
        _store_session(session, "red", expected_version=1)

    current = excinfo.value.current
    assert (current.pk, current.version, current.value) == (entry.pk, 2, "blue")
    _assert_unchanged(entry, "blue", 2, 2)
    assert Session.objects.get(pk=session.pk).last_event_seq == seq
    assert RunEvent.objects.filter(session=session).count() == seq


def test_expected_version_n_does_not_create_a_missing_entry(session):
    with pytest.raises(MemoryConflict) as excinfo:
        _store_session(session, "green", expected_version=1)

    assert excinfo.value.current is None
    assert not MemoryEntry.objects.exists()
    assert not MemoryRevision.objects.exists()
    assert not RunEvent.objects.exists()


def test_delete_with_a_stale_version_is_refused_and_keeps_the_entry(session):
    _store_session(session, "green")
    entry = _store_session(session, "blue")

    with pytest.raises(MemoryConflict) as excinfo:
        services.memory_delete(
            key="favourite colour",
            scope=MemoryScope.SESSION,
            session_id=session.id,
            expected_version=1,
        )

    assert excinfo.value.current.version == 2
    _assert_unchanged(entry, "blue", 2, 2)


def test_delete_at_the_expected_version_deletes(session):
    _store_session(session, "green")

    assert services.memory_delete(
        key="favourite colour", scope=MemoryScope.SESSION, session_id=session.id, expected_version=1
    )
    assert not MemoryEntry.objects.exists()


def test_deleting_a_missing_entry_says_so_and_records_nothing(session):
    assert (
        services.memory_delete(key="nothing", scope=MemoryScope.SESSION, session_id=session.id)
        is False
    )
    assert not MemoryRevision.objects.exists()
    assert not RunEvent.objects.exists()


# Scope and owner checks


INVALID = {
    "session scope without a session": {"scope": "session"},
    "session scope naming a user": {"scope": "session", "session": True, "user": True},
    "user scope without a user": {"scope": "user"},
    "user scope naming a session": {"scope": "user", "user": True, "session": True},
    "agent scope without an agent": {"scope": "agent"},
    "agent scope naming a user": {"scope": "agent", "agent": "assistant", "user": True},
    "global scope naming an agent": {"scope": "global", "agent": "assistant"},
    "global scope naming a session": {"scope": "global", "session": True},
    "unknown scope": {"scope": "team"},
    "empty key": {"scope": "global", "key": "   "},
    "overlong key": {"scope": "global", "key": "k" * 201},
}


@pytest.mark.parametrize("case", INVALID.values(), ids=INVALID.keys())
def test_invalid_scope_or_owner_is_refused_and_stores_nothing(case, session, owner):
    with pytest.raises(InvalidMemoryScope):
        services.memory_store(
            key=case.get("key", "colour"),
            value="green",
            scope=case["scope"],
            session_id=session.id if case.get("session") else None,
            user_id=owner.pk if case.get("user") else None,
            agent=case.get("agent", ""),
        )

    assert not MemoryEntry.objects.exists()
    assert not MemoryRevision.objects.exists()
    assert not RunEvent.objects.exists()


def test_invalid_scope_messages_say_what_is_wrong(session):
    with pytest.raises(InvalidMemoryScope, match="needs a session"):
        services.memory_store(key="k", value=1, scope="session")
    with pytest.raises(InvalidMemoryScope, match="cannot name a session"):
        services.memory_store(key="k", value=1, scope="global", session_id=session.id)
    with pytest.raises(InvalidMemoryScope, match="Unknown memory scope 'team'"):
        services.memory_store(key="k", value=1, scope="team")
    with pytest.raises(InvalidMemoryScope, match="cannot be empty"):
        services.memory_store(key=" ", value=1, scope="global")


# Events


def _log(session) -> list[tuple]:
    return list(
        RunEvent.objects.filter(session=session)
        .order_by("seq")
        .values_list("type", "run_id", "data")
    )


def test_a_session_entry_change_goes_to_the_sessions_log(session, owner):
    entry = _store_session(session, written_by_user_id=owner.pk)

    assert _log(session) == [
        (
            EventType.MEMORY_STORED,
            None,
            {
                "entry": str(entry.pk),
                "key": "favourite colour",
                "scope": "session",
                "version": 1,
                "action": "created",
                "written_by": {
                    "kind": "user",
                    "user_id": owner.pk,
                    "run_id": None,
                    "tool_call_id": None,
                },
            },
        )
    ]
    assert Session.objects.get(pk=session.pk).last_event_seq == 1


def test_the_memory_deleted_event_names_the_deleted_entry(session):
    entry = _store_session(session)

    services.memory_delete(key="favourite colour", scope=MemoryScope.SESSION, session_id=session.id)

    assert _log(session)[-1] == (
        EventType.MEMORY_DELETED,
        None,
        {"entry": str(entry.pk), "key": "favourite colour", "scope": "session"},
    )
    assert Session.objects.get(pk=session.pk).last_event_seq == 2


def test_a_change_made_by_a_run_goes_to_the_runs_session_log(session, owner, tool_call):
    """The runtime's store knows the run's session; the service records there."""
    store = OrmRunStore()
    entry = store.store_memory(
        key="name",
        value="Ada",
        scope=MemoryScope.USER,
        user_id=owner.pk,
        written_by_run=tool_call.run_id,
        written_by_tool_call=tool_call.id,
    )
    store.delete_memory(
        key="name", scope=MemoryScope.USER, user_id=owner.pk, written_by_run=tool_call.run_id
    )

    log = _log(session)
    assert [(event_type, run_id) for event_type, run_id, _ in log] == [
        (EventType.MEMORY_STORED, tool_call.run_id),
        (EventType.MEMORY_DELETED, tool_call.run_id),
    ]
    assert log[0][2]["written_by"] == {
        "kind": "run",
        "user_id": None,
        "run_id": str(tool_call.run_id),
        "tool_call_id": str(tool_call.id),
    }
    assert (log[0][2]["entry"], log[0][2]["scope"]) == (str(entry.id), "user")


def test_changes_made_outside_any_session_record_no_event(session, owner):
    services.memory_store(
        key="name",
        value="Ada",
        scope=MemoryScope.USER,
        user_id=owner.pk,
        written_by_user_id=owner.pk,
    )
    services.memory_store(key="motto", value="hi", scope=MemoryScope.GLOBAL)
    services.memory_store(key="tone", value="brief", scope=MemoryScope.AGENT, agent="assistant")
    services.memory_delete(key="motto", scope=MemoryScope.GLOBAL)

    assert not RunEvent.objects.exists()
    assert Session.objects.get(pk=session.pk).last_event_seq == 0


# Expiry


def test_purging_expired_entries_removes_only_those(session):
    past = timezone.now() - dt.timedelta(minutes=1)
    future = timezone.now() + dt.timedelta(days=1)
    services.memory_store(
        key="old", value=1, scope="session", session_id=session.id, expires_at=past
    )
    services.memory_store(
        key="new", value=2, scope="session", session_id=session.id, expires_at=future
    )
    services.memory_store(key="forever", value=3, scope="session", session_id=session.id)

    assert services.memory_purge_expired() == 1

    assert sorted(MemoryEntry.objects.values_list("key", flat=True)) == ["forever", "new"]


def test_purging_an_expired_entry_keeps_its_deletion_in_the_history(session):
    """Every change is kept as a revision, a purge included: otherwise the history
    of a purged entry ends at its last write, as if it still existed."""
    past = timezone.now() - dt.timedelta(minutes=1)
    entry = services.memory_store(
        key="old", value=1, scope="session", session_id=session.id, expires_at=past
    )

    services.memory_purge_expired()

    assert [row[:3] for row in _revisions(entry.pk)] == [
        (1, RevisionAction.CREATED, 1),
        (2, RevisionAction.DELETED, None),
    ]
