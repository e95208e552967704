"""Reads of memory: exact lookups, and the scope resolution runs use."""

from __future__ import annotations

import datetime as dt
import functools
import json
import time
from typing import Any
from uuid import UUID, SafeUUID

from django.db import connection
from django.db.models import Case, IntegerField, Q, QuerySet, Value, When
from django.utils import timezone

from goaai.runtime.errors import InvalidMemoryScope, NotFound
from goaai.runtime.types import MemoryRecord
from goaai.runtime.vocabulary import MEMORY_RESOLUTION_ORDER, MemoryScope
from memory_app.models import MemoryEntry
from runs_app import lean
from sessions_app.models import Session
from sessions_app.selectors import session_owner_and_agent


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


# The columns a resolved read returns, in MemoryRecord's terms.
_RESOLVE_COLUMNS = (
    "id, key, value, scope, session_id, user_id, agent, version, updated_at, expires_at"
)
# On SQLite, fewer: the driver's per-column work costs about as much as a probe. The
# key and the session are the ones asked for, and an entry's one owner column
# (user or agent) is all the record needs besides. As text, the timestamps skip the
# driver's slow generic datetime converter.
_SQLITE_RESOLVE_COLUMNS = (
    "id, value, scope, version, CAST(updated_at AS TEXT), CAST(expires_at AS TEXT), "
    "CASE scope WHEN 'user' THEN user_id WHEN 'agent' THEN agent END"
)


@functools.cache
def _resolve_sql(vendor: str) -> str:
    """One statement, up to four index probes: each reads one scope through that
    scope's unique (owner, key) index, and the most specific live entry wins. (An OR
    of the four conditions would defeat those indexes and scan every row of the key.)
    """
    table = connection.ops.quote_name(MemoryEntry._meta.db_table)
    sessions = connection.ops.quote_name(Session._meta.db_table)
    live = "(expires_at IS NULL OR expires_at > %(now)s)"
    # The owner and agent come from the session row itself (not from a cache), so a
    # deleted session resolves to nothing, in every process.
    owner = f"(SELECT owner_id FROM {sessions} WHERE id = %(session)s)"
    agent = f"(SELECT agent FROM {sessions} WHERE id = %(session)s)"
    exists = f"EXISTS (SELECT 1 FROM {sessions} WHERE id = %(session)s)"
    branches = [
        f"scope = 'session' AND session_id = %(session)s AND key = %(key)s AND {live}",
        f"scope = 'user' AND user_id = {owner} AND key = %(key)s AND {live}",
        f"scope = 'agent' AND agent = {agent} AND key = %(key)s AND {live}",
        f"scope = 'global' AND key = %(key)s AND {live} AND {exists}",
    ]
    if vendor == "sqlite":
        # SQLite evaluates COALESCE lazily: the scopes are probed in order and the
        # first hit ends the search, in one statement.
        probes = ",\n".join(f"(SELECT rowid FROM {table} WHERE {where})" for where in branches)
        sql = f"SELECT {_SQLITE_RESOLVE_COLUMNS} FROM {table} WHERE rowid = COALESCE({probes})"
        # Numbered parameters, bound from a tuple (cheaper than names from a dict).
        for number, name in enumerate(("session", "key", "now"), start=1):
            sql = sql.replace(f"%({name})s", f"?{number}")
        return sql
    union = " UNION ALL ".join(
        f"SELECT {rank} AS rank, {_RESOLVE_COLUMNS} FROM {table} WHERE {where}"
        for rank, where in enumerate(branches)
    )
    sql = f"SELECT {_RESOLVE_COLUMNS} FROM ({union}) AS candidates ORDER BY rank LIMIT 1"
    return sql


def _uuid_of_hex(value: str) -> UUID:
    """A UUID from the 32 hex digits Django stores in SQLite, built the way the
    standard library builds its own (``UUID._from_int`` in Python 3.14): the generic
    constructor's argument parsing costs three times as much, on a hot path."""
    uuid = object.__new__(UUID)
    object.__setattr__(uuid, "int", int(value, 16))
    object.__setattr__(uuid, "is_safe", SafeUUID.unknown)
    return uuid


def _sqlite_record(key: str, session_id: UUID, row: tuple[Any, ...]) -> MemoryRecord:
    entry_id, value, scope, version, updated, expires, owner = row
    return MemoryRecord(
        _uuid_of_hex(entry_id),
        key,
        json.loads(value),
        scope,
        session_id if scope == "session" else None,
        owner if scope == "user" else None,
        owner if scope == "agent" else "",
        version,
        _sqlite_datetime(updated),
        _sqlite_datetime(expires) if expires else None,
    )


def _record(row: tuple[Any, ...]) -> MemoryRecord:
    entry_id, key, value, scope, session_id, user_id, agent, version, updated, expires = row
    return MemoryRecord(
        entry_id,
        key,
        json.loads(value) if isinstance(value, str | bytes) else value,
        scope,
        session_id,
        user_id,
        agent,
        version,
        updated,
        expires,
    )


