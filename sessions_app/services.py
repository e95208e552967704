"""Every write to sessions."""

from __future__ import annotations

from typing import Any
from uuid import UUID

from django.contrib.auth import get_user_model
from django.db import transaction
from django.utils import timezone

from goaai.runtime.errors import NotFound
from goaai.runtime.vocabulary import EventType
from runs_app.events import recording
from runs_app.services import runs_cancel_in_session
from sessions_app.models import Session, SessionStatus

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
    deleted, _ = Session.objects.filter(pk=session_id).delete()
    if not deleted:
        raise NotFound(f"No session {session_id}.")
