"""Reads of sessions."""

from __future__ import annotations

from uuid import UUID

from django.db.models import Q
from django.utils import timezone

from goaai.runtime.errors import NotFound
from sessions_app.models import ApiToken, Session

_OWNERS: dict[UUID, tuple[int, str]] = {}
_OWNERS_LIMIT = 8192


def session_owner_and_agent(session_id: UUID) -> tuple[int, str] | None:
    """A session's owner and agent, or ``None`` if there is no such session.

    Both are fixed when the session is created and never change, so each process
    remembers them for sessions it has seen (starting a run then skips a query).
    A miss is never remembered: the session may be created a moment later. Callers
    that must not act on a deleted session check for it themselves.
    """
    known = _OWNERS.get(session_id)
    if known is not None:
        return known
    row = Session.objects.filter(pk=session_id).values_list("owner_id", "agent").first()
    if row is None:
        return None
    if len(_OWNERS) >= _OWNERS_LIMIT:
        _OWNERS.clear()
    _OWNERS[session_id] = (row[0], row[1])
    return _OWNERS[session_id]


def session_get(*, session_id: UUID) -> Session:
    try:
        return Session.objects.get(pk=session_id)
    except Session.DoesNotExist:
        raise NotFound(f"No session {session_id}.") from None


def api_token_active(*, digest: str) -> ApiToken | None:
    """The live (not revoked, not expired) token with this digest, with its user."""
    return (
        ApiToken.objects.select_related("user")
        .filter(Q(expires_at__isnull=True) | Q(expires_at__gt=timezone.now()), digest=digest)
        .filter(revoked_at__isnull=True, user__is_active=True)
        .first()
    )
