"""Reads of memory: exact lookups, and the scope resolution runs use."""

from __future__ import annotations

from typing import Any
from uuid import UUID

from django.db.models import Q
from django.utils import timezone

from goaai import sql
from goaai.runtime.errors import InvalidMemoryScope, NotFound
from goaai.runtime.types import MemoryRecord
from goaai.runtime.vocabulary import MemoryScope
from memory_app.models import MemoryEntry
from sessions_app.models import Session
from sessions_app.selectors import session_owner_and_agent


def owner_filter(
    *, scope: str, session_id: UUID | None = None, user_id: int | None = None, agent: str = ""
) -> Q:
    """The condition that picks the entries of one scope's owner; checks that the
    owner given is the one the scope needs and nothing else."""
    given = {
        MemoryScope.SESSION: session_id is not None,
        MemoryScope.USER: user_id is not None,
        MemoryScope.AGENT: bool(agent),
    }
    if scope not in MemoryScope.__members__.values():
        raise InvalidMemoryScope(
            f"Unknown memory scope {scope!r}; use session, user, agent or global."
        )
    needed = MemoryScope(scope)
    for owner_scope, present in given.items():
        if owner_scope == needed and not present:
            raise InvalidMemoryScope(f"A {scope}-scoped entry needs a {scope}.")
        if owner_scope != needed and present:
            raise InvalidMemoryScope(f"A {scope}-scoped entry cannot name a {owner_scope}.")
    if needed == MemoryScope.SESSION:
        return Q(scope=needed, session_id=session_id)
    if needed == MemoryScope.USER:
        return Q(scope=needed, user_id=user_id)
    if needed == MemoryScope.AGENT:
        return Q(scope=needed, agent=agent)
    return Q(scope=needed)


def unexpired() -> Q:
    """The entries whose expiry has not passed: the only ones readers see."""
    return Q(expires_at__isnull=True) | Q(expires_at__gt=timezone.now())


def expired() -> Q:
    """The entries whose expiry has passed and that the purge has not removed yet."""
    return Q(expires_at__lte=timezone.now())


def memory_get(
    *,
    key: str,
    scope: str,
    session_id: UUID | None = None,
    user_id: int | None = None,
    agent: str = "",
) -> MemoryEntry | None:
    """The live entry of exactly one scope and owner, or ``None``."""
    where = owner_filter(scope=scope, session_id=session_id, user_id=user_id, agent=agent)
    return MemoryEntry.objects.filter(where, unexpired(), key=key).first()


def memory_resolve_record(*, key: str, session_id: UUID) -> MemoryRecord | None:
    """The entry a run in the session reads for ``key``: the session's own, else its
    user's, else its agent's, else the global one. Expired entries are skipped.

    The runtime's hot read path: one statement, one indexed probe per scope, most
    specific first (:func:`goaai.sql.memory_resolve_row`).
    """
    row = sql.memory_resolve_row(MemoryEntry, Session, key=key, session_id=session_id)
    if row is None:
        if not Session.objects.filter(pk=session_id).exists():
            raise NotFound(f"No session {session_id}.")
        return None
    entry_id, key, value, scope, _, user_id, agent, version, updated, expires = row
    return MemoryRecord(
        id=sql.uuid_of(entry_id),
        key=key,
        value=sql.json_of(value),
        scope=scope,
        # A session entry found for this session is this session's.
        session_id=session_id if scope == MemoryScope.SESSION else None,
        user_id=user_id,
        agent=agent,
        version=version,
        updated_at=sql.aware(updated),
        expires_at=None if expires is None else sql.aware(expires),
    )


def memory_resolve(*, key: str, session_id: UUID) -> MemoryEntry | None:
    """:func:`memory_resolve_record` as a model instance (for the API and admin)."""
    record = memory_resolve_record(key=key, session_id=session_id)
    return MemoryEntry.objects.filter(pk=record.id).first() if record else None


def memory_context(*, session_id: UUID, limit: int = 20) -> list[tuple[str, str, Any]]:
    """Up to ``limit`` live facts a run in the session starts with, as (scope, key,
    value): the session's own first, then its user's, its agent's, the global ones.

    Each scope is read through its own (owner, key) index with its own limit, so the
    cost does not grow with the size of the global or agent memory.
    """
    owner = session_owner_and_agent(session_id)
    if owner is None:
        raise NotFound(f"No session {session_id}.")
    owner_id, agent = owner
    rows = sql.memory_context_rows(
        MemoryEntry,
        session_id=session_id,
        owner_id=owner_id,
        agent=agent,
        now=timezone.now(),
        limit=limit,
    )
    rows.sort(key=lambda row: (row[0], row[2]))
    facts: dict[str, tuple[str, str, Any]] = {}
    for _, scope, key, value in rows:
        # A key set in a more specific scope hides the same key further out, as
        # resolution does: the run is told only the value it would read.
        facts.setdefault(key, (scope, key, value))
    return list(facts.values())[:limit]
