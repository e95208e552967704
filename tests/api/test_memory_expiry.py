"""Expired memory through the API: the list hides it unless asked (for an audit),
and a key whose entry expired can be created again."""

from __future__ import annotations

import pytest

from goaai.runtime.vocabulary import MemoryScope
from memory_app import services
from memory_app.models import MemoryEntry
from tests.factories import SessionFactory, expired_memory

pytestmark = pytest.mark.django_db

MEMORY = "/api/v1/memory/"
KEY = "favourite colour"


@pytest.fixture
def session(owner):
    return SessionFactory(owner=owner, agent="assistant")


def _expired(session, key: str = KEY, value: str = "green") -> MemoryEntry:
    return expired_memory(session, key, value)


def test_the_list_hides_expired_entries_unless_asked(api, session):
    _expired(session, key="gone")
    services.memory_store(key="kept", value=1, scope=MemoryScope.SESSION, session_id=session.id)

    default = api.get(MEMORY)
    expired = api.get(MEMORY, {"expired": "true"})
    live = api.get(MEMORY, {"expired": "false"})

    assert [row["key"] for row in default.json()["results"]] == ["kept"]
    assert [row["key"] for row in expired.json()["results"]] == ["gone"]
    assert [row["key"] for row in live.json()["results"]] == ["kept"]
    assert api.get(MEMORY, {"expired": "perhaps"}).status_code == 400


def test_posting_a_key_whose_entry_expired_is_a_201(api, session):
    _expired(session)

    response = api.post(
        MEMORY,
        {"key": KEY, "value": "blue", "scope": "session", "session": str(session.pk)},
        format="json",
    )

    assert response.status_code == 201, response.content
    assert response.json()["version"] == 1
    assert [row["value"] for row in api.get(MEMORY).json()["results"]] == ["blue"]
