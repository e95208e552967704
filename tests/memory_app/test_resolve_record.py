"""The record a resolved read returns is the stored entry, field for field, at
every scope: the hot path builds it from fewer columns than the entry has."""

from __future__ import annotations

import datetime as dt
import time

import pytest
from django.utils import timezone

from goaai.runtime.types import MemoryRecord
from goaai.runtime.vocabulary import MemoryScope
from memory_app import selectors, services
from memory_app.models import MemoryEntry
from tests.factories import SessionFactory

pytestmark = pytest.mark.django_db

KEY = "favourite colour"


@pytest.mark.parametrize(
    ("scope", "value"),
    [
        (MemoryScope.SESSION, {"likes": ["figs", 3]}),
        (MemoryScope.USER, "grün"),
        (MemoryScope.AGENT, 42),
        (MemoryScope.GLOBAL, [True, 3.5]),
    ],
)
def test_the_resolved_record_is_the_stored_entry(owner, scope, value):
    session = SessionFactory(owner=owner, agent="assistant")
    owners = {
        MemoryScope.SESSION: {"session_id": session.id},
        MemoryScope.USER: {"user_id": owner.pk},
        MemoryScope.AGENT: {"agent": "assistant"},
        MemoryScope.GLOBAL: {},
    }
    expires = timezone.now() + dt.timedelta(hours=1)
    services.memory_store(key=KEY, value=value, scope=scope, expires_at=expires, **owners[scope])

    record = selectors.memory_resolve_record(key=KEY, session_id=session.id)

    assert record == MemoryRecord.of(MemoryEntry.objects.get(key=KEY, scope=scope))
    assert record is not None
    assert record.expires_at == expires


def test_an_entry_expiring_within_the_current_second_is_still_read(owner):
    session = SessionFactory(owner=owner)
    # The comparison is on text down to the microsecond, not on whole seconds.
    soon = timezone.now() + dt.timedelta(milliseconds=300)
    services.memory_store(
        key=KEY, value="soon gone", scope="session", session_id=session.id, expires_at=soon
    )

    assert selectors.memory_resolve_record(key=KEY, session_id=session.id) is not None
    time.sleep(max(0.0, (soon - timezone.now()).total_seconds()) + 0.01)
    assert selectors.memory_resolve_record(key=KEY, session_id=session.id) is None
