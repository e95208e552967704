"""Every statement goaai writes by hand, and only those a measurement justifies.

Everything else goes through the ORM. These few run through Django's connection
(``connection.cursor()``), inside the caller's ``transaction.atomic()`` block, so
that driver errors become Django's, ``on_commit`` callbacks wait for the commit,
and query-count tests see them like any other query:

- :func:`reserve_event_numbers`: the first statement of every recorded step. It
  locks the session row (every writer takes its locks in the same order, so
  concurrent writers cannot deadlock) and moves the session's event counter and
  last activity, in one round trip that also returns what the step needs to know
  of the session.
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
- :func:`memory_resolve_row` and :func:`memory_ranked_rows`: a run's memory reads
  (:func:`memory_resolve_entry`, the first read whole, for the API),
  one indexed probe per scope (and the full-text and vector rankings) in one
  statement, which the ORM cannot express; :func:`memory_embedding_store` and
  :func:`memory_embedding_delete` write the vectors those rankings compare.
- :func:`branch_walk`: the runs a new run's history is made of, newest first, walked
  back along their ``previous_run`` links in one recursive statement (which the ORM
  cannot express) that stops at the first run a summary covers.
- :func:`delete_rows`: set-based deletes for retention, where the ORM's collector
  would load every row of millions into memory first.
- :func:`bulk_load`: ``COPY`` (PostgreSQL) or ``executemany`` (SQLite) for demo data.
- :func:`add_to_rows`: the rollups behind the dashboard. An ended run adds to a
  dozen counter rows and a purge takes thousands of runs out of them; the ORM has no
  statement that adds to a row or creates it (an UPDATE, maybe an INSERT, per row:
  a purge batch of 500 sessions touched 8,000 rows and took 25 s at a million runs).
- :class:`Prepared`: not a statement written by hand but an ORM queryset whose
  statement is built once and run again with new values, for the reads on a run's
  start that its building made costly.
- :func:`plan_with_values`: reports (the operators' dashboard) whose statements are
  each planned for the values they are given, not once for any values.

The module knows no app: callers pass the models whose tables the statements use.
"""

from __future__ import annotations

import datetime as dt
import functools
import json
import struct
from collections.abc import Callable, Mapping, Sequence
from decimal import Decimal
from itertools import zip_longest
from typing import Any, NamedTuple
from uuid import UUID

from django.contrib.auth import get_user_model
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


