"""What goes when a session, a user or a memory entry is deleted, and what stays."""

from __future__ import annotations

import pytest

from goaai.runtime.vocabulary import MemoryScope, WriterKind
from memory_app import services as memory_services
from memory_app.models import MemoryEntry, MemoryRevision, RevisionAction
from runs_app import services as run_services
from runs_app.models import Run, ToolCall, Turn
from sessions_app import services as session_services
from sessions_app.models import RunEvent, Session

pytestmark = pytest.mark.django_db


def _conversation(owner):
    """A session with a finished run, a turn, a tool call, events, session memory
    (two revisions) and a user-scoped entry the run wrote."""
    session = session_services.session_create(owner_id=owner.pk, agent="assistant")
    run = run_services.run_create(session_id=session.id, agent="assistant", input="remember")
    run_services.run_claim(run_id=run.id, owner="worker-1", lease_seconds=60)
    turn = run_services.turn_start(run_id=run.id, index=0, model="scripted", request_messages=[])
    call = run_services.tool_call_start(
        turn_id=turn.id, index=0, call_id="call_1", name="memory_store", arguments={}
    )
    memory_services.memory_store(
        key="colour", value="blue", scope=MemoryScope.SESSION, session_id=session.id
    )
    memory_services.memory_store(
        key="colour",
        value="green",
        scope=MemoryScope.SESSION,
        session_id=session.id,
        written_by_run_id=run.id,
        written_by_tool_call_id=call.id,
    )
    memory_services.memory_store(
        key="name",
        value="Ada",
        scope=MemoryScope.USER,
        user_id=owner.pk,
        written_by_run_id=run.id,
        written_by_tool_call_id=call.id,
    )
    run_services.tool_call_finish(tool_call_id=call.id, result={"ok": True})
    run_services.run_complete(run_id=run.id, output="Done.")
    return session, run, call


def test_deleting_a_session_removes_everything_recorded_in_it(owner):
    session, _run, _call = _conversation(owner)
    kept, kept_run, kept_call = _conversation(owner)
    assert RunEvent.objects.filter(session=session).exists()

    session_services.session_delete(session_id=session.id)

    assert not Session.objects.filter(pk=session.pk).exists()
    assert not Run.objects.filter(session_id=session.id).exists()
    assert not Turn.objects.filter(run__session_id=session.id).exists()
    assert not ToolCall.objects.filter(session_id=session.id).exists()
    assert not RunEvent.objects.filter(session_id=session.id).exists()
    assert not MemoryEntry.objects.filter(session_id=session.id).exists()
    assert not MemoryRevision.objects.filter(session_id=session.id).exists()
    # The other conversation of the same owner is untouched.
    assert Run.objects.filter(session=kept).count() == 1
    assert Turn.objects.filter(run=kept_run).count() == 1
    assert ToolCall.objects.filter(pk=kept_call.pk).exists()
    kept_seq = Session.objects.get(pk=kept.pk).last_event_seq
    assert kept_seq > 0
    assert RunEvent.objects.filter(session=kept).count() == kept_seq
    assert MemoryEntry.objects.filter(session=kept).count() == 1
    assert MemoryRevision.objects.filter(session=kept).count() == 2


def test_the_owners_user_memory_survives_deleting_the_session_that_wrote_it(owner):
    session, _run, _call = _conversation(owner)

    session_services.session_delete(session_id=session.id)

    entry = MemoryEntry.objects.get(scope=MemoryScope.USER, user=owner, key="name")
    assert entry.value == "Ada"
    # The writer's run is gone; the entry says a run wrote it, no longer which.
    assert entry.written_by_kind == WriterKind.RUN
    assert (entry.written_by_run_id, entry.written_by_tool_call_id) == (None, None)
    revision = MemoryRevision.objects.get(entry_id=entry.pk)
    assert (revision.action, revision.value, revision.actor_run_id) == (
        RevisionAction.CREATED,
        "Ada",
        None,
    )


def test_deleting_a_user_removes_their_sessions_and_their_memory(owner, other_user):
    _conversation(owner)
    _conversation(owner)
    theirs, their_run, _ = _conversation(other_user)
    memory_services.memory_store(
        key="motto", value="carpe diem", scope=MemoryScope.GLOBAL, written_by_user_id=owner.pk
    )

    owner_id = owner.pk
    assert MemoryRevision.objects.filter(user_id=owner_id).exists()

    owner.delete()

    assert not Session.objects.filter(owner_id=owner_id).exists()
    assert not MemoryEntry.objects.filter(user_id=owner_id).exists()
    assert not MemoryRevision.objects.filter(user_id=owner_id).exists()
    assert list(Session.objects.values_list("pk", flat=True)) == [theirs.id]
    assert Run.objects.get().pk == their_run.id
    assert set(MemoryEntry.objects.values_list("scope", "key")) == {
        (MemoryScope.SESSION, "colour"),
        (MemoryScope.USER, "name"),
        (MemoryScope.GLOBAL, "motto"),
    }
    assert MemoryEntry.objects.get(scope=MemoryScope.USER).user == other_user
    # Global memory a deleted user wrote stays, without naming them.
    motto = MemoryEntry.objects.get(scope=MemoryScope.GLOBAL)
    assert motto.written_by_user_id is None
    assert MemoryRevision.objects.get(entry_id=motto.pk).actor_user_id is None


def test_memory_delete_keeps_the_history_and_records_the_deletion(owner):
    session, run, _call = _conversation(owner)
    entry = MemoryEntry.objects.get(scope=MemoryScope.SESSION, session=session)

    deleted = memory_services.memory_delete(
        key="colour", scope=MemoryScope.SESSION, session_id=session.id, written_by_user_id=owner.pk
    )

    assert deleted is True
    assert not MemoryEntry.objects.filter(pk=entry.pk).exists()
    revisions = list(
        MemoryRevision.objects.filter(entry_id=entry.pk)
        .order_by("version")
        .values_list("version", "action", "value", "actor_kind", "actor_user_id", "actor_run_id")
    )
    assert revisions == [
        (1, RevisionAction.CREATED, "blue", WriterKind.SYSTEM, None, None),
        (2, RevisionAction.UPDATED, "green", WriterKind.RUN, None, run.id),
        (3, RevisionAction.DELETED, None, WriterKind.USER, owner.pk, None),
    ]
