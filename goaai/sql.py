"""Every statement goaai writes by hand, and only those a measurement justifies.

Everything else goes through the ORM. These few run through Django's connection
(``connection.cursor()``), inside the caller's ``transaction.atomic()`` block, so
that driver errors become Django's, ``on_commit`` callbacks wait for the commit,
and query-count tests see them like any other query:

- :func:`reserve_event_numbers`: the first statement of every recorded step. It
  locks the session row (every writer takes its locks in the same order, so
  concurrent writers cannot deadlock) and moves the session's event counter, in
  one round trip that also returns what the step needs to know of the session.
- :func:`insert_events`: the step's events, in one statement. Every step of every
  run writes events; ``bulk_create`` costs about twice this statement on a small
  machine (bench/recording.py), for rows whose every value is known.
- :func:`memory_resolve_row` and :func:`memory_context_rows`: a run's memory reads,
  one indexed probe per scope in one statement, which the ORM cannot express.
- :func:`delete_rows`: set-based deletes for retention, where the ORM's collector
  would load every row of millions into memory first.
- :func:`bulk_load`: ``COPY`` (PostgreSQL) or ``executemany`` (SQLite) for demo data.

The module knows no app: callers pass the models whose tables the statements use.
"""

from __future__ import annotations

import datetime as dt
import functools
import json
from collections.abc import Sequence
from typing import Any
from uuid import UUID

from django.db import connection, models


def _table(model: type[models.Model]) -> str:
    return connection.ops.quote_name(model._meta.db_table)


def _prep(model: type[models.Model], field: str, value: Any) -> Any:
    """``value`` as ``model.field`` stores it (a UUID is hex text on SQLite)."""
    column = model._meta.get_field(field)
    if not isinstance(column, models.Field):
        raise TypeError(f"{model.__name__}.{field} is not a column.")
    return column.get_db_prep_value(value, connection)


def uuid_of(value: Any) -> UUID:
    """A UUID column as the driver gives it back (hex text on SQLite)."""
    return value if isinstance(value, UUID) else UUID(hex=value)


def json_of(value: Any) -> Any:
    """A JSON column as the driver gives it back (text on SQLite)."""
    return json.loads(value) if isinstance(value, str | bytes) else value


def aware(value: Any) -> dt.datetime:
    """A datetime column as the driver gives it back, aware (SQLite: naive UTC)."""
    parsed = dt.datetime.fromisoformat(value) if isinstance(value, str) else value
    return parsed.replace(tzinfo=dt.UTC) if parsed.tzinfo is None else parsed


# The event log


@functools.cache
def _reserve_sql(table: str) -> str:
    return (
        f"UPDATE {table} SET last_event_seq = last_event_seq + %s WHERE id = %s "  # noqa: S608
        "RETURNING last_event_seq, status, owner_id, agent"
    )


def reserve_event_numbers(
    session_model: type[models.Model], session_id: UUID, count: int
) -> tuple[int, str, int, str] | None:
    """Lock the session row and move its event counter by ``count``; returns the
    counter after the move, the session's status, owner id and agent, or ``None``
    when there is no such session. Call it inside ``transaction.atomic()``."""
    with connection.cursor() as cursor:
        cursor.execute(
            _reserve_sql(_table(session_model)),
            [count, _prep(session_model, "id", session_id)],
        )
        row = cursor.fetchone()
    return None if row is None else (row[0], row[1], row[2], row[3])


_EVENT_COLUMNS = ("session_id", "run_id", "seq", "type", "data", "created_at")


@functools.cache
def _insert_events_sql(table: str, rows: int, vendor: str) -> str:
    columns = ", ".join(_EVENT_COLUMNS)
    one = "(%s, %s, %s, %s, %s, %s)"
    if vendor == "sqlite":
        # SQLite runs a multi-row VALUES as a subquery: one row a statement, run
        # with executemany, is cheaper there.
        rows = 1
    return f"INSERT INTO {table} ({columns}) VALUES " + ", ".join([one] * rows)  # noqa: S608


def insert_events(event_model: type[models.Model], events: Sequence[models.Model]) -> None:
    """Insert ``events`` (unsaved instances whose every column is set) in one
    statement. Call it inside ``transaction.atomic()``."""
    fields = [event_model._meta.get_field(name) for name in _EVENT_COLUMNS]
    rows = [
        [
            field.get_db_prep_save(getattr(event, field.attname), connection)  # type: ignore[union-attr]
            for field in fields
        ]
        for event in events
    ]
    sql = _insert_events_sql(_table(event_model), len(rows), connection.vendor)
    with connection.cursor() as cursor:
        if connection.vendor == "sqlite":
            cursor.executemany(sql, rows)
        else:
            cursor.execute(sql, [value for row in rows for value in row])


# Memory


# What a resolved read returns, in MemoryRecord's order.
_RESOLVE_COLUMNS = (
    "id, key, value, scope, session_id, user_id, agent, version, updated_at, expires_at"
)