# The step is the session's newest activity as well: the same statement moves
# ``last_activity_at`` to the step's time (chats are listed by it).
_RESERVE = (
    "UPDATE {sessions} SET last_event_seq = last_event_seq + %s, {activity} = %s "
    "WHERE id = {which} RETURNING id, last_event_seq, status, owner_id, agent{read}"
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
    columns = "".join(f", {read_one}" for read_one in _subqueries(of, read))
    activity = quote(str(_field(session_model, "last_activity_at").column))
    return _RESERVE.format(sessions=sessions, activity=activity, which=which, read=columns)


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


# A field a step reads of the run its row belongs to (a turn's, a tool call's):
# ``run__<field>``, as a queryset names it.
_OF_RUN = "run__"


def _run_of(model: type[models.Model]) -> type[models.Model]:
    run_model = model._meta.get_field("run").related_model
    if not (isinstance(run_model, type) and issubclass(run_model, models.Model)):
        raise TypeError(f"{model.__name__} belongs to no run.")
    return run_model


def _owner_field(model: type[models.Model], name: str) -> tuple[type[models.Model], str]:
    """The model whose field ``name`` names (the row's, or its run's), and the
    field's own name."""
    if name.startswith(_OF_RUN):
        return _run_of(model), name.removeprefix(_OF_RUN)
    return model, name


@functools.cache
def _subqueries(model: type[models.Model] | None, names: tuple[str, ...]) -> tuple[str, ...]:
    """For each field of ``names``, a subquery that reads it for the row whose id is
    the statement's next parameter."""
    if model is None:
        _columns(model, names)
        return ()
    quote = connections[DEFAULT_DB_ALIAS].ops.quote_name
    table = quote(model._meta.db_table)
    found = []
    for name in names:
        owner, field = _owner_field(model, name)
        column = quote(str(_field(owner, field).column))
        if owner is model:
            found.append(f"(SELECT {column} FROM {table} WHERE id = %s)")  # noqa: S608
        else:
            found.append(
                f"(SELECT {column} FROM {quote(owner._meta.db_table)} "  # noqa: S608
                f"WHERE id = (SELECT run_id FROM {table} WHERE id = %s))"
            )
    return tuple(found)


@functools.cache
def _converters(model: type[models.Model], names: tuple[str, ...]) -> tuple[Any, ...]:
    """For each column, how to turn what the driver gives back into what the ORM
    would give (SQLite: UUIDs as hex text, datetimes as naive text)."""
    converters: list[Any] = []
    for name in names:
        owner, own_name = _owner_field(model, name)
        field = owner._meta.get_field(own_name)
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
    now: dt.datetime,
    of: type[models.Model] | None = None,
    read: tuple[str, ...] = (),
) -> Reserved | None:
    """Lock a session row, move its event counter by ``count`` and its last activity
    to ``now`` (:class:`Reserved`), or ``None`` when there is no such session.
    ``pk`` is the session's, or with ``of`` the id of a row of that model in the
    session (a run, a tool call, a turn): the step then finds its session in the
    same statement. ``read`` names fields of that row the step needs (and, as
    ``run__<field>``, of the run the row belongs to), read once the session is
    locked. On SQLite, whose writers are serialized from ``BEGIN
    IMMEDIATE`` on, the same statement reads them, and the step needs no statement
    before its write. On PostgreSQL, a statement's subqueries read the snapshot it
    took before it waited for the lock, so a second statement reads them. Call it
    inside ``transaction.atomic()``."""
    db = connections[DEFAULT_DB_ALIAS]
    param = pk if db.features.has_native_uuid_field else pk.hex
    folded = read if db.vendor == "sqlite" else ()
    moment = _field(session_model, "last_activity_at").get_db_prep_save(now, db)
    with db.cursor() as cursor:
        cursor.execute(
            _reserve_sql(session_model, of, folded),
            [count, moment, param, *[param] * len(folded)],
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
def _move_counter_sql(session_model: type[models.Model]) -> str:
    return f"UPDATE {_table(session_model)} SET last_event_seq = last_event_seq + %s WHERE id = %s"  # noqa: S608


def _session_model(event_model: type[models.Model]) -> type[models.Model]:
    session_model = event_model._meta.get_field("session").related_model
    if not (isinstance(session_model, type) and issubclass(session_model, models.Model)):
        raise TypeError(f"{event_model.__name__} belongs to no session.")
    return session_model


def move_event_counter(event_model: type[models.Model], session_id: UUID, by: int) -> None:
    """Move the event counter of the session ``session_id`` (of ``event_model``'s
    log) by ``by``: a step that wrote fewer events than it reserved, and none."""
    db = connections[DEFAULT_DB_ALIAS]
    session = event_model._meta.get_field("session_id").get_db_prep_save(session_id, db)  # type: ignore[union-attr]
    with db.cursor() as cursor:
        cursor.execute(_move_counter_sql(_session_model(event_model)), [by, session])


@functools.cache
def _insert_events_sql(event_model: type[models.Model], vendor: str, move_counter: bool) -> str:
    columns = ", ".join(_EVENT_COLUMNS)
    table = _table(event_model)
    if vendor == "sqlite":
        # SQLite runs a multi-row VALUES as a subquery: one row a statement, run
        # with executemany, is cheaper there.
        return f"INSERT INTO {table} ({columns}) VALUES (%s, %s, %s, %s, %s, %s)"  # noqa: S608
    # The rows as one JSON document: one statement text (and one prepared
    # statement) for any number of events, and three values for one as for ten.
    insert = (
        f"INSERT INTO {table} ({columns}) SELECT %s, e.run_id, e.seq, e.type, e.data, %s "  # noqa: S608
        "FROM jsonb_to_recordset(%s::jsonb) AS e(run_id uuid, seq bigint, type text, data jsonb)"
    )
    if move_counter:
        # A data-modifying WITH runs once, whether or not the INSERT reads it.
        return f"WITH moved AS ({_move_counter_sql(_session_model(event_model))}) {insert}"
    return insert


def insert_events(
    event_model: type[models.Model],
    *,
    session_id: UUID,
    created_at: dt.datetime,
    events: Sequence[tuple[UUID | None, int, str, Any]],
    counter_moved: int = 0,
    rows: Sequence[tuple[str, list[Any]]] = (),
) -> None:
    """Insert a step's events, ``(run_id, seq, type, data)`` each, all of one
    session and one instant, in one statement. The values are adapted as the
    model's fields adapt them; those the events share, once; on PostgreSQL the
    events go as one JSON document that the statement reads as rows
    (``jsonb_to_recordset``). Call it inside ``transaction.atomic()``.

    ``counter_moved``: a step that wrote more or fewer events than it reserved
    moves the session's event counter by the difference; ``rows``: inserts of
    the step's own rows (:func:`insert_statement`) that go with its events. Both in
    the same statement on PostgreSQL (its foreign keys are checked at commit);
    SQLite, which has no data-modifying WITH, runs each as a statement before."""
    db = connections[DEFAULT_DB_ALIAS]
    field = event_model._meta.get_field
    session = field("session_id").get_db_prep_save(session_id, db)  # type: ignore[union-attr]
    moment = field("created_at").get_db_prep_save(created_at, db)  # type: ignore[union-attr]
    run_column, data_column = field("run_id"), field("data")
    with db.cursor() as cursor:
        if db.vendor == "sqlite":
            runs: dict[UUID | None, Any] = {}
            adapted = []
            for run_id, seq, event_type, data in events:
                if run_id not in runs:
                    runs[run_id] = run_column.get_db_prep_save(run_id, db)  # type: ignore[union-attr]
                json_data = data_column.get_db_prep_save(data, db)  # type: ignore[union-attr]
                adapted.append([session, runs[run_id], seq, str(event_type), json_data, moment])
            for statement, values in rows:
                cursor.execute(statement, values)
            if counter_moved:
                move_event_counter(event_model, session_id, counter_moved)
            cursor.executemany(_insert_events_sql(event_model, db.vendor, False), adapted)
            return
        # Written as the data column's encoder writes it, as the field would.
        document = json.dumps(
            [
                {
                    "run_id": None if run_id is None else str(run_id),
                    "seq": seq,
                    "type": str(event_type),
                    "data": data,
                }
                for run_id, seq, event_type, data in events
            ],
            cls=data_column.encoder,  # type: ignore[union-attr]
        )
        insert = _insert_events_sql(event_model, db.vendor, bool(counter_moved))
        moved = [counter_moved, session] if counter_moved else []
        params = [*moved, session, moment, document]
        if rows:
            # Before the counter's move (a WITH of its own, when there is one).
            inserted = ", ".join(
                f"row_{n} AS ({statement})" for n, (statement, _) in enumerate(rows)
            )
            if insert.startswith("WITH "):
                insert = f"WITH {inserted}, {insert.removeprefix('WITH ')}"
            else:
                insert = f"WITH {inserted} {insert}"
            params = [*(value for _, values in rows for value in values), *params]
        cursor.execute(insert, params)


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
    columns, joined = [], False
    for name in names:
        owner, field = _owner_field(model, name)
        joined |= owner is not model
        alias = "t" if owner is model else "r"
        columns.append(f"{alias}.{quote(str(_field(owner, field).column))}")
    pk = quote(str(_primary_key(model).column))
    join = (
        f" JOIN {_table(_run_of(model))} r ON r.id = t.{quote(str(_field(model, 'run').column))}"
        if joined
        else ""
    )
    return f"SELECT {', '.join(columns)} FROM {_table(model)} t{join} WHERE t.{pk} = %s"  # noqa: S608


def _primary_key(model: type[models.Model]) -> models.Field[Any, Any]:
    pk = model._meta.pk
    if pk is None:
        raise TypeError(f"{model.__name__} has no primary key.")
    return pk


# The turn loop's writes


@functools.cache
def _insert_sql(
    model: type[models.Model], nulls: tuple[bool, ...] = ()
) -> tuple[str, tuple[models.Field[Any, Any], ...]]:
    """The INSERT of a row of ``model``, and its fields in the order of its values;
    a ``NULL`` where ``nulls`` says, not a value."""
    fields = tuple(model._meta.local_concrete_fields)
    quote = connections[DEFAULT_DB_ALIAS].ops.quote_name
    columns = ", ".join(quote(f.column) for f in fields)
    marks = ", ".join("NULL" if null else "%s" for _, null in zip_longest(fields, nulls))
    return f"INSERT INTO {_table(model)} ({columns}) VALUES ({marks})", fields  # noqa: S608


def _stamped(field: models.Field[Any, Any]) -> bool:
    return getattr(field, "auto_now", False) or getattr(field, "auto_now_add", False)


def insert(instance: models.Model, *, now: dt.datetime | None = None) -> None:
    """Insert a new instance as ``save(force_insert=True)`` does (each field's
    ``pre_save`` and its database adaptation, no signals) with one statement
    built once per model. For the rows every step of the turn loop adds (turns,
    tool calls): the ORM's ``save()`` builds its query anew each time, at about
    ten times this statement's cost (bench/recording.py). ``IntegrityError`` as
    Django raises it.

    ``now``: the time its ``auto_now`` and ``auto_now_add`` fields take (by
    default the moment of the insert), for a row whose other columns must name
    that same moment."""
    execute(*insert_statement(instance, now=now))


def execute(statement: str, values: Sequence[Any]) -> None:
    """Run one statement made here (:func:`insert_statement`)."""
    with connections[DEFAULT_DB_ALIAS].cursor() as cursor:
        cursor.execute(statement, values)


def insert_statement(
    instance: models.Model, *, now: dt.datetime | None = None
) -> tuple[str, list[Any]]:
    """The statement :func:`insert` runs for ``instance`` and its values, taken
    now (the instance then counts as saved): for an insert that goes with others
    in one statement (:func:`insert_events`)."""
    db = connections[DEFAULT_DB_ALIAS]
    _, fields = _insert_sql(type(instance))
    values = []
    for field in fields:
        if now is not None and _stamped(field):
            setattr(instance, field.attname, now)
            value: Any = now
        else:
            value = field.pre_save(instance, True)
        values.append(field.get_db_prep_save(value, db))
    instance._state.adding = False
    instance._state.db = DEFAULT_DB_ALIAS
    # A NULL is written as such: fewer values to send (and a statement whose
    # parsing the driver keeps, which it does for one of up to 50 values).
    nulls = tuple(value is None for value in values)
    sql, _ = _insert_sql(type(instance), nulls)
    return sql, [value for value in values if value is not None]


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
    entry_model: type[models.Model],
    session_model: type[models.Model],
    vendor: str,
    whole: bool = False,
) -> str:
    """The resolution's statement, returning :data:`_RESOLVE_COLUMNS`, or with
    ``whole`` every column of the entry (as ``QuerySet.raw()`` reads a model)."""
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
        columns = "*" if whole else _SQLITE_RESOLVE_COLUMNS
        return f"SELECT {columns} FROM {entries} WHERE rowid = COALESCE({probes})"  # noqa: S608
    columns = f"{entries}.*" if whole else _RESOLVE_COLUMNS
    union = " UNION ALL ".join(
        f"SELECT {rank} AS rank, {columns} FROM {entries} WHERE {where}"  # noqa: S608
        for rank, where in enumerate(branches)
    )
    outer = "*" if whole else _RESOLVE_COLUMNS
    return f"SELECT {outer} FROM ({union}) AS candidates ORDER BY rank LIMIT 1"  # noqa: S608


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


