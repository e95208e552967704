"""Reads of sessions."""

from __future__ import annotations

import functools
from uuid import UUID

from goaai.runtime.errors import NotFound
from sessions_app.models import Session


@functools.lru_cache(maxsize=8192)
def session_owner_and_agent(session_id: UUID) -> tuple[int, str] | None:
    """A session's owner and agent, or ``None`` if there is no such session.

    Both are fixed when the session is created and never change, which makes
    caching them in each process safe; the hot paths that need them (memory
    resolution, starting a run) then skip a query.
    """
    row = Session.objects.filter(pk=session_id).values_list("owner_id", "agent").first()
    return (row[0], row[1]) if row else None


def session_get(*, session_id: UUID) -> Session:
    try:
        return Session.objects.get(pk=session_id)
    except Session.DoesNotExist:
        raise NotFound(f"No session {session_id}.") from None
