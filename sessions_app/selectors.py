"""Reads of sessions."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any
from uuid import UUID

from django.contrib.auth import get_user_model
from django.db import DEFAULT_DB_ALIAS
from django.db.models import (
    BigIntegerField,
    CharField,
    DecimalField,
    F,
    Field,
    Model,
    OuterRef,
    QuerySet,
    Subquery,
    Sum,
    UUIDField,
    Value,
)
from django.db.models.functions import Coalesce
from django.db.models.lookups import In
from django.utils import timezone

from goaai import sql
from goaai.runtime.errors import NotFound
from goaai.runtime.types import USAGE_KINDS
from sessions_app.models import ApiToken, Session, UserPreferences

# What a session's runs add up to: each token kind, the total, the cost and the
# turns without a price (the fields of a run with these names).
RUN_TOTALS = (*USAGE_KINDS, "total_tokens", "cost", "unpriced_turns")

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
    return remember_owner_and_agent(session_id, row[0], row[1])


def remember_owner_and_agent(session_id: UUID, owner_id: int, agent: str) -> tuple[int, str]:
    """Keep what a statement of the caller's read of a session for
    :func:`session_owner_and_agent` (a step that locked the session has them)."""
    if len(_OWNERS) >= _OWNERS_LIMIT:
        _OWNERS.clear()
    known = _OWNERS[session_id] = (owner_id, agent)
    return known


def session_get(*, session_id: UUID) -> Session:
    try:
        return Session.objects.get(pk=session_id)
    except Session.DoesNotExist:
        raise NotFound(f"No session {session_id}.") from None


def _live_token_read() -> QuerySet[ApiToken]:
    token, user = sql.attnames(ApiToken), sql.attnames(get_user_model())
    return (
        ApiToken.objects.filter(
            digest=sql.Slot("digest", CharField()), revoked_at__isnull=True, user__is_active=True
        )
        .order_by()
        .values_list(*token, *(f"user__{name}" for name in user))
    )


_LIVE_TOKEN = sql.Prepared(_live_token_read)


def api_token_active(*, digest: str) -> ApiToken | None:
    """The live (not revoked, not expired) token with this digest, with its user.
    Every API request asks: the digest is unique, the token and its user are read
    in one statement built once (:class:`goaai.sql.Prepared`), and the expiry is
    checked on the row read."""
    found = _LIVE_TOKEN.first(digest=digest)
    if found is None:
        return None
    user_model = get_user_model()
    cut = len(sql.attnames(ApiToken))
    token = ApiToken.from_db(DEFAULT_DB_ALIAS, sql.attnames(ApiToken), found[:cut])
    token.user = user_model.from_db(DEFAULT_DB_ALIAS, sql.attnames(user_model), found[cut:])
    if token.expires_at is not None and token.expires_at <= timezone.now():
        return None
    return token


_SESSION_WITH_OWNER = sql.Prepared(
    lambda: (
        Session.objects.filter(pk=sql.Slot("session", UUIDField()))
        .order_by()
        .values_list(*sql.attnames(Session), f"owner__{get_user_model().USERNAME_FIELD}")
    )
)


def session_with_owner(*, session_id: UUID) -> Session | None:
    """The session with its owner's id and name (``session.owner``), or ``None`` if
    there is none: one statement built once (:class:`goaai.sql.Prepared`)."""
    found = _SESSION_WITH_OWNER.first(session=session_id)
    if found is None:
        return None
    columns = sql.attnames(Session)
    session = Session.from_db(DEFAULT_DB_ALIAS, columns, found[: len(columns)])
    session.owner = sql.user_named(session.owner_id, found[len(columns)])
    return session


def _total_field(name: str) -> Field[Any, Any]:
    if name == "cost":
        return DecimalField(max_digits=20, decimal_places=10)
    return BigIntegerField()


def _sum_of_runs(name: str) -> Coalesce:
    """The sum of ``name`` over the outer session's runs, as a correlated subquery
    (0 for a session without runs)."""
    output = _total_field(name)
    sums = (
        Session.objects.filter(pk=OuterRef("pk"))
        .order_by()
        .values("pk")
        .annotate(total=Sum(f"runs__{name}"))
        .values("total")
    )
    return Coalesce(Subquery(sums, output_field=output), Value(0), output_field=output)


def sessions_with_usage(
    sessions: QuerySet[Session], fields: tuple[str, ...] = RUN_TOTALS
) -> QuerySet[Session]:
    """``sessions`` with what their runs (child runs included) add up to, as
    ``runs_<field>`` for each of ``fields`` (:data:`RUN_TOTALS` by default). Each is
    a correlated subquery: the database computes it for the rows a page shows,
    where a join with GROUP BY would add up every run of every session the filter
    lets through first."""
    return sessions.annotate(**{f"runs_{name}": _sum_of_runs(name) for name in fields})


def session_run_totals(session: Session, fields: tuple[str, ...] = RUN_TOTALS) -> dict[str, Any]:
    """What a session's runs add up to, for each of ``fields``: read from the
    annotations of :func:`sessions_with_usage` or :func:`sessions_add_run_totals`,
    else in one query."""
    if not all(hasattr(session, f"runs_{name}") for name in fields):
        sessions_add_run_totals([session], fields)
    return {name: getattr(session, f"runs_{name}") for name in fields}


def _runs() -> QuerySet[Any]:
    """Every run, from the runs' side of their link to a session (the runs' app is
    above this one): sums grouped on the runs alone need no join with the sessions."""
    model = Session._meta.get_field("runs").related_model
    if not (isinstance(model, type) and issubclass(model, Model)):
        raise TypeError("Session.runs leads to no model.")
    return model._default_manager.all()


# How many session ids the statement that adds up their runs takes: one session,
# a page of the API's default size, a page of its largest. A shorter list repeats
# its last id; a longer one goes in several statements.
_TOTALS_SLOTS = (1, 50, 200)


@functools.cache
def _run_totals_read(slots: int, fields: tuple[str, ...]) -> sql.Prepared:
    """The statement that adds up ``fields`` over the runs of ``slots`` sessions,
    grouped by session, built once (:class:`goaai.sql.Prepared`)."""
    return sql.Prepared(
        lambda: (
            _runs()
            .filter(In(F("session_id"), [sql.Slot(f"s{i}", UUIDField()) for i in range(slots)]))
            .order_by()
            .values_list("session_id")
            .annotate(**{name: Sum(name) for name in fields})
        )
    )


def sessions_add_run_totals(
    sessions: Sequence[Session], fields: tuple[str, ...] = RUN_TOTALS
) -> None:
    """Give each of ``sessions`` (a page of them, already read) what its runs add
    up to, as ``runs_<field>``, grouped in one statement built once: the figures of
    :func:`sessions_with_usage`, without building its subqueries each time."""
    ids = [session.pk for session in sessions]
    found: dict[UUID, tuple[Any, ...]] = {}
    while ids:
        slots = next((n for n in _TOTALS_SLOTS if n >= len(ids)), _TOTALS_SLOTS[-1])
        chunk, ids = ids[:slots], ids[slots:]
        values = {f"s{i}": chunk[min(i, len(chunk) - 1)] for i in range(slots)}
        for row in _run_totals_read(slots, fields).rows(**values):
            found[row[0]] = row[1:]
    for session in sessions:
        sums = found.get(session.pk)
        for position, name in enumerate(fields):
            total = sums[position] if sums is not None else None
            setattr(session, f"runs_{name}", 0 if total is None else total)


def user_preferences(user: Any) -> UserPreferences:
    """What ``user`` chose on their settings page: their saved preferences, or the
    defaults (unsaved) when they never saved any. Read once per request: the answer
    is kept on the user object, which a request shares with its middleware, views
    and templates."""
    cached: UserPreferences | None = getattr(user, "_goaai_preferences", None)
    if cached is not None:
        return cached
    found = None
    if getattr(user, "is_authenticated", False):
        found = UserPreferences.objects.filter(user_id=user.pk).first()
    preferences = found or UserPreferences(user_id=user.pk)
    user._goaai_preferences = preferences
    return preferences