def memory_resolve_entry(
    entry_model: type[models.Model],
    session_model: type[models.Model],
    *,
    key: str,
    session_id: UUID,
) -> Any:
    """The entry :func:`memory_resolve_row` finds, read whole as a model instance
    (``QuerySet.raw()``: Django's conversions of every column), or ``None``: the
    same statement, for a reader that shows the entry (the API)."""
    db = connections[DEFAULT_DB_ALIAS]
    params = {
        "session": session_id if db.features.has_native_uuid_field else session_id.hex,
        "key": key,
    }
    statement = _resolve_sql(entry_model, session_model, db.vendor, whole=True)
    return next(iter(entry_model._default_manager.raw(statement, params)), None)


# A run's memory, ranked. Every candidate is live, one the session reads (its own,
# its user's, its agent's, global) and not hidden by the same key in a more
# specific of those scopes (each check one probe of that scope's unique index).


def _live(row: str, vendor: str) -> str:
    return f"({row}.expires_at IS NULL OR {row}.expires_at > {_NOW[vendor]})"


def _readable(row: str) -> str:
    return (
        f"(({row}.scope = 'session' AND {row}.session_id = %(session)s)"
        f" OR ({row}.scope = 'user' AND {row}.user_id = %(user)s)"
        f" OR ({row}.scope = 'agent' AND {row}.agent = %(agent)s)"
        f" OR {row}.scope = 'global')"
    )


