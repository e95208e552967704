"""Every write to sessions."""

from __future__ import annotations

import datetime as dt
import hashlib
import secrets
from typing import Any
from uuid import UUID

from django.contrib.auth import get_user_model
from django.db import transaction
from django.db.models import QuerySet
from django.utils import timezone

from goaai.runtime.errors import NotFound
from goaai.runtime.vocabulary import EventType
from runs_app.events import publish_to, publish_user_change, recording, token_group
from runs_app.services import runs_cancel_in_session
from sessions_app.models import ApiToken, Session, SessionStatus

MAX_TITLE_LENGTH = 200


def session_create(
    *, owner_id: int, agent: str, title: str = "", metadata: dict[str, Any] | None = None
) -> Session:
    """Start a conversation of a user with an agent."""
    if not get_user_model().objects.filter(pk=owner_id).exists():
        raise NotFound(f"No user {owner_id}.")
    with transaction.atomic():
        session = Session.objects.create(
            owner_id=owner_id,
            agent=agent,
            title=title[:MAX_TITLE_LENGTH],
            metadata=dict(metadata or {}),
        )
        with recording(session.id) as batch:
            batch.add(
                EventType.SESSION_CREATED,
                {"agent": agent, "title": session.title, "metadata": session.metadata},
            )
    return session


def session_update(
    *, session_id: UUID, title: str | None = None, metadata: dict[str, Any] | None = None
) -> Session:
    """Rename a session or replace its metadata."""
    with recording(session_id) as batch:
        changes: dict[str, Any] = {}
        if title is not None:
            changes["title"] = title[:MAX_TITLE_LENGTH]
        if metadata is not None:
            changes["metadata"] = dict(metadata)
        if changes:
            Session.objects.filter(pk=session_id).update(updated_at=timezone.now(), **changes)
            batch.add(EventType.SESSION_UPDATED, changes)
    return Session.objects.get(pk=session_id)


def session_end(*, session_id: UUID, reason: str = "session_ended") -> Session:
    """End a session: runs in flight are canceled and later runs are refused.

    Ending an ended session changes nothing.
    """
    with recording(session_id) as batch:
        if batch.session_status == SessionStatus.ENDED:
            return Session.objects.get(pk=session_id)
        now = timezone.now()
        Session.objects.filter(pk=session_id).update(
            status=SessionStatus.ENDED, ended_at=now, updated_at=now
        )
        batch.session_status = SessionStatus.ENDED
        canceled = runs_cancel_in_session(batch=batch, reason=reason)
        batch.add(EventType.SESSION_ENDED, {"ended_at": now.isoformat(), "runs_canceled": canceled})
    return Session.objects.get(pk=session_id)


def session_delete(*, session_id: UUID) -> None:
    """Delete a session with its runs, turns, tool calls, events and session memory."""
    with transaction.atomic():
        owner_id = Session.objects.filter(pk=session_id).values_list("owner_id", flat=True).first()
        deleted, _ = Session.objects.filter(pk=session_id).delete()
        if not deleted or owner_id is None:
            raise NotFound(f"No session {session_id}.")
        # The log went with the session: the owner's session list hears it directly.
        change: dict[str, Any] = {
            "seq": None,
            "type": "session.deleted",
            "run": None,
            "data": {},
            "created_at": timezone.now().isoformat(),
            "session": str(session_id),
        }
        transaction.on_commit(lambda: publish_user_change(owner_id, change))


# API tokens

TOKEN_PREFIX = "goa_"  # noqa: S105 (a marker that makes leaked tokens easy to spot)


def token_digest(raw: str) -> str:
    """The stored form of a token."""
    return hashlib.sha256(raw.encode()).hexdigest()


def api_token_create(
    *, user_id: int, name: str, expires_at: dt.datetime | None = None
) -> tuple[ApiToken, str]:
    """Create a token for a user; returns it with the token itself, which is not
    stored and cannot be shown again."""
    raw = TOKEN_PREFIX + secrets.token_urlsafe(32)
    token = ApiToken.objects.create(
        user_id=user_id,
        name=name.strip()[:100],
        prefix=raw[:12],
        digest=token_digest(raw),
        expires_at=expires_at,
    )
    return token, raw


def api_token_revoke(*, token_id: UUID) -> ApiToken:
    """Revoke a token: it stops working at once. The row stays, for audit."""
    now = timezone.now()
    with transaction.atomic():
        revoked = ApiToken.objects.filter(pk=token_id, revoked_at__isnull=True).update(
            revoked_at=now
        )
        if revoked:
            # Streams the token opened close at once, not only new requests.
            group = token_group(token_id)
            transaction.on_commit(lambda: publish_to(group, {"type": "token.revoked"}))
    try:
        return ApiToken.objects.get(pk=token_id)
    except ApiToken.DoesNotExist:
        raise NotFound(f"No token {token_id}.") from None


def api_token_touch(*, token: ApiToken, now: dt.datetime) -> None:
    """Note that a token was used, at most once a minute (a write per request would
    make every API read a write)."""
    if token.last_used_at is None or now - token.last_used_at > dt.timedelta(minutes=1):
        ApiToken.objects.filter(pk=token.pk).update(last_used_at=now)
        token.last_used_at = now


# Retention

# Kept with the code that needs it rather than in the imports at the top.

PURGE_COUNT_KINDS = (
    "sessions",
    "runs",
    "turns",
    "tool_calls",
    "events",
    "memory_entries",
    "memory_revisions",
    "expired_memory_entries",
)


