"""Reads of memory: exact lookups, and the scope resolution runs use."""

from __future__ import annotations

from uuid import UUID

from django.db.models import Case, IntegerField, Q, QuerySet, Value, When
from django.utils import timezone

from goaai.runtime.errors import InvalidMemoryScope, NotFound
from goaai.runtime.vocabulary import MEMORY_RESOLUTION_ORDER, MemoryScope
from memory_app.models import MemoryEntry
from sessions_app.models import Session


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


def _live() -> Q:
    return Q(expires_at__isnull=True) | Q(expires_at__gt=timezone.now())


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
    return MemoryEntry.objects.filter(where, _live(), key=key).first()


_SCOPE_RANK = Case(
    *(When(scope=scope, then=Value(rank)) for rank, scope in enumerate(MEMORY_RESOLUTION_ORDER)),
    output_field=IntegerField(),
)


def memory_resolve(*, key: str, session_id: UUID) -> MemoryEntry | None:
    """The entry a run in the session reads for ``key``: the session's own, else its
    user's, else its agent's, else the global one. Expired entries are skipped."""
    owner = Session.objects.filter(pk=session_id).values_list("owner_id", "agent").first()
    if owner is None:
        raise NotFound(f"No session {session_id}.")
    owner_id, agent = owner
    candidates = (
        Q(scope=MemoryScope.SESSION, session_id=session_id)
        | Q(scope=MemoryScope.USER, user_id=owner_id)
        | Q(scope=MemoryScope.AGENT, agent=agent)
        | Q(scope=MemoryScope.GLOBAL)
    )
    return (
        MemoryEntry.objects.filter(candidates, _live(), key=key)
        .annotate(scope_rank=_SCOPE_RANK)
        .order_by("scope_rank")
        .first()
    )


def memory_visible_to_session(*, session_id: UUID) -> QuerySet[MemoryEntry]:
    """Every live entry a run in the session could read, most specific scope first."""
    owner_id, agent = Session.objects.filter(pk=session_id).values_list("owner_id", "agent").get()
    return (
        MemoryEntry.objects.filter(
            Q(scope=MemoryScope.SESSION, session_id=session_id)
            | Q(scope=MemoryScope.USER, user_id=owner_id)
            | Q(scope=MemoryScope.AGENT, agent=agent)
            | Q(scope=MemoryScope.GLOBAL),
            _live(),
        )
        .annotate(scope_rank=_SCOPE_RANK)
        .order_by("key", "scope_rank")
    )