def _visible(row: str, entries: str, vendor: str) -> str:
    def shadowing(scope: str, owner: str) -> str:
        return (
            f"EXISTS (SELECT 1 FROM {entries} o WHERE o.scope = '{scope}' "  # noqa: S608
            f"AND o.{owner} AND o.key = {row}.key AND {_live('o', vendor)})"
        )

    by_session = shadowing("session", "session_id = %(session)s")
    by_user = shadowing("user", "user_id = %(user)s")
    by_agent = shadowing("agent", "agent = %(agent)s")
    return (
        f"NOT ({row}.scope <> 'session' AND {by_session})"
        f" AND NOT ({row}.scope IN ('agent', 'global') AND {by_user})"
        f" AND NOT ({row}.scope = 'global' AND {by_agent})"
    )


def _candidates(row: str, entries: str, vendor: str) -> str:
    return f"{_live(row, vendor)} AND {_readable(row)} AND {_visible(row, entries, vendor)}"


def _matching_sql(entries: str, app_label: str, vendor: str) -> str:
    """Part 0: the entries whose words match, best first."""
    where = _candidates("e", entries, vendor)
    if vendor == "sqlite":
        fts, rows = f"{app_label}_memorysearch_fts", f"{app_label}_memorysearch"
        score = f"-bm25({fts}, 2.0, 1.0)"
        return (
            f"SELECT 0 AS part, {score} AS rank, e.scope, e.key, e.value FROM {fts} "  # noqa: S608
            f"JOIN {rows} s ON s.id = {fts}.rowid JOIN {entries} e ON e.id = s.entry_id "
            f"WHERE {fts} MATCH %(match)s AND {where} ORDER BY rank DESC LIMIT %(limit)s"
        )
    return (
        "SELECT 0 AS part, ts_rank(e.search, q.query, 1) AS rank, e.scope, e.key, e.value "  # noqa: S608
        f"FROM {entries} e, to_tsquery('english', %(match)s) AS q(query) "
        f"WHERE e.search @@ q.query AND {where} ORDER BY rank DESC LIMIT %(limit)s"
    )


