"""Reads of memory: exact lookups, the scope resolution runs use, and the ranked
search that chooses what a run is told."""

from __future__ import annotations

import logging
from uuid import UUID

from django.db.models import Q
from django.utils import timezone

from goaai import sql
from goaai.runtime.embeddings import Embedder, EmbeddingError
from goaai.runtime.errors import InvalidMemoryScope, NotFound
from goaai.runtime.memory_ranking import (
    Fact,
    candidate_limit,
    choose_facts,
    fuse,
    search_terms,
)
from goaai.runtime.types import MemoryRecord
from goaai.runtime.vocabulary import MemoryScope
from memory_app import vectors
from memory_app.models import MemoryEmbedding, MemoryEntry
from sessions_app.models import Session
from sessions_app.selectors import session_owner_and_agent

logger = logging.getLogger(__name__)


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
    """:func:`memory_resolve_record` as a model instance (for the API and admin),
    read in the same one statement."""
    entry: MemoryEntry | None = sql.memory_resolve_entry(
        MemoryEntry, Session, key=key, session_id=session_id
    )
    if entry is None and not Session.objects.filter(pk=session_id).exists():
        raise NotFound(f"No session {session_id}.")
    return entry


def _owner(session_id: UUID) -> tuple[int, str]:
    owner = session_owner_and_agent(session_id)
    if owner is None:
        raise NotFound(f"No session {session_id}.")
    return owner


def _query_vector(embedder: Embedder | None, query: str) -> list[float] | None:
    """The message's embedding, or ``None`` (no embedder, or it failed: the ranking
    is then by full text alone, and the failure is logged)."""
    if embedder is None or not query.strip():
        return None
    try:
        return embedder.embed([query])[0]
    except EmbeddingError:
        logger.warning("Memory ranked by full text only: embedding the query failed", exc_info=True)
        return None


def _ranked(
    *,
    session_id: UUID | None,
    owner_id: int,
    agent: str,
    query: str,
    limit: int,
    recent: int,
) -> tuple[list[Fact], list[Fact]]:
    """The facts relevant to ``query`` of the session (or, with no session, of the
    user ``owner_id`` and of ``agent``), best first (full-text and vector rankings
    fused), and the ``recent`` most recently updated ones."""
    embedder = vectors.embedder()
    vector = _query_vector(embedder, query)
    found = sql.memory_ranked_rows(
        MemoryEntry,
        MemoryEmbedding,
        session_id=session_id,
        owner_id=owner_id,
        agent=agent,
        terms=search_terms(query),
        limit=limit,
        recent=recent,
        vector=vector,
        embedder=embedder.name if embedder is not None else "",
    )
    if not found.similar:
        return found.matching, found.recent
    facts = {fact[1]: fact for fact in (*found.matching, *found.similar)}
    order = fuse([[f[1] for f in found.matching], [f[1] for f in found.similar]])
    return [facts[key] for key in order], found.recent


def memory_context(*, session_id: UUID, query: str, budget: int) -> tuple[Fact, ...]:
    """The facts a run in the session starts with, for its message ``query``, as
    (scope, key, value), within ``budget`` tokens
    (:func:`goaai.runtime.memory_ranking.choose_facts`): first those relevant to the
    message (its words, ranked by the database's full-text search, and with
    embeddings configured its meaning, the two rankings fused), then the most
    recently updated. Only live facts the session reads, a more specific scope hiding
    the same key further out, as resolution does.

    Two statements, whatever the size of the memory (one when the process knows the
    session's owner), and with embeddings one call to the embedding model."""
    if budget <= 0:
        return ()
    limit = candidate_limit(budget)
    owner_id, agent = _owner(session_id)
    relevant, recent = _ranked(
        session_id=session_id,
        owner_id=owner_id,
        agent=agent,
        query=query,
        limit=limit,
        recent=limit,
    )
    return choose_facts(relevant, recent, budget)


def memory_context_asks_a_model() -> bool:
    """Whether :func:`memory_context` calls an embedding model (which no open
    transaction should wait for), or is statements alone."""
    return vectors.embedder() is not None


def memory_search(*, session_id: UUID, query: str, limit: int = 5) -> list[Fact]:
    """At most ``limit`` facts the session reads that match ``query``, best first,
    as (scope, key, value): ranked as :func:`memory_context` ranks relevant ones."""
    owner_id, agent = _owner(session_id)
    relevant, _ = _ranked(
        session_id=session_id, owner_id=owner_id, agent=agent, query=query, limit=limit, recent=0
    )
    return relevant[:limit]


def memory_search_user(*, user_id: int, query: str, limit: int = 5) -> list[Fact]:
    """At most ``limit`` facts outside any session that match ``query``, best first,
    as (scope, key, value): the user's own and the global ones (a user entry hiding
    the global one of the same key), ranked as :func:`memory_search` ranks them."""
    relevant, _ = _ranked(
        session_id=None, owner_id=user_id, agent="", query=query, limit=limit, recent=0
    )
    return relevant[:limit]


def memory_resolve_user(*, key: str, user_id: int, agent: str = "") -> MemoryEntry | None:
    """The entry read for ``key`` outside any session: the user's own, else
    ``agent``'s (when one is named), else the global one. Expired entries are
    skipped. One indexed query for the (at most three) candidates."""
    where = Q(scope=MemoryScope.USER, user_id=user_id) | Q(scope=MemoryScope.GLOBAL)
    if agent:
        where |= Q(scope=MemoryScope.AGENT, agent=agent)
    found = {
        entry.scope: entry for entry in MemoryEntry.objects.filter(where, unexpired(), key=key)
    }
    for scope in (MemoryScope.USER, MemoryScope.AGENT, MemoryScope.GLOBAL):
        if scope in found:
            return found[scope]
    return None
