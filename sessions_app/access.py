"""Who may read and act on sessions, their event logs and API tokens (the rule is
goaai.access: one's own, or the model's permission).

A session's owner may do anything with it. Anyone else needs, for another user's
session: ``sessions_app.view_session`` to read it, with
``sessions_app.view_runevent`` for its event log (the live streams, the chat page);
``sessions_app.change_session`` to rename it or change its metadata;
``sessions_app.end_session`` to end it; ``sessions_app.delete_session`` to delete it.
Another user's API tokens are listed in the admin with ``sessions_app.view_apitoken``
and revoked there with ``sessions_app.delete_apitoken``; through the API a caller
only ever sees their own.
"""

from __future__ import annotations

from typing import Any
from uuid import UUID

from django.db import DEFAULT_DB_ALIAS
from django.db.models import Q, QuerySet, UUIDField

from goaai import sql
from goaai.access import allowed, has_permission, scoped
from sessions_app.models import ApiToken, RunEvent, Session


def sessions_readable(user: Any) -> QuerySet[Session]:
    """The sessions ``user`` may read."""
    return scoped(Session.objects.all(), user, Q(owner=getattr(user, "pk", None)))


_SESSION = sql.Prepared(
    lambda: (
        Session.objects.filter(pk=sql.Slot("session", UUIDField()))
        .order_by()
        .values_list(*sql.attnames(Session))
    )
)


def session_readable(user: Any, session_id: UUID) -> Session | None:
    """The session if ``user`` may read it (as :func:`sessions_readable` finds it),
    else ``None``, as for no such session: the read of every request under
    ``/sessions/{id}/``, one statement built once (:class:`goaai.sql.Prepared`)."""
    found = _SESSION.first(session=session_id)
    if found is None:
        return None
    session = Session.from_db(DEFAULT_DB_ALIAS, sql.attnames(Session), found)
    return session if allowed(user, Session, "view", session.owner_id) else None


def can_read_session(user: Any, session_id: UUID) -> bool:
    """Whether ``user`` may read the session and its event log: the question every
    page and stream that shows a session's events asks. ``False`` as well for a
    session that does not exist, so that "not yours" and "no such session" look the
    same."""
    owner_id = Session.objects.filter(pk=session_id).values_list("owner_id", flat=True).first()
    return owner_id is not None and _reads_session(user, owner_id)


def may_read_session(user: Any, session: Session) -> bool:
    """:func:`can_read_session` for a session already read."""
    return _reads_session(user, session.owner_id)


def _reads_session(user: Any, owner_id: int) -> bool:
    return allowed(user, Session, "view", owner_id) and allowed(user, RunEvent, "view", owner_id)


def may_act_on_every(user: Any, action: str) -> bool:
    """Whether ``user`` may take ``action`` on every user's sessions (the admin's
    bulk actions)."""
    return has_permission(user, Session, action)


def may_revoke_tokens(user: Any) -> bool:
    """Whether ``user`` may revoke every user's API tokens (in the admin)."""
    return has_permission(user, ApiToken, "delete")