def _similar_sql(entries: str, embeddings: str, vendor: str, pgvector: bool) -> str:
    """Part 1: the entries whose embedding is nearest the query's, nearest first."""
    if vendor == "sqlite":
        similarity = "1 - vec_distance_cosine(v.vector, %(vector)s)"
    elif pgvector:
        similarity = "1 - (v.vector::vector <=> %(vector)s::real[]::vector)"
    else:
        # Unit vectors: their dot product is their cosine similarity.
        similarity = "(SELECT sum(a * b) FROM unnest(v.vector, %(vector)s::real[]) AS t(a, b))"
    return (
        f"SELECT 1 AS part, {similarity} AS rank, e.scope, e.key, e.value "  # noqa: S608
        f"FROM {entries} e JOIN {embeddings} v ON v.entry_id = e.id "
        f"WHERE v.model = %(model)s AND {_candidates('e', entries, vendor)} "
        "ORDER BY rank DESC LIMIT %(limit)s"
    )


def _indexed_by(vendor: str, owner: str) -> str:
    """SQLite's hint to read a scope's entries newest first through its own index
    (memory_app's ``memory_<owner>_recent``, ``memory_scope_updated``)."""
    if vendor != "sqlite":
        return ""
    index = "memory_scope_updated" if owner == "scope" else f"memory_{owner}_recent"
    return f"INDEXED BY {index} "


def _recent_sql(entries: str, vendor: str, limit: str) -> str:
    """Part 2: the most recently updated entries, newest first, each scope read
    newest first through its own (owner, updated_at) index, at most ``limit``."""
    live, visible = _live("e", vendor), _visible("e", entries, vendor)
    owners = {
        "session": "e.session_id = %(session)s",
        "user": "e.user_id = %(user)s",
        "agent": "e.agent = %(agent)s",
        "global": "TRUE" if vendor == "postgresql" else "1",
    }
    # SQLite would read an agent's entries through the index of every scope's.
    indexes = {"session": "session", "user": "user", "agent": "agent", "global": "scope"}
    branches = " UNION ALL ".join(
        f"SELECT * FROM (SELECT e.scope, e.key, e.value, e.updated_at FROM {entries} e "  # noqa: S608
        f"{_indexed_by(vendor, indexes[scope])}"
        f"WHERE e.scope = '{scope}' AND {owner} AND {live}"
        f"{'' if scope == 'session' else f' AND {visible}'} "
        f"ORDER BY e.updated_at DESC LIMIT {limit}) AS {scope}_recent"
        for scope, owner in owners.items()
    )
    # Ranked by position: newest first, then by key.
    position = "-ROW_NUMBER() OVER (ORDER BY updated_at DESC, key)"
    return (
        f"SELECT * FROM (SELECT 2 AS part, {position} AS rank, scope, key, value "  # noqa: S608
        f"FROM ({branches}) AS recent ORDER BY updated_at DESC, key LIMIT {limit}) AS newest"
    )


