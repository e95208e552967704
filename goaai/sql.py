"""Every statement goaai writes by hand, and only those a measurement justifies.

Everything else goes through the ORM. These few run through Django's connection
(``connection.cursor()``), inside the caller's ``transaction.atomic()`` block, so
that driver errors become Django's, ``on_commit`` callbacks wait for the commit,
and query-count tests see them like any other query:

- :func:`reserve_event_numbers`: the first statement of every recorded step. It
  locks the session row (every writer takes its locks in the same order, so
  concurrent writers cannot deadlock) and moves the session's event counter, in
  one round trip that also returns what the step needs to know of the session.
  On SQLite the same statement also reads what the step needs of the record it
  changes; :func:`read_row` is that read as one indexed probe of its own (a
  queryset costs more to build than the step's whole write, bench/recording.py).
- :func:`insert_events`: the step's events, in one statement. Every step of every
  run writes events; ``bulk_create`` costs about twice this statement on a small
  machine (bench/recording.py), for rows whose every value is known.
- :func:`insert` and :func:`update`: the rows the turn loop adds and changes at
  every step (runs, turns, tool calls), each one statement built once per shape.
  The ORM's ``save()`` and ``update()`` build their query anew at every call, at
  about ten times the statement's cost on a small machine (bench/recording.py).
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
from collections.abc import Mapping, Sequence
from decimal import Decimal
from typing import Any, NamedTuple
from uuid import UUID

from django.db import DEFAULT_DB_ALIAS, connection, connections, models


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


_RESERVE = (
    "UPDATE {sessions} SET last_event_seq = last_event_seq + %s WHERE id = {which} "
    "RETURNING id, last_event_seq, status, owner_id, agent{read}"
)


@functools.cache
def _reserve_sql(
    session_model: type[models.Model], of: type[models.Model] | None, read: tuple[str, ...]
) -> str:
    quote = connections[DEFAULT_DB_ALIAS].ops.quote_name
    sessions = quote(session_model._meta.db_table)
    if of is None or of is session_model:
        which = "%s"
    elif any(f.name == "session" for f in of._meta.concrete_fields):
        which = f"(SELECT session_id FROM {quote(of._meta.db_table)} WHERE id = %s)"  # noqa: S608
    else:
        # A row of a run (a turn): its session is its run's.
        run_model = of._meta.get_field("run").related_model
        if not (isinstance(run_model, type) and issubclass(run_model, models.Model)):
            raise TypeError(f"{of.__name__} belongs to no session.")
        which = (
            f"(SELECT r.session_id FROM {quote(of._meta.db_table)} t "  # noqa: S608
            f"JOIN {quote(run_model._meta.db_table)} r ON r.id = t.run_id WHERE t.id = %s)"
        )
    columns = "".join(
        f", (SELECT {quote(column)} FROM {quote(of._meta.db_table)} WHERE id = %s)"  # type: ignore[union-attr]  # noqa: S608
        for column in _columns(of, read)
    )
    return _RESERVE.format(sessions=sessions, which=which, read=columns)


def _field(model: type[models.Model], name: str) -> models.Field[Any, Any]:
    field = model._meta.get_field(name)
    if not isinstance(field, models.Field) or not field.column:
        raise TypeError(f"{model.__name__}.{name} is not a column.")
    return field


@functools.cache
def _columns(model: type[models.Model] | None, names: tuple[str, ...]) -> tuple[str, ...]:
    if model is None:
        if names:
            raise TypeError("Only a step on a row reads the row.")
        return ()
    return tuple(str(_field(model, name).column) for name in names)


@functools.cache
def _converters(model: type[models.Model], names: tuple[str, ...]) -> tuple[Any, ...]:
    """For each column, how to turn what the driver gives back into what the ORM
    would give (SQLite: UUIDs as hex text, datetimes as naive text)."""
    converters: list[Any] = []
    for name in names:
        field = model._meta.get_field(name)
        target = field.target_field if isinstance(field, models.ForeignKey) else field
        if isinstance(target, models.UUIDField):
            converters.append(uuid_of)
        elif isinstance(target, models.DateTimeField):
            converters.append(aware)
        elif isinstance(target, models.JSONField):
            converters.append(json_of)
        else:
            converters.append(None)
    return tuple(converters)


def _convert(
    model: type[models.Model], names: tuple[str, ...], values: Sequence[Any]
) -> tuple[Any, ...]:
    return tuple(
        value if value is None or convert is None else convert(value)
        for convert, value in zip(_converters(model, names), values, strict=True)
    )


class Reserved(NamedTuple):
    """What the statement that reserves a step's event numbers found: the
    session's id, its counter after the move, its status, owner id and agent, and
    the columns the step asked to read of its row (as the ORM would give them)."""

    session_id: UUID
    counter: int
    status: str
    owner_id: int
    agent: str
    row: tuple[Any, ...]


def reserve_event_numbers(
    session_model: type[models.Model],
    pk: UUID,
    count: int,
    *,
    of: type[models.Model] | None = None,
    read: tuple[str, ...] = (),
) -> Reserved | None:
    """Lock a session row and move its event counter by ``count`` (:class:`Reserved`),
    or ``None`` when there is no such session. ``pk`` is the session's, or with ``of``
    the id of a row of that model in the session (a run, a tool call, a turn): the
    step then finds its session in the same statement. ``read`` names fields of that
    row the step needs, read once the session is locked. On SQLite, whose writers
    are serialized from ``BEGIN IMMEDIATE`` on, the same statement reads them, and
    the step needs no statement before its write. On PostgreSQL, a statement's
    subqueries read the snapshot it took before it waited for the lock, so a second
    statement reads them. Call it inside ``transaction.atomic()``."""
    db = connections[DEFAULT_DB_ALIAS]
    param = pk if db.features.has_native_uuid_field else pk.hex
    folded = read if db.vendor == "sqlite" else ()
    with db.cursor() as cursor:
        cursor.execute(
            _reserve_sql(session_model, of, folded), [count, param, *[param] * len(folded)]
        )
        found = cursor.fetchone()
    if found is None:
        return None
    row: tuple[Any, ...] | None = ()
    if of is not None and read:
        row = _convert(of, read, found[5:]) if folded else read_row(of, pk, read)
        if row is None:
            return None
    return Reserved(uuid_of(found[0]), found[1], found[2], found[3], found[4], row or ())


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


def insert_events(
    event_model: type[models.Model],
    *,
    session_id: UUID,
    created_at: dt.datetime,
    events: Sequence[tuple[UUID | None, int, str, Any]],
) -> None:
    """Insert a step's events, ``(run_id, seq, type, data)`` each, all of one
    session and one instant, in one statement. The values are adapted as the
    model's fields adapt them; those the events share, once. Call it inside
    ``transaction.atomic()``."""
    db = connections[DEFAULT_DB_ALIAS]
    field = event_model._meta.get_field
    session = field("session_id").get_db_prep_save(session_id, db)  # type: ignore[union-attr]
    moment = field("created_at").get_db_prep_save(created_at, db)  # type: ignore[union-attr]
    run_column, data_column = field("run_id"), field("data")
    runs: dict[UUID | None, Any] = {}
    rows = []
    for run_id, seq, event_type, data in events:
        if run_id not in runs:
            runs[run_id] = run_column.get_db_prep_save(run_id, db)  # type: ignore[union-attr]
        json = data_column.get_db_prep_save(data, db)  # type: ignore[union-attr]
        rows.append([session, runs[run_id], seq, str(event_type), json, moment])
    quote = db.ops.quote_name
    sql = _insert_events_sql(quote(event_model._meta.db_table), len(rows), db.vendor)
    with db.cursor() as cursor:
        if db.vendor == "sqlite":
            cursor.executemany(sql, rows)
        else:
            cursor.execute(sql, [value for row in rows for value in row])


def read_row(model: type[models.Model], pk: Any, names: tuple[str, ...]) -> tuple[Any, ...] | None:
    """The fields ``names`` of one row, as the ORM would give them, or ``None``: one
    indexed probe, for the record a step changes when it found it otherwise (a
    queryset costs more to build than the step's whole write, bench/recording.py)."""
    db = connections[DEFAULT_DB_ALIAS]
    sql = _read_sql(model, names)
    with db.cursor() as cursor:
        cursor.execute(sql, [_primary_key(model).get_db_prep_value(pk, db)])
        row = cursor.fetchone()
    return None if row is None else _convert(model, names, row)


@functools.cache
def _read_sql(model: type[models.Model], names: tuple[str, ...]) -> str:
    quote = connections[DEFAULT_DB_ALIAS].ops.quote_name
    columns = ", ".join(quote(column) for column in _columns(model, names))
    pk = quote(str(_primary_key(model).column))
    return f"SELECT {columns} FROM {_table(model)} WHERE {pk} = %s"  # noqa: S608


def _primary_key(model: type[models.Model]) -> models.Field[Any, Any]:
    pk = model._meta.pk
    if pk is None:
        raise TypeError(f"{model.__name__} has no primary key.")
    return pk


# The turn loop's writes


@functools.cache
def _insert_sql(model: type[models.Model]) -> tuple[str, tuple[models.Field[Any, Any], ...]]:
    fields = tuple(model._meta.local_concrete_fields)
    quote = connections[DEFAULT_DB_ALIAS].ops.quote_name
    columns = ", ".join(quote(f.column) for f in fields)
    marks = ", ".join(["%s"] * len(fields))
    return f"INSERT INTO {_table(model)} ({columns}) VALUES ({marks})", fields  # noqa: S608


def insert(instance: models.Model) -> None:
    """Insert a new instance as ``save(force_insert=True)`` does (each field's
    ``pre_save`` and its database adaptation, no signals) with one statement
    built once per model. For the rows every step of the turn loop adds (turns,
    tool calls): the ORM's ``save()`` builds its query anew each time, at about
    ten times this statement's cost (bench/recording.py). ``IntegrityError`` as
    Django raises it."""
    db = connections[DEFAULT_DB_ALIAS]
    sql, fields = _insert_sql(type(instance))
    values = [f.get_db_prep_save(f.pre_save(instance, True), db) for f in fields]
    with db.cursor() as cursor:
        cursor.execute(sql, values)
    instance._state.adding = False
    instance._state.db = DEFAULT_DB_ALIAS


@functools.cache
def _update_sql(
    model: type[models.Model], columns: tuple[str, ...], added: tuple[str, ...], guards: int
) -> tuple[str, tuple[models.Field[Any, Any], ...]]:
    quote = connections[DEFAULT_DB_ALIAS].ops.quote_name
    fields = tuple(_field(model, name) for name in columns)
    sets = [f"{quote(str(f.column))} = %s" for f in fields]
    for column in _columns(model, added):
        sets.append(f"{quote(column)} = {quote(column)} + %s")
    where = f"{quote(str(_primary_key(model).column))} = %s"
    if guards:
        where += f" AND status IN ({', '.join(['%s'] * guards)})"
    sql = f"UPDATE {_table(model)} SET {', '.join(sets)} WHERE {where}"  # noqa: S608
    return sql, fields


def update(
    model: type[models.Model],
    pk: Any,
    values: dict[str, Any],
    *,
    add: Mapping[str, float | Decimal] | None = None,
    status_in: Sequence[str] = (),
) -> int:
    """Set ``values`` (by field name, adapted as each field adapts them) and add
    ``add`` to counters on one row, if its status is one of ``status_in`` when
    given; returns how many rows changed (0 or 1). The turn loop's changes to
    the rows it wrote: one statement built once per shape, where a queryset's
    ``update()`` costs about ten times as much (bench/recording.py)."""
    db = connections[DEFAULT_DB_ALIAS]
    added = add or {}
    sql, fields = _update_sql(model, tuple(values), tuple(added), len(status_in))
    params = [
        f.get_db_prep_save(value, db) for f, value in zip(fields, values.values(), strict=True)
    ]
    params.extend(added.values())
    params.append(_primary_key(model).get_db_prep_value(pk, db))
    params.extend(str(status) for status in status_in)
    with db.cursor() as cursor:
        cursor.execute(sql, params)
        return int(cursor.rowcount)


# Memory


# What a resolved read returns, in MemoryRecord's order. SQLite gives its
# timestamps as the text it stores (Django's converter for a datetime column costs
# as much as the rest of the read).
_RESOLVE_COLUMNS = (
    "id, key, value, scope, session_id, user_id, agent, version, updated_at, expires_at"
)
_SQLITE_RESOLVE_COLUMNS = (
    "id, key, value, scope, session_id, user_id, agent, version, "
    "CAST(updated_at AS TEXT), CAST(expires_at AS TEXT)"
)
# "Now", by the database's wall clock (not the transaction's start): every server
# process compares expiry with one clock, and the statement needs no parameter for
# it. SQLite's text has the milliseconds of the microseconds it stores.
_NOW = {
    "sqlite": "strftime('%%Y-%%m-%%d %%H:%%M:%%f', 'now')",
    "postgresql": "clock_timestamp()",
}


@functools.cache
def _resolve_sql(
    entry_model: type[models.Model], session_model: type[models.Model], vendor: str
) -> str:
    quote = connections[DEFAULT_DB_ALIAS].ops.quote_name
    entries = quote(entry_model._meta.db_table)
    sessions = quote(session_model._meta.db_table)
    live = f"(expires_at IS NULL OR expires_at > {_NOW[vendor]})"
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
        columns = _SQLITE_RESOLVE_COLUMNS
        return f"SELECT {columns} FROM {entries} WHERE rowid = COALESCE({probes})"  # noqa: S608
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
) -> tuple[Any, ...] | None:
    """The most specific live entry for ``key`` that a run in the session reads
    (session, its user, its agent, global) as the driver returns its columns
    (:data:`_RESOLVE_COLUMNS`), or ``None``.

    One statement, up to four index probes: each reads one scope through that
    scope's unique (owner, key) index (an OR of the four conditions would defeat
    those indexes and scan every row of the key). A run's hot read path: the
    connection is looked up once."""
    db = connections[DEFAULT_DB_ALIAS]
    params = {
        "session": session_id if db.features.has_native_uuid_field else session_id.hex,
        "key": key,
    }
    with db.cursor() as cursor:
        cursor.execute(_resolve_sql(entry_model, session_model, db.vendor), params)
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