@functools.cache
def _resolve_sql(vendor: str, entries: str, sessions: str) -> str:
    live = "(expires_at IS NULL OR expires_at > %(now)s)"
    # The owner and agent come from the session row itself, so a deleted session
    # resolves to nothing, in every process.
    owner = f"(SELECT owner_id FROM {sessions} WHERE id = %(session)s)"  # noqa: S608
    agent = f"(SELECT agent FROM {sessions} WHERE id = %(session)s)"  # noqa: S608
    exists = f"EXISTS (SELECT 1 FROM {sessions} WHERE id = %(session)s)"  # noqa: S608
    branches = [
        f"scope = 'session' AND session_id = %(session)s AND key = %(key)s AND {live}",
        f"scope = 'user' AND user_id = {owner} AND key = %(key)s AND {live}",
        f"scope = 'agent' AND agent = {agent} AND key = %(key)s AND {live}",
        f"scope = 'global' AND key = %(key)s AND {live} AND {exists}",
    ]
    if vendor == "sqlite":
        # SQLite evaluates COALESCE lazily: the scopes are probed in order and the
        # first hit ends the search.
        probes = ",\n".join(f"(SELECT rowid FROM {entries} WHERE {where})" for where in branches)  # noqa: S608
        return f"SELECT {_RESOLVE_COLUMNS} FROM {entries} WHERE rowid = COALESCE({probes})"  # noqa: S608
    union = " UNION ALL ".join(
        f"SELECT {rank} AS rank, {_RESOLVE_COLUMNS} FROM {entries} WHERE {where}"  # noqa: S608
        for rank, where in enumerate(branches)
    )
    return f"SELECT {_RESOLVE_COLUMNS} FROM ({union}) AS candidates ORDER BY rank LIMIT 1"  # noqa: S608


def memory_resolve_row(
    entry_model: type[models.Model],
    session_model: type[models.Model],
    *,
    key: str,
    session_id: UUID,
    now: dt.datetime,
) -> tuple[Any, ...] | None:
    """The most specific live entry for ``key`` that a run in the session reads
    (session, its user, its agent, global) as the driver returns its columns
    (:data:`_RESOLVE_COLUMNS`), or ``None``.

    One statement, up to four index probes: each reads one scope through that
    scope's unique (owner, key) index (an OR of the four conditions would defeat
    those indexes and scan every row of the key)."""
    sql = _resolve_sql(connection.vendor, _table(entry_model), _table(session_model))
    params = {
        "session": _prep(session_model, "id", session_id),
        "key": key,
        "now": connection.ops.adapt_datetimefield_value(now),
    }
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        row: tuple[Any, ...] | None = cursor.fetchone()
    return row


@functools.cache
def _context_sql(entries: str) -> str:
    live = "(expires_at IS NULL OR expires_at > %s)"
    branch = "SELECT * FROM (SELECT {rank} AS rank, scope, key, value FROM " + entries  # noqa: S608
    where = [
        f"scope = 'session' AND session_id = %s AND {live}",
        f"scope = 'user' AND user_id = %s AND {live}",
        f"scope = 'agent' AND agent = %s AND {live}",
        f"scope = 'global' AND {live}",
    ]
    return " UNION ALL ".join(
        branch.format(rank=rank) + f" WHERE {condition} ORDER BY key LIMIT %s) AS scope{rank}"
        for rank, condition in enumerate(where)
    )


def memory_context_rows(
    entry_model: type[models.Model],
    *,
    session_id: UUID,
    owner_id: int,
    agent: str,
    now: dt.datetime,
    limit: int,
) -> list[tuple[int, str, str, Any]]:
    """Up to ``limit`` live entries of each scope a run in the session reads, as
    (rank, scope, key, value), the session's scope ranked first. Each scope is read
    through its own (owner, key) index with its own limit, so the cost does not grow
    with the size of the global or agent memory."""
    moment = connection.ops.adapt_datetimefield_value(now)
    session = _prep(entry_model, "session_id", session_id)
    params = [session, moment, limit, owner_id, moment, limit, agent, moment, limit]
    with connection.cursor() as cursor:
        cursor.execute(_context_sql(_table(entry_model)), [*params, moment, limit])
        rows = cursor.fetchall()
    return [(row[0], row[1], row[2], json_of(row[3])) for row in rows]


# Retention and bulk loading


def delete_rows(queryset: models.QuerySet[Any, Any]) -> int:
    """Delete the rows ``queryset`` selects in one statement, without loading them
    (and without cascading: the caller deletes what points at them first).
    Returns how many went."""
    inner, params = queryset.values("pk").query.sql_with_params()
    table = _table(queryset.model)
    pk = connection.ops.quote_name(queryset.model._meta.pk.column)
    with connection.cursor() as cursor:
        cursor.execute(f"DELETE FROM {table} WHERE {pk} IN ({inner})", params)  # noqa: S608
        return int(cursor.rowcount)


def bulk_load(model: type[models.Model], rows: Sequence[Sequence[Any]]) -> int:
    """Insert ``rows`` (values in the order of the model's concrete fields, an
    auto-incremented primary key left out) in bulk: ``COPY`` on PostgreSQL,
    ``executemany`` on SQLite. No ``save()``, no signals: for generated data."""
    if not rows:
        return 0
    fields = [
        f
        for f in model._meta.concrete_fields
        if not (f.primary_key and isinstance(f, models.AutoField | models.BigAutoField))
    ]
    quote = connection.ops.quote_name
    columns = ", ".join(quote(f.column) for f in fields)
    table = _table(model)
    json_positions = [i for i, f in enumerate(fields) if isinstance(f, models.JSONField)]
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            with cursor.cursor.copy(f"COPY {table} ({columns}) FROM STDIN") as copy:
                for row in rows:
                    values = list(row)
                    for i in json_positions:
                        if values[i] is not None:
                            values[i] = json.dumps(values[i])
                    copy.write_row(values)
        else:
            marks = ", ".join(["%s"] * len(fields))
            prepared = [
                [
                    f.get_db_prep_save(value, connection)
                    for f, value in zip(fields, row, strict=True)
                ]
                for row in rows
            ]
            cursor.executemany(f"INSERT INTO {table} ({columns}) VALUES ({marks})", prepared)  # noqa: S608
    return len(rows)