@functools.cache
def _ranked_sql(
    entry_model: type[models.Model],
    embedding_model: type[models.Model],
    vendor: str,
    parts: tuple[bool, bool, bool],
    pgvector: bool,
) -> str:
    quote = connections[DEFAULT_DB_ALIAS].ops.quote_name
    entries = quote(entry_model._meta.db_table)
    matching, similar, recent = parts
    selects, head = [], ""
    if matching:
        head = (
            f"WITH matching AS MATERIALIZED "
            f"({_matching_sql(entries, entry_model._meta.app_label, vendor)}) "
        )
        selects.append("SELECT * FROM matching")
    if similar:
        similar_sql = _similar_sql(entries, quote(embedding_model._meta.db_table), vendor, pgvector)
        selects.append(f"SELECT * FROM ({similar_sql}) AS p1")  # noqa: S608
    if recent:
        # The newest facts fill what the matching ones leave of the run's facts.
        limit = "%(recent)s"
        if matching:
            floor = "max" if vendor == "sqlite" else "GREATEST"
            limit = f"{floor}(0, %(recent)s - (SELECT count(*) FROM matching))"  # noqa: S608
        selects.append(f"SELECT * FROM ({_recent_sql(entries, vendor, limit)}) AS p2")  # noqa: S608
    return f"{head}{' UNION ALL '.join(selects)} ORDER BY part, rank DESC, key"


def _fts_match(vendor: str, terms: Sequence[str]) -> str:
    """The query text, any of the words: an FTS5 expression on SQLite (each word
    quoted, so that none is read as an operator), a ``to_tsquery`` disjunction on
    PostgreSQL (the words are letters and digits only)."""
    if vendor == "sqlite":
        return " OR ".join(f'"{term}"' for term in terms)
    return " | ".join(terms)


@functools.cache
def _has_pgvector(database: str) -> bool:
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1 FROM pg_extension WHERE extname = 'vector'")
        return cursor.fetchone() is not None


class RankedMemory(NamedTuple):
    """What :func:`memory_ranked_rows` found, each list best first, as (scope, key,
    value): entries whose words match, entries whose embedding is nearest, and the
    most recently updated entries."""

    matching: list[tuple[str, str, Any]]
    similar: list[tuple[str, str, Any]]
    recent: list[tuple[str, str, Any]]


def memory_ranked_rows(
    entry_model: type[models.Model],
    embedding_model: type[models.Model],
    *,
    session_id: UUID | None,
    owner_id: int,
    agent: str,
    terms: Sequence[str],
    limit: int,
    recent: int = 0,
    vector: Sequence[float] | None = None,
    embedder: str = "",
) -> RankedMemory:
    """The live entries a run in the session may be told, ranked three ways, in one
    statement: at most ``limit`` whose key or value contains any of ``terms``
    (FTS5's bm25 on SQLite, ``ts_rank`` on PostgreSQL), at most ``limit`` whose
    ``embedder`` embedding is nearest ``vector`` (sqlite-vec; pgvector, or the dot
    product of the stored arrays without it), and at most ``recent`` of the most
    recently updated. Only entries the session reads and no more specific scope
    hides are candidates. With no session (``None``), the candidates are those of
    the user ``owner_id``, of ``agent`` and the global ones.

    Each ranking is read through an index: the full-text index, the owners' (owner,
    key) and (owner, updated_at) indexes, so the cost follows what matches and the
    limits, not the size of the memory. The vector ranking compares every vector of
    the session's owners."""
    db = connections[DEFAULT_DB_ALIAS]
    parts = (bool(terms), vector is not None and bool(embedder), recent > 0)
    if not any(parts):
        return RankedMemory([], [], [])
    pgvector = db.vendor == "postgresql" and parts[1] and _has_pgvector(db.settings_dict["NAME"])
    params: dict[str, Any] = {
        "session": _prep(entry_model, "session_id", session_id),
        "user": owner_id,
        "agent": agent,
        "limit": limit,
        "recent": recent,
    }
    if parts[0]:
        params["match"] = _fts_match(db.vendor, terms)
    if parts[1] and vector is not None:
        params["model"] = embedder
        params["vector"] = _vector_param(db.vendor, vector)
    with db.cursor() as cursor:
        cursor.execute(
            _ranked_sql(entry_model, embedding_model, db.vendor, parts, pgvector), params
        )
        rows = cursor.fetchall()
    found = RankedMemory([], [], [])
    for part, rank, scope, key, value in rows:
        # A vector pointing away from the query's (or across it) is no match.
        if part != 1 or rank > 0:
            found[part].append((scope, key, json_of(value)))
    return found


def _vector_param(vendor: str, vector: Sequence[float]) -> Any:
    if vendor == "sqlite":
        return struct.pack(f"<{len(vector)}f", *vector)
    return [float(x) for x in vector]


def memory_embedding_store(
    embedding_model: type[models.Model], *, entry_id: UUID, model: str, vector: Sequence[float]
) -> None:
    """Set the embedding of one entry (replacing any, of any model), in one
    statement. Call it inside the transaction that wrote the entry."""
    db = connections[DEFAULT_DB_ALIAS]
    table = _table(embedding_model)
    entry = _prep(embedding_model, "entry_id", entry_id)
    with db.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {table} (entry_id, model, vector) VALUES (%s, %s, %s) "  # noqa: S608
            "ON CONFLICT (entry_id) DO UPDATE SET model = excluded.model, vector = excluded.vector",
            [entry, model, _vector_param(db.vendor, vector)],
        )


