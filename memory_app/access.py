"""Who may read and change memory (the rule is goaai.access: one's own, or the
model's permission).

Session memory belongs to the session's owner, user memory to its user; agent and
global memory belong to nobody: every user reads it (every run does), and changing
it always takes the permission. Reading another user's entries takes
``memory_app.view_memoryentry`` (their history ``memory_app.view_memoryrevision``);
creating, changing and deleting another user's or shared entries take
``memory_app.add_memoryentry``, ``memory_app.change_memoryentry`` and
``memory_app.delete_memoryentry``.
"""

from __future__ import annotations

from typing import Any

from django.db.models import Q, QuerySet

from goaai.access import allowed, scoped
from goaai.runtime.vocabulary import MemoryScope
from memory_app.models import MemoryEntry, MemoryRevision
from sessions_app.selectors import session_owner_and_agent

SHARED_SCOPES = (MemoryScope.AGENT, MemoryScope.GLOBAL)


def own_memory(user: Any) -> Q:
    """The entries (or revisions) a user reads as their own: their sessions' and
    their own, and the shared ones every run reads."""
    pk = getattr(user, "pk", None)
    return (
        Q(scope=MemoryScope.SESSION, session__owner=pk)
        | Q(scope=MemoryScope.USER, user=pk)
        | Q(scope__in=SHARED_SCOPES)
    )


def revisions_readable(user: Any) -> QuerySet[MemoryRevision]:
    """The memory revisions ``user`` may read."""
    return scoped(MemoryRevision.objects.all(), user, own_memory(user))


def owner_id_of(entry: MemoryEntry) -> int | None:
    """The user an entry belongs to; ``None`` for agent and global memory."""
    if entry.scope == MemoryScope.SESSION and entry.session_id is not None:
        known = session_owner_and_agent(entry.session_id)
        return known[0] if known is not None else None
    if entry.scope == MemoryScope.USER:
        return entry.user_id
    return None


def may_create(user: Any, owner_id: int | None) -> bool:
    """Whether ``user`` may create an entry belonging to ``owner_id`` (``None``:
    agent or global memory)."""
    return allowed(user, MemoryEntry, "add", owner_id)
