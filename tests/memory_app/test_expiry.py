"""Expired memory is gone: lists hide it (the API shows it only when asked, for an
audit), and writing its key again creates a fresh entry in place of the expired
one, recorded as any write is."""

from __future__ import annotations

import pytest
from django.urls import reverse

from goaai.runtime.errors import MemoryConflict
from goaai.runtime.vocabulary import EventType, MemoryScope, WriterKind
from memory_app import services
from memory_app.models import MemoryEntry, MemoryRevision, RevisionAction
from sessions_app.models import RunEvent
from tests.factories import SessionFactory, expired_memory

pytestmark = pytest.mark.django_db

KEY = "favourite colour"


@pytest.fixture
def session(owner):
    return SessionFactory(owner=owner, agent="assistant")


def _expired(session, key: str = KEY, value: str = "green") -> MemoryEntry:
    return expired_memory(session, key, value)


def _history(entry_id) -> list[tuple]:
    return list(
        MemoryRevision.objects.filter(entry_id=entry_id)
        .order_by("version")
        .values_list("version", "action", "actor_kind")
    )


# The service


def test_creating_a_key_whose_entry_expired_makes_a_fresh_entry(session, owner):
    old = _expired(session)

    new = services.memory_store(
        key=KEY,
        value="blue",
        scope=MemoryScope.SESSION,
        session_id=session.id,
        expected_version=0,
        written_by_user_id=owner.pk,
    )

    assert (new.value, new.version, new.expires_at) == ("blue", 1, None)
    assert list(MemoryEntry.objects.values_list("pk", flat=True)) == [new.pk]
    # The expired entry's history ends with its removal, as a purge would record it.
    assert _history(old.pk) == [
        (1, RevisionAction.CREATED, WriterKind.SYSTEM),
        (2, RevisionAction.DELETED, WriterKind.SYSTEM),
    ]
    assert _history(new.pk) == [(1, RevisionAction.CREATED, WriterKind.USER)]
    stored = RunEvent.objects.filter(session=session, type=EventType.MEMORY_STORED).order_by("seq")
    assert [(e.data["entry"], e.data["action"]) for e in stored][-1] == (
        str(new.pk),
        RevisionAction.CREATED,
    )


def test_an_unconditional_write_over_an_expired_entry_starts_again_at_version_one(session):
    old = _expired(session)

    new = services.memory_store(
        key=KEY, value="blue", scope=MemoryScope.SESSION, session_id=session.id
    )

    assert new.pk != old.pk
    assert (new.value, new.version) == ("blue", 1)
    assert MemoryEntry.objects.count() == 1


def test_updating_an_expired_entry_by_its_version_is_a_conflict_with_nothing_current(session):
    old = _expired(session)

    with pytest.raises(MemoryConflict) as raised:
        services.memory_store(
            key=KEY,
            value="blue",
            scope=MemoryScope.SESSION,
            session_id=session.id,
            expected_version=old.version,
        )

    assert raised.value.current is None
    assert MemoryEntry.objects.get().value == "green"


def test_deleting_an_expired_entry_finds_nothing(session):
    _expired(session)

    assert not services.memory_delete(key=KEY, scope=MemoryScope.SESSION, session_id=session.id)


# The admin


def test_the_admin_list_hides_expired_entries_unless_filtered(client, staff, session):
    _expired(session, key="gone")
    services.memory_store(key="kept", value=1, scope=MemoryScope.SESSION, session_id=session.id)
    client.force_login(staff)
    url = reverse("admin:memory_app_memoryentry_changelist")

    default = client.get(url)
    expired = client.get(url, {"expiry": "expired"})
    everything = client.get(url, {"expiry": "all"})

    assert [e.key for e in default.context["cl"].result_list] == ["kept"]
    assert [e.key for e in expired.context["cl"].result_list] == ["gone"]
    assert sorted(e.key for e in everything.context["cl"].result_list) == ["gone", "kept"]
