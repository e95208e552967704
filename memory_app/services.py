"""Every write to memory. Each change bumps the entry's version and leaves a revision.

The full-text index follows every change by itself (SQLite's triggers, PostgreSQL's
generated column: see the migration ``0002_memory_search``); with embeddings
configured, an entry's vector is computed before its write and stored with it.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, NamedTuple
from uuid import UUID

from django.db import IntegrityError, transaction
from django.db.models import F
from django.utils import timezone

from goaai import sql
from goaai.runtime import payloads
from goaai.runtime.embeddings import EmbeddingError
from goaai.runtime.errors import InvalidMemoryScope, MemoryConflict
from goaai.runtime.memory_ranking import fact_text
from goaai.runtime.vocabulary import MemoryScope, WebhookEvent
from memory_app import vectors
from memory_app.models import MemoryEmbedding, MemoryEntry, MemoryRevision, RevisionAction
from memory_app.selectors import owner_filter
from sessions_app.eventlog import EventBatch, recording
from sessions_app.webhooks.outbox import webhook_enqueue

MAX_KEY_LENGTH = 200

logger = logging.getLogger(__name__)


@contextmanager
def _transaction(session_id: UUID | None) -> Iterator[EventBatch | None]:
    if session_id is None:
        with transaction.atomic():
            yield None
    else:
        with recording(session_id) as batch:
            yield batch


def _revision(
    entry: MemoryEntry, action: str, version: int, writer: dict[str, Any]
) -> MemoryRevision:
    """The revision that records ``action`` on ``entry`` by ``writer``, unsaved."""
    return MemoryRevision(
        entry_id=entry.pk,
        key=entry.key,
        scope=entry.scope,
        session_id=entry.session_id,
        user_id=entry.user_id,
        agent=entry.agent,
        version=version,
        value=None if action == RevisionAction.DELETED else entry.value,
        action=action,
        actor_kind=writer["kind"],
        actor_user_id=writer["user_id"],
        actor_run_id=writer["run_id"],
        actor_tool_call_id=writer["tool_call_id"],
    )


def _revise(entry: MemoryEntry, action: str, version: int, writer: dict[str, Any]) -> None:
    _revision(entry, action, version, writer).save(force_insert=True)


def _clean_key(key: str) -> str:
    cleaned = key.strip()
    if not cleaned:
        raise InvalidMemoryScope("A memory key cannot be empty.")
    if len(cleaned) > MAX_KEY_LENGTH:
        raise InvalidMemoryScope(f"A memory key is at most {MAX_KEY_LENGTH} characters.")
    return cleaned


class _Raced(MemoryConflict):
    """Another writer got in between this writer's read and its write."""


