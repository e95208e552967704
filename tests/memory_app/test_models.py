"""The database itself keeps one entry per (scope, owner, key) and an owner that
matches the scope, whatever code writes the rows."""

from __future__ import annotations

import pytest
from django.db import IntegrityError, transaction

from memory_app.models import MemoryEntry
from tests.factories import MemoryEntryFactory, SessionFactory, UserFactory

pytestmark = pytest.mark.django_db


# The factory trait that gives each scope the owner it needs.
SCOPES = {
    "session": {},
    "user": {"user_scoped": True},
    "agent": {"agent_scoped": True},
    "global": {"global_scoped": True},
}


@pytest.mark.parametrize("scope", SCOPES)
def test_a_second_entry_for_the_same_scope_owner_and_key_is_refused(scope):
    first = MemoryEntryFactory(key="colour", **SCOPES[scope])
    same_owner = {"session": first.session, "user": first.user, "agent": first.agent}

    with pytest.raises(IntegrityError), transaction.atomic():
        MemoryEntryFactory(key="colour", **SCOPES[scope], **same_owner)

    assert MemoryEntry.objects.count() == 1


def test_the_same_key_may_exist_once_per_owner_and_scope():
    session = SessionFactory()
    MemoryEntryFactory(key="colour", session=session)
    MemoryEntryFactory(key="colour", session=SessionFactory(owner=session.owner))
    MemoryEntryFactory(key="colour", user_scoped=True, user=session.owner)
    MemoryEntryFactory(key="colour", user_scoped=True, user=UserFactory())
    MemoryEntryFactory(key="colour", agent_scoped=True, agent="assistant")
    MemoryEntryFactory(key="colour", agent_scoped=True, agent="researcher")
    MemoryEntryFactory(key="colour", global_scoped=True)

    assert MemoryEntry.objects.filter(key="colour").count() == 7


@pytest.mark.parametrize(
    "fields",
    [
        pytest.param({"scope": "session", "session": None}, id="session without session"),
        pytest.param({"scope": "user", "session": None, "user": None}, id="user without user"),
        pytest.param({"scope": "global", "agent": "assistant", "session": None}, id="global+agent"),
        pytest.param({"scope": "agent", "session": None, "agent": ""}, id="agent without agent"),
        pytest.param({"version": 0}, id="version zero"),
    ],
)
def test_an_entry_whose_owner_does_not_match_its_scope_is_refused(fields):
    with pytest.raises(IntegrityError), transaction.atomic():
        MemoryEntryFactory(**fields)

    assert not MemoryEntry.objects.exists()