def _sqlite_datetime(value: str | dt.datetime) -> dt.datetime:
    # Django stores aware datetimes in SQLite as naive UTC text.
    if isinstance(value, str):
        return dt.datetime.fromisoformat(value + "+00:00")
    return value.replace(tzinfo=dt.UTC) if value.tzinfo is None else value


# The current second as SQLite text, and the second it is for (see _sqlite_now).
_second: tuple[int, str] = (0, "")


def _sqlite_now() -> str:
    """Now, as naive UTC text comparable with the datetimes Django stores in SQLite.

    Formatting a datetime costs more than the rest of building the query; the text
    of the current second is kept, and only the microseconds are formatted anew.
    (Always with six digits: an instant stored without them, at a whole second,
    compares before its own text with them, so it counts as expired at that very
    instant, as it does when compared as a datetime.)
    """
    global _second
    micros = time.time_ns() // 1000
    second, fraction = divmod(micros, 1_000_000)
    known = _second
    if known[0] != second:
        known = _second = (second, time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(second)))
    return f"{known[1]}.{fraction:06d}"


def memory_resolve_record(*, key: str, session_id: UUID) -> MemoryRecord | None:
    """The entry a run in the session reads for ``key``: the session's own, else its
    user's, else its agent's, else the global one. Expired entries are skipped.

    This is the runtime's hot read path, so it is written for speed: one indexed
    probe per scope through the driver, most specific first, stopping at the first
    hit (an OR of the four conditions would defeat the per-scope unique indexes).
    """
    db = lean.connected()
    raw = db.connection
    if db.vendor == "sqlite":
        row = raw.execute(_resolve_sql("sqlite"), (session_id.hex, key, _sqlite_now())).fetchone()
        if row is not None:
            return _sqlite_record(key, session_id, row)
    else:
        import psycopg

        params = {"session": session_id, "key": key, "now": dt.datetime.now(tz=dt.UTC)}
        # Server-side binding, so that PostgreSQL plans the statement once.
        with psycopg.Cursor(raw) as cursor:
            # Prepared once the connection's threshold is reached (never, with
            # DATABASE_PREPARED=0).
            row = cursor.execute(_resolve_sql(db.vendor), params).fetchone()
        if row is not None:
            return _record(row)
    if not Session.objects.filter(pk=session_id).exists():
        raise NotFound(f"No session {session_id}.")
    return None


def memory_resolve(*, key: str, session_id: UUID) -> MemoryEntry | None:
    """:func:`memory_resolve_record` as a model instance (for the API and admin)."""
    record = memory_resolve_record(key=key, session_id=session_id)
    return MemoryEntry.objects.filter(pk=record.id).first() if record else None


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


@functools.cache
def _context_sql() -> str:
    """The statement of :func:`memory_context` (built once: every run start reads it)."""
    table = connection.ops.quote_name(MemoryEntry._meta.db_table)
    live = "(expires_at IS NULL OR expires_at > %s)"
    branch = "SELECT * FROM (SELECT {rank} AS rank, scope, key, value FROM " + table
    where = [
        f"scope = 'session' AND session_id = %s AND {live}",
        f"scope = 'user' AND user_id = %s AND {live}",
        f"scope = 'agent' AND agent = %s AND {live}",
        f"scope = 'global' AND {live}",
    ]
    branches = [
        branch.format(rank=rank) + f" WHERE {condition} ORDER BY key LIMIT %s) AS scope{rank}"
        for rank, condition in enumerate(where)
    ]
    return " UNION ALL ".join(branches)


def memory_context(*, session_id: UUID, limit: int = 20) -> list[tuple[str, str, Any]]:
    """Up to ``limit`` live facts a run in the session starts with, as (scope, key,
    value): the session's own first, then its user's, its agent's, the global ones.

    Each scope is read through its own (owner, key) index with its own limit, so the
    cost does not grow with the size of the global or agent memory.
    """
    owner = session_owner_and_agent(session_id)
    if owner is None:
        raise NotFound(f"No session {session_id}.")
    owner_id, agent = owner
    now = timezone.now()
    with lean.cursor() as cursor:
        rows = lean.execute(
            cursor,
            _context_sql(),
            [session_id, now, limit, owner_id, now, limit, agent, now, limit, now, limit],
        ).fetchall()
    rows.sort(key=lambda row: (row[0], row[2]))
    facts: dict[str, tuple[str, str, Any]] = {}
    for _, scope, key, value in rows:
        # A key set in a more specific scope hides the same key further out, as
        # resolution does: the run is told only the value it would read.
        facts.setdefault(key, (scope, key, lean.json_of(value)))
    return list(facts.values())[:limit]