def memory_store(
    *,
    key: str,
    value: Any,
    scope: str,
    session_id: UUID | None = None,
    user_id: int | None = None,
    agent: str = "",
    expected_version: int | None = None,
    expires_at: dt.datetime | None = None,
    written_by_user_id: int | None = None,
    written_by_run_id: UUID | None = None,
    written_by_tool_call_id: UUID | None = None,
    log_session_id: UUID | None = None,
) -> MemoryEntry:
    """Create or update the entry (scope, owner, key).

    The change is an event in the log of the entry's session, or of
    ``log_session_id`` (the session of the run that made it) for an entry of
    another scope; a change made outside any session has no event.

    ``expected_version`` makes the write conditional: ``None`` writes whatever is
    there, ``0`` only creates, ``n`` only updates an entry still at version ``n``.
    A mismatch raises :class:`MemoryConflict` carrying the current entry, and
    nothing is written. An unconditional write that races another writer simply
    tries again on top of what the other wrote (last write wins, both are kept as
    revisions).

    An entry whose expiry has passed counts as absent: writing its key creates a
    new entry at version 1, in the same transaction that removes the expired one
    (its history ends with a "deleted" revision by the system, as after a purge).
    """
    key = _clean_key(key)
    where = owner_filter(scope=scope, session_id=session_id, user_id=user_id, agent=agent)
    writer = payloads.memory_writer(
        user_id=written_by_user_id, run_id=written_by_run_id, tool_call_id=written_by_tool_call_id
    )
    # Embedded before the transaction: a slow embedding model holds no lock.
    embedding = _embedding(key, value)
    raced: _Raced | None = None
    for _ in range(3 if expected_version is None else 1):
        try:
            with _transaction(session_id or log_session_id) as batch:
                entry = _unexpired(
                    MemoryEntry.objects.select_for_update().filter(where, key=key).first()
                )
                if entry is None:
                    if expected_version not in (None, 0):
                        raise MemoryConflict(
                            f"No {scope} entry {key!r} exists to update.", current=None
                        )
                    try:
                        with transaction.atomic():
                            entry = MemoryEntry.objects.create(
                                key=key,
                                value=value,
                                scope=scope,
                                session_id=session_id,
                                user_id=user_id,
                                agent=agent,
                                version=1,
                                expires_at=expires_at,
                                written_by_kind=writer["kind"],
                                written_by_user_id=writer["user_id"],
                                written_by_run_id=writer["run_id"],
                                written_by_tool_call_id=writer["tool_call_id"],
                            )
                    except IntegrityError:
                        # Another writer created it between our read and our insert.
                        current = MemoryEntry.objects.filter(where, key=key).first()
                        raise _Raced(
                            f"The {scope} entry {key!r} was created concurrently.", current=current
                        ) from None
                    action = RevisionAction.CREATED
                else:
                    if expected_version is not None and expected_version != entry.version:
                        raise MemoryConflict(
                            f"The {scope} entry {key!r} is at version {entry.version}, "
                            f"not {expected_version}.",
                            current=entry,
                        )
                    updated = MemoryEntry.objects.filter(pk=entry.pk, version=entry.version).update(
                        value=value,
                        version=F("version") + 1,
                        expires_at=expires_at,
                        written_by_kind=writer["kind"],
                        written_by_user_id=writer["user_id"],
                        written_by_run_id=writer["run_id"],
                        written_by_tool_call_id=writer["tool_call_id"],
                        updated_at=timezone.now(),
                    )
                    if not updated:
                        current = MemoryEntry.objects.filter(pk=entry.pk).first()
                        raise _Raced(
                            f"The {scope} entry {key!r} changed concurrently.", current=current
                        )
                    entry.refresh_from_db()
                    action = RevisionAction.UPDATED
                _revise(entry, action, entry.version, writer)
                if embedding is not None:
                    _keep_embedding(entry.pk, embedding)
                if batch is not None:
                    batch.add(
                        *payloads.memory_stored(
                            entry=entry.pk,
                            key=key,
                            scope=scope,
                            version=entry.version,
                            action=action,
                            written_by=writer,
                        ),
                        run_id=written_by_run_id,
                    )
                _announce(entry, action, entry.version, writer, batch)
        except _Raced as lost:
            # Only an unconditional write gets here twice: it tries again on
            # top of what the other writer wrote (both are kept as revisions).
            raced = lost
            continue
        return entry
    raise MemoryConflict(
        str(raced) if raced else f"The {scope} entry {key!r} kept changing concurrently.",
        current=raced.current if raced else None,
    )


class _Embedding(NamedTuple):
    model: str
    vector: list[float] | None


def _embedding(key: str, value: Any) -> _Embedding | None:
    """The embedding of an entry about to be written, when embeddings are configured
    (``vector`` is ``None`` when the model failed: the entry is written all the
    same, found by its words until it is written again)."""
    embedder = vectors.embedder()
    if embedder is None:
        return None
    try:
        (vector,) = embedder.embed([fact_text(key, value)])
    except EmbeddingError:
        logger.warning("Memory entry %r stored without its embedding", key, exc_info=True)
        return _Embedding(embedder.name, None)
    return _Embedding(embedder.name, vector)


def _keep_embedding(entry_id: UUID, embedding: _Embedding) -> None:
    """Store the entry's new vector, or drop its old one when there is none: a
    vector of the previous value would rank it for what it no longer says."""
    if embedding.vector is None:
        sql.memory_embedding_delete(MemoryEmbedding, entry_id=entry_id)
    else:
        sql.memory_embedding_store(
            MemoryEmbedding, entry_id=entry_id, model=embedding.model, vector=embedding.vector
        )


