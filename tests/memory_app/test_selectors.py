"""Reading memory: the most specific live entry wins, session -> the session's user
-> the session's agent -> global, and nobody else's entries ever answer."""

from __future__ import annotations

import datetime as dt
import uuid

import pytest
from django.utils import timezone

from goaai.runtime.errors import InvalidMemoryScope, NotFound
from goaai.runtime.vocabulary import MemoryScope
from memory_app import services
from memory_app.selectors import memory_context, memory_get, memory_resolve
from tests.factories import MemoryEntryFactory, SessionFactory

pytestmark = pytest.mark.django_db

KEY = "favourite colour"


@pytest.fixture
def session(owner):
    return SessionFactory(owner=owner, agent="assistant")


def _store(scope: str, value: str, **owner) -> None:
    services.memory_store(key=KEY, value=value, scope=scope, **owner)


def _delete(scope: str, **owner) -> None:
    assert services.memory_delete(key=KEY, scope=scope, **owner)


def _resolved(session) -> str | None:
    entry = memory_resolve(key=KEY, session_id=session.id)
    return None if entry is None else entry.value


@pytest.fixture
def noise(session, owner, other_user):
    """Entries for the same key that the session must never read: another session
    of the same owner, another user, another agent."""
    _store(MemoryScope.SESSION, "other session", session_id=SessionFactory(owner=owner).id)
    _store(MemoryScope.USER, "other user", user_id=other_user.pk)
    _store(MemoryScope.AGENT, "other agent", agent="researcher")


def test_resolution_prefers_each_more_specific_scope_as_it_appears(session, owner, noise):
    assert _resolved(session) is None

    _store(MemoryScope.GLOBAL, "global")
    assert _resolved(session) == "global"

    _store(MemoryScope.AGENT, "agent", agent="assistant")
    assert _resolved(session) == "agent"

    _store(MemoryScope.USER, "user", user_id=owner.pk)
    assert _resolved(session) == "user"

    _store(MemoryScope.SESSION, "session", session_id=session.id)
    assert _resolved(session) == "session"


def test_resolution_falls_back_scope_by_scope_as_entries_are_deleted(session, owner, noise):
    _store(MemoryScope.GLOBAL, "global")
    _store(MemoryScope.AGENT, "agent", agent="assistant")
    _store(MemoryScope.USER, "user", user_id=owner.pk)
    _store(MemoryScope.SESSION, "session", session_id=session.id)
    assert _resolved(session) == "session"

    _delete(MemoryScope.SESSION, session_id=session.id)
    assert _resolved(session) == "user"

    _delete(MemoryScope.USER, user_id=owner.pk)
    assert _resolved(session) == "agent"

    _delete(MemoryScope.AGENT, agent="assistant")
    assert _resolved(session) == "global"

    _delete(MemoryScope.GLOBAL)
    assert _resolved(session) is None


def test_the_resolved_entry_says_which_scope_it_came_from(session, owner):
    _store(MemoryScope.USER, "user", user_id=owner.pk)

    entry = memory_resolve(key=KEY, session_id=session.id)

    assert (entry.scope, entry.user_id, entry.session_id) == (MemoryScope.USER, owner.pk, None)


def test_another_users_entry_is_never_resolved(session, other_user):
    _store(MemoryScope.USER, "Bob's colour", user_id=other_user.pk)
    their_session = SessionFactory(owner=other_user)

    assert _resolved(session) is None
    assert _resolved(their_session) == "Bob's colour"


def test_another_agents_entry_is_never_resolved(session, owner):
    _store(MemoryScope.AGENT, "researcher's", agent="researcher")

    assert _resolved(session) is None
    assert _resolved(SessionFactory(owner=owner, agent="researcher")) == "researcher's"


def test_resolution_matches_the_key_exactly(session):
    _store(MemoryScope.SESSION, "green", session_id=session.id)

    assert memory_resolve(key="favourite", session_id=session.id) is None
    assert memory_resolve(key="favourite colour!", session_id=session.id) is None