def _purge_targets(
    session_ids: list[UUID] | QuerySet[Session, Any],
) -> list[tuple[str, QuerySet[Any, Any]]]:
    """What goes with the sessions ``session_ids`` names, as (kind, rows) in the order
    they are deleted; a kind may appear twice (its rows reached two ways).

    Each queryset is one set-based statement: the sessions' rows are never loaded
    into Python, unlike ``Session.delete()``, whose collector fetches every row
    below a session to cascade it.
    """
    from memory_app.models import MemoryEntry, MemoryRevision
    from runs_app.models import Run, RunEvent, ToolCall, Turn

    runs = Run.objects.filter(session_id__in=session_ids).values("id")
    return [
        ("events", RunEvent.objects.filter(session_id__in=session_ids)),
        # Events and tool calls point at their run as well as their session, and the
        # run cascades. Runs record into their own session, so this finds nothing in
        # practice; it keeps the purge as exact as the models' CASCADE if one did not.
        ("events", RunEvent.objects.filter(run_id__in=runs).exclude(session_id__in=session_ids)),
        ("memory_revisions", MemoryRevision.objects.filter(session_id__in=session_ids)),
        ("memory_entries", MemoryEntry.objects.filter(session_id__in=session_ids)),
        ("tool_calls", ToolCall.objects.filter(session_id__in=session_ids)),
        (
            "tool_calls",
            ToolCall.objects.filter(run_id__in=runs).exclude(session_id__in=session_ids),
        ),
        ("turns", Turn.objects.filter(run_id__in=runs)),
        ("runs", Run.objects.filter(session_id__in=session_ids)),
        ("sessions", Session.objects.filter(pk__in=session_ids)),
    ]


def _detach_from_purged(session_ids: list[UUID]) -> None:
    """Null what rows outside the purged sessions say about the runs and tool calls
    being deleted (``SET_NULL`` in the models): a child run started from another
    session, memory of a user or an agent that one of these runs wrote, and the
    revisions of that memory. The rows themselves stay."""
    from memory_app.models import MemoryEntry, MemoryRevision
    from runs_app.models import Run, ToolCall

    runs = Run.objects.filter(session_id__in=session_ids).values("id")
    calls = ToolCall.objects.filter(session_id__in=session_ids).values("id")
    others = Run.objects.exclude(session_id__in=session_ids)
    others.filter(parent_run_id__in=runs).update(parent_run=None)
    others.filter(parent_tool_call_id__in=calls).update(parent_tool_call=None)
    entries = MemoryEntry.objects.exclude(session_id__in=session_ids)
    entries.filter(written_by_run_id__in=runs).update(written_by_run=None)
    entries.filter(written_by_tool_call_id__in=calls).update(written_by_tool_call=None)
    revisions = MemoryRevision.objects.exclude(session_id__in=session_ids)
    revisions.filter(actor_run_id__in=runs).update(actor_run=None)
    revisions.filter(actor_tool_call_id__in=calls).update(actor_tool_call=None)


def sessions_purge(
    *,
    older_than: dt.timedelta,
    batch_size: int = 500,
    dry_run: bool = False,
    now: dt.datetime | None = None,
) -> dict[str, int]:
    """Delete ended sessions whose ``ended_at`` is more than ``older_than`` ago, with
    everything recorded under them: runs, turns, tool calls, events, and the
    session's memory with its revisions. Active sessions and sessions that ended
    more recently are never touched. Expired memory entries of every scope are
    purged too (:func:`memory_app.services.memory_purge_expired`), after the sessions.

    Sessions go ``batch_size`` at a time, one transaction per batch that locks the
    batch's session rows, so a purge of millions of rows holds no lock for long and
    what it finished stays finished if it is interrupted. Rows elsewhere that refer
    to a deleted run or tool call (a child run in another session, user memory a
    run wrote, its revisions) are kept with the reference nulled, as the models'
    ``SET_NULL`` says. No live event is sent: these conversations ended long ago.

    With ``dry_run`` nothing is deleted and the counts are what would go. Returns
    the number of rows per kind (:data:`PURGE_COUNT_KINDS`).
    """
    from memory_app.models import MemoryEntry
    from memory_app.services import memory_purge_expired

    if older_than < dt.timedelta(0):
        raise ValueError("older_than cannot be negative.")
    if batch_size < 1:
        raise ValueError("batch_size must be at least 1.")
    moment = now or timezone.now()
    ended_long_ago = Session.objects.filter(
        status=SessionStatus.ENDED, ended_at__lt=moment - older_than
    )
    counts = dict.fromkeys(PURGE_COUNT_KINDS, 0)

    if dry_run:
        purgeable = ended_long_ago.values("id")
        for kind, rows in _purge_targets(purgeable):
            counts[kind] += rows.count()
        counts["expired_memory_entries"] = (
            MemoryEntry.objects.filter(expires_at__lte=moment)
            .exclude(session_id__in=purgeable)
            .count()
        )
        return counts

    while True:
        with transaction.atomic():
            batch = list(
                ended_long_ago.select_for_update()
                .order_by("ended_at", "id")
                .values_list("id", flat=True)[:batch_size]
            )
            if not batch:
                break
            _detach_from_purged(batch)
            for kind, rows in _purge_targets(batch):
                counts[kind] += rows._raw_delete(rows.db)
    counts["expired_memory_entries"] = memory_purge_expired(now=moment)
    return counts