def memory_delete(
    *,
    key: str,
    scope: str,
    session_id: UUID | None = None,
    user_id: int | None = None,
    agent: str = "",
    expected_version: int | None = None,
    written_by_user_id: int | None = None,
    written_by_run_id: UUID | None = None,
    written_by_tool_call_id: UUID | None = None,
    log_session_id: UUID | None = None,
) -> bool:
    """Delete the entry (scope, owner, key); ``False`` if there is none. The deletion
    is kept as the entry's last revision (the event goes where
    :func:`memory_store` puts it). An expired entry is no entry: it is removed as
    the purge removes it, and the answer is ``False``."""
    key = _clean_key(key)
    where = owner_filter(scope=scope, session_id=session_id, user_id=user_id, agent=agent)
    writer = payloads.memory_writer(
        user_id=written_by_user_id, run_id=written_by_run_id, tool_call_id=written_by_tool_call_id
    )
    with _transaction(session_id or log_session_id) as batch:
        entry = _unexpired(MemoryEntry.objects.select_for_update().filter(where, key=key).first())
        if entry is None:
            return False
        if expected_version is not None and expected_version != entry.version:
            raise MemoryConflict(
                f"The {scope} entry {key!r} is at version {entry.version}, not {expected_version}.",
                current=entry,
            )
        entry_id = entry.pk
        _revise(entry, RevisionAction.DELETED, entry.version + 1, writer)
        _announce(entry, RevisionAction.DELETED, entry.version + 1, writer, batch)
        entry.delete()
        if batch is not None:
            batch.add(
                *payloads.memory_deleted(entry=entry_id, key=key, scope=scope),
                run_id=written_by_run_id,
            )
    return True


def _announce(
    entry: MemoryEntry,
    action: str,
    version: int,
    writer: dict[str, Any],
    batch: EventBatch | None,
) -> None:
    """Queue the ``memory.changed`` webhook message of a write, in its transaction.

    It goes to the endpoints of the user the entry belongs to: the session's owner,
    or the user of a user entry. Agent and global entries belong to no one: their
    changes go to the user whose run (the session's owner) or request wrote them.
    Expired entries removed by the purge are not announced.
    """
    if entry.scope == MemoryScope.USER:
        owner_id = entry.user_id
    elif batch is not None:
        owner_id = batch.session_owner_id
    else:
        owner_id = writer["user_id"]
    if owner_id is None:
        return
    deleted = action == RevisionAction.DELETED
    webhook_enqueue(
        owner_id=owner_id,
        type=WebhookEvent.MEMORY_CHANGED,
        at=timezone.now(),
        data={
            "entry": str(entry.pk),
            "key": entry.key,
            "scope": entry.scope,
            "session": str(entry.session_id) if entry.session_id else None,
            "user": entry.user_id,
            "agent": entry.agent,
            "action": action,
            "version": version,
            "value": None if deleted else entry.value,
            "written_by": {k: str(v) if isinstance(v, UUID) else v for k, v in writer.items()},
        },
    )


def _purge(expired: list[MemoryEntry]) -> None:
    """Remove entries whose expiry has passed, each leaving a "deleted" revision by
    the system in its history (the caller holds their rows locked)."""
    writer = payloads.memory_writer(user_id=None, run_id=None, tool_call_id=None)
    MemoryRevision.objects.bulk_create(
        _revision(entry, RevisionAction.DELETED, entry.version + 1, writer) for entry in expired
    )
    MemoryEntry.objects.filter(pk__in=[entry.pk for entry in expired]).delete()


def _unexpired(entry: MemoryEntry | None) -> MemoryEntry | None:
    """The locked entry a write found, or ``None`` if its expiry has passed: an
    expired entry is gone for every reader, so a write treats it as absent, and
    removes it first as the purge would (the write's own key then takes its place)."""
    if entry is None or entry.expires_at is None or entry.expires_at > timezone.now():
        return entry
    _purge([entry])
    return None


def memory_purge_expired(*, now: dt.datetime | None = None, batch_size: int = 1000) -> int:
    """Delete entries whose expiry has passed, each leaving a "deleted" revision by
    the system in its history; returns how many were purged."""
    cutoff = now or timezone.now()
    purged = 0
    while True:
        with transaction.atomic():
            expired = list(
                MemoryEntry.objects.select_for_update().filter(expires_at__lte=cutoff)[:batch_size]
            )
            if not expired:
                return purged
            _purge(expired)
            purged += len(expired)