def test_expired_entries_are_skipped(session, owner):
    past = timezone.now() - dt.timedelta(seconds=1)
    future = timezone.now() + dt.timedelta(hours=1)
    services.memory_store(
        key=KEY, value="stale", scope="session", session_id=session.id, expires_at=past
    )
    services.memory_store(key=KEY, value="fresh", scope="user", user_id=owner.pk, expires_at=future)

    assert _resolved(session) == "fresh"
    assert memory_get(key=KEY, scope="session", session_id=session.id) is None
    assert memory_get(key=KEY, scope="user", user_id=owner.pk).value == "fresh"


def test_resolving_for_an_unknown_session_is_not_found():
    with pytest.raises(NotFound):
        memory_resolve(key=KEY, session_id=uuid.uuid4())


def test_memory_get_reads_exactly_one_scope(session, owner):
    _store(MemoryScope.USER, "user", user_id=owner.pk)
    _store(MemoryScope.GLOBAL, "global")

    assert memory_get(key=KEY, scope="session", session_id=session.id) is None
    assert memory_get(key=KEY, scope="user", user_id=owner.pk).value == "user"
    assert memory_get(key=KEY, scope="agent", agent="assistant") is None
    assert memory_get(key=KEY, scope="global").value == "global"


@pytest.mark.parametrize(
    "kwargs",
    [
        {"scope": "session"},
        {"scope": "user", "agent": "assistant"},
        {"scope": "global", "agent": "assistant"},
        {"scope": "everyone"},
    ],
)
def test_memory_get_checks_the_scope_and_owner(kwargs):
    with pytest.raises(InvalidMemoryScope):
        memory_get(key=KEY, **kwargs)


def test_a_run_starts_with_the_value_it_would_read_for_each_live_key(session, owner, noise):
    _store(MemoryScope.GLOBAL, "global")
    _store(MemoryScope.SESSION, "session", session_id=session.id)
    MemoryEntryFactory(key="motto", value="brief", agent_scoped=True, agent="assistant")
    MemoryEntryFactory(
        key="expired",
        value="gone",
        session=session,
        expires_at=timezone.now() - dt.timedelta(seconds=1),
    )

    facts = memory_context(session_id=session.id, query="hello", budget=1000)

    # The session's value hides the global one of the same key; expired entries and
    # other sessions' or agents' entries are not shown. A message that matches
    # nothing is told the most recently updated facts first.
    assert facts == (("agent", "motto", "brief"), ("session", KEY, "session"))


def test_resolving_for_a_deleted_session_is_not_found(session, owner):
    _store(MemoryScope.USER, "user", user_id=owner.pk)
    assert _resolved(session) == "user"

    session_id = session.id
    session.delete()

    with pytest.raises(NotFound):
        memory_resolve(key=KEY, session_id=session_id)


def test_a_session_created_after_its_id_was_looked_up_is_found(owner):
    """A lookup that found nothing must not be remembered as "no such session"."""
    session_id = uuid.uuid4()
    with pytest.raises(NotFound):
        memory_resolve(key=KEY, session_id=session_id)

    session = SessionFactory(id=session_id, owner=owner)
    _store(MemoryScope.SESSION, "green", session_id=session.id)

    assert _resolved(session) == "green"


@pytest.mark.django_db
def test_the_facts_a_run_starts_with_show_only_the_value_it_would_read():
    from memory_app.selectors import memory_context, memory_resolve_record
    from memory_app.services import memory_store
    from tests.factories import SessionFactory

    session = SessionFactory()
    memory_store(key="colour", value="blue", scope="user", user_id=session.owner_id)
    memory_store(key="colour", value="red", scope="session", session_id=session.id)
    memory_store(key="pet", value="cat", scope="user", user_id=session.owner_id)

    facts = memory_context(session_id=session.id, query="which colour?", budget=1000)

    assert facts == (("session", "colour", "red"), ("user", "pet", "cat"))
    assert memory_resolve_record(key="colour", session_id=session.id).value == "red"
