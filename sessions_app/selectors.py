"""Reads of sessions."""

from __future__ import annotations

from uuid import UUID

from goaai.runtime.errors import NotFound
from sessions_app.models import Session


def session_get(*, session_id: UUID) -> Session:
    try:
        return Session.objects.get(pk=session_id)
    except Session.DoesNotExist:
        raise NotFound(f"No session {session_id}.") from None