def memory_embedding_delete(embedding_model: type[models.Model], *, entry_id: UUID) -> None:
    """Remove the embedding of one entry (its value changed and no new one came)."""
    entry = _prep(embedding_model, "entry_id", entry_id)
    with connection.cursor() as cursor:
        cursor.execute(f"DELETE FROM {_table(embedding_model)} WHERE entry_id = %s", [entry])  # noqa: S608


# Conversation branches


def branch_walk(
    run_model: type[models.Model],
    summary_model: type[models.Model],
    *,
    start: UUID,
    limit: int,
    past_summaries: bool = False,
) -> list[tuple[UUID, bool]]:
    """The run ``start`` and the runs before it on its branch, newest first, as
    (run id, whether a history summary covers the branch through it): at most
    ``limit`` runs, and none past the first one a summary covers (that one is the
    last row) unless ``past_summaries``. One statement, whatever the session's
    length."""
    runs, summaries = _table(run_model), _table(summary_model)
    quote = connection.ops.quote_name
    pk, previous = quote("id"), quote("previous_run_id")
    through = quote("through_run_id")
    covered = f"EXISTS (SELECT 1 FROM {summaries} s WHERE s.{through} = r.{pk})"  # noqa: S608
    sql = (
        f"WITH RECURSIVE chain(id, previous, covered, depth) AS ("  # noqa: S608
        f" SELECT r.{pk}, r.{previous}, {covered}, 0 FROM {runs} r WHERE r.{pk} = %s"
        f" UNION ALL"
        f" SELECT r.{pk}, r.{previous}, {covered}, chain.depth + 1"
        f" FROM {runs} r JOIN chain ON r.{pk} = chain.previous"
        f" WHERE chain.depth + 1 < %s{'' if past_summaries else ' AND NOT chain.covered'}"
        f") SELECT id, covered FROM chain ORDER BY depth"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, [_prep(run_model, "id", start), limit])
        return [(uuid_of(row[0]), bool(row[1])) for row in cursor.fetchall()]


# Reports


def add_to_rows(
    model: type[models.Model],
    key: Sequence[str],
    rows: Sequence[tuple[Sequence[Any], Sequence[Any]]],
    amounts: Sequence[str],
    *,
    batch: int = 500,
) -> None:
    """Add to counter rows of ``model``: each of ``rows`` is a key (the values of
    the fields ``key`` names, a unique constraint of the model) and the numbers to
    add to its fields ``amounts``. A row not there is inserted with them. One
    ``INSERT ... ON CONFLICT DO UPDATE`` per ``batch`` rows; rows in the same order
    lock in the same order, so concurrent writers cannot deadlock."""
    fields = [_field(model, name) for name in (*key, *amounts)]
    quote = connection.ops.quote_name
    table = _table(model)
    columns = ", ".join(quote(f.column) for f in fields)
    target = ", ".join(quote(f.column) for f in fields[: len(key)])
    added = ", ".join(
        f"{quote(f.column)} = {table}.{quote(f.column)} + EXCLUDED.{quote(f.column)}"
        for f in fields[len(key) :]
    )
    row_marks = "(" + ", ".join(["%s"] * len(fields)) + ")"
    with connection.cursor() as cursor:
        for start in range(0, len(rows), batch):
            chunk = rows[start : start + batch]
            params = [
                f.get_db_prep_save(value, connection)
                for keys, numbers in chunk
                for f, value in zip(fields, (*keys, *numbers), strict=True)
            ]
            cursor.execute(
                f"INSERT INTO {table} ({columns}) VALUES "  # noqa: S608
                f"{', '.join([row_marks] * len(chunk))} "
                f"ON CONFLICT ({target}) DO UPDATE SET {added}",
                params,
            )


# Reads compiled once


class Slot(models.Expression):
    """A value a :class:`Prepared` read is given each time it runs, where its
    queryset would have a constant: ``filter(session_id=Slot("session",
    models.UUIDField()))``. ``output_field`` adapts the value as a column of its kind
    (a UUID as hex text on SQLite)."""

    def __init__(self, name: str, output_field: models.Field[Any, Any]) -> None:
        super().__init__(output_field=output_field)
        self.name = name

    def as_sql(self, compiler: Any, connection: Any) -> tuple[str, list[Any]]:
        return "%s", [self]


@functools.cache
def attnames(model: type[models.Model]) -> list[str]:
    """The attribute names of ``model``'s columns, in the order ``Model.from_db``
    takes their values: a :class:`Prepared` read of whole rows reads these."""
    return [field.attname for field in model._meta.concrete_fields]


class _Compiled(NamedTuple):
    sql: str
    params: tuple[Any, ...]
    # For each column that needs it, its position and how the ORM converts it.
    converters: tuple[tuple[int, tuple[Any, ...], Any], ...]


class Prepared:
    """A read written with the ORM whose statement Django builds once per process,
    then runs with new values: ``build`` returns the queryset (``values_list`` of
    the columns it reads), with a :class:`Slot` for each value that changes from one
    call to the next; :meth:`rows` runs it.

    Building and compiling a small queryset costs several times what running its
    statement does on SQLite (0.3-0.5 ms against 0.03-0.05 ms on a small machine):
    the reads of every API request (its token) and of a run's start (its session,
    the session's head and open runs, the agent's version, the run created) are made
    this way, and a run start took half the CPU it did (bench/capacity.py). What
    ``build`` puts in besides its slots is fixed once compiled: no clock, no setting
    that may change, no user."""

    def __init__(self, build: Callable[[], models.QuerySet[Any, Any]]) -> None:
        self._build = build
        self._compiled: dict[str, _Compiled] = {}

    def _compile(self, db: Any) -> _Compiled:
        compiler = self._build().query.get_compiler(connection=db)
        sql, params = compiler.as_sql()
        columns = [column for column, _, _ in compiler.select[: compiler.col_count]]
        converters = tuple(
            (position, tuple(found), expression)
            for position, (found, expression) in compiler.get_converters(columns).items()
        )
        compiled = _Compiled(sql, tuple(params), converters)
        self._compiled[db.vendor] = compiled
        return compiled

    def rows(self, **values: Any) -> list[tuple[Any, ...]]:
        """The rows the read finds with ``values`` in its slots, as the queryset
        would give them."""
        db = connections[DEFAULT_DB_ALIAS]
        compiled = self._compiled.get(db.vendor) or self._compile(db)
        params = [
            param.output_field.get_db_prep_value(values[param.name], db)
            if isinstance(param, Slot)
            else param
            for param in compiled.params
        ]
        with db.cursor() as cursor:
            cursor.execute(compiled.sql, params)
            rows = cursor.fetchall()
        if not compiled.converters:
            return [tuple(row) for row in rows]
        converted = []
        for row in rows:
            values_of = list(row)
            for position, found, expression in compiled.converters:
                value = values_of[position]
                for convert in found:
                    value = convert(value, expression, db)
                values_of[position] = value
            converted.append(tuple(values_of))
        return converted

    def first(self, **values: Any) -> tuple[Any, ...] | None:
        """The first row :meth:`rows` finds, or ``None``."""
        found = self.rows(**values)
        return found[0] if found else None


def user_named(user_id: Any, name: str) -> Any:
    """The user ``user_id`` as a read of only their id and name (``USERNAME_FIELD``)
    gives one: for a row read with :class:`Prepared` joined to its user's name."""
    user_model = get_user_model()
    columns = [user_model._meta.pk.attname, user_model.USERNAME_FIELD]
    return user_model.from_db(DEFAULT_DB_ALIAS, columns, (user_id, name))


def prefetched(instance: models.Model, name: str, rows: list[Any]) -> None:
    """Give ``instance`` the rows of its reverse relation ``name`` (``run.turns``)
    as ``prefetch_related`` leaves them: ``instance.<name>.all()`` then answers from
    ``rows`` without a query. For rows read with :class:`Prepared`."""
    relation = instance._meta.get_field(name)
    related = relation.related_model
    if not (isinstance(related, type) and issubclass(related, models.Model)):
        raise TypeError(f"{name} leads to no model.")
    queryset = related._default_manager.all()
    queryset._result_cache = rows
    queryset._prefetch_done = True  # type: ignore[attr-defined]
    cache = instance.__dict__.setdefault("_prefetched_objects_cache", {})
    cache[relation.cache_name] = queryset  # type: ignore[union-attr]


def plan_with_values() -> None:
    """For the rest of the caller's transaction, have PostgreSQL plan every statement
    for the values it is given (nothing to do on SQLite).

    goaai's connections prepare a statement they have run a few times (see
    ``DATABASE_PREPARED``), and PostgreSQL may then plan it once for any values. For
    the steps of a run that saves planning; for a report over a time range and
    filters the one plan can be the wrong one for every value: the dashboard's count
    of one user's open runs went from 0.1 s to 1-1.6 s at a million runs from its
    eleventh view on a connection, walking every run of the range."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SET LOCAL plan_cache_mode = force_custom_plan")


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
