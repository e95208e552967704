"""Hand-written SQL for the statements the turn loop runs at every step.

The ORM costs several hundred microseconds per statement on small machines,
mostly building SQL; a run of a few turns makes dozens of writes, each in its own
transaction. The services therefore run these few statements as plain SQL on the
driver's own cursor, inside Django's transactions (``atomic``, ``on_commit`` work
as usual). Such statements do not appear in Django's query log, so query-count
tests count them through :data:`statements`. Everything else uses the ORM.

Templates use ``%s`` for a value and ``%j`` for a JSON value; :func:`execute`
adapts values the way Django stores them (SQLite: UUIDs as hex, datetimes as naive
UTC text; PostgreSQL: native types, JSON cast to jsonb).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import functools
import json
import re
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, NoReturn, TypeVar
from uuid import UUID

from django.db import DEFAULT_DB_ALIAS, connection, connections
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models import Model

M = TypeVar("M", bound=Model)


class _Counter:
    """How many lean statements this process has run (for query-count tests)."""

    def __init__(self) -> None:
        self.count = 0


statements = _Counter()


@functools.cache
def vendor() -> str:
    """The database vendor; one database per process, so asked once."""
    return str(connection.vendor)


_thread = threading.local()


def thread_connection() -> BaseDatabaseWrapper:
    """Django's default connection for the calling thread (not necessarily open).

    Django's handler finds it through an asgiref ``Local`` at every access, which
    costs about a microsecond; the hot paths ask once per step, and a thread's
    connection object stays the same for the thread's life (it only opens, closes
    and reopens), so it is remembered per thread. Under a running event loop, where
    Django keeps one per task, it is looked up as usual.
    """
    if asyncio._get_running_loop() is None:
        try:
            db: BaseDatabaseWrapper = _thread.db
        except AttributeError:
            db = _thread.db = connections[DEFAULT_DB_ALIAS]
        return db
    return connections[DEFAULT_DB_ALIAS]


def connected() -> BaseDatabaseWrapper:
    """:func:`thread_connection`, opened if it is not. Django's checks apply when it
    opens it or when an event loop runs in this thread (which is refused)."""
    db = thread_connection()
    if db.connection is None or asyncio._get_running_loop() is not None:
        db.ensure_connection()
    return db


def driver_cursor(db: BaseDatabaseWrapper) -> Any:
    """A new driver cursor on ``db``'s open connection. On PostgreSQL it binds
    parameters on the server, so that statements run again and again are prepared
    once (Django's own cursors bind on the client)."""
    if vendor() == "postgresql":
        import psycopg

        return psycopg.Cursor(db.connection)
    return db.connection.cursor()


@contextmanager
def cursor() -> Iterator[Any]:
    """The driver's cursor on Django's current connection (opened if needed)."""
    db = connected()
    raw = driver_cursor(db)
    try:
        yield raw
    finally:
        raw.close()


# JSON as the lean statements store it; one encoder, since json.dumps builds a new
# one for every call that passes an option.
_json = json.JSONEncoder(default=str).encode


# The last datetime formatted and its text: a step stamps several columns and its
# events with one instant, which is then formatted once. (A tuple, replaced whole,
# so that threads never see one datetime with another's text.)
_last_datetime: tuple[dt.datetime | None, str] = (None, "")


def sqlite_datetime(value: dt.datetime) -> str:
    """A datetime as Django stores it in SQLite: naive UTC text."""
    global _last_datetime
    last = _last_datetime
    if last[0] is value:
        return last[1]
    utc = value if value.tzinfo is dt.UTC else value.astimezone(dt.UTC)
    text = utc.replace(tzinfo=None).isoformat(sep=" ")
    _last_datetime = (value, text)
    return text


def _hex(value: UUID) -> str:
    return value.hex


def _generic(value: Any, sqlite: bool) -> Callable[[Any], Any] | None:
    """How to pass a value of ``type(value)`` to the driver (``None``: as it is)."""
    if isinstance(value, str) and type(value) is not str:
        # Status and event-type enums are str subclasses: as plain text, the
        # drivers bind them without first looking for an adapter of their own.
        return str.__str__
    if isinstance(value, bool | int | float | str | bytes) or value is None:
        return None
    if isinstance(value, dict | list):
        return _json
    if sqlite and isinstance(value, UUID):
        return _hex
    if sqlite and isinstance(value, dt.datetime):
        return sqlite_datetime
    return None


# How each type is passed to the driver, the way Django stores it, by exact type:
# this runs for every value of every statement. A type not seen yet goes to the
# table's "learn" entry, which works out its handling once and remembers it (a
# type's handling never changes).
_Adapter = Callable[[Any], Any] | None
_NONE = type(None)


def _table(sqlite: bool) -> dict[Any, _Adapter]:
    table: dict[Any, _Adapter] = {str: None, int: None, float: None, bool: None, _NONE: None}
    table.update({dict: _json, list: _json})
    if sqlite:
        table.update({UUID: _hex, dt.datetime: sqlite_datetime})

    def learn(value: Any) -> Any:
        convert = table[type(value)] = _generic(value, sqlite)
        return value if convert is None else convert(value)

    table[_LEARN] = learn
    return table


_LEARN = object()
_ADAPTERS = {True: _table(True), False: _table(False)}


def adapt(value: Any, *, sqlite: bool) -> Any:
    """``value`` as the driver takes it, stored the way Django stores it."""
    table = _ADAPTERS[sqlite]
    convert = table.get(type(value), table[_LEARN])
    return value if convert is None else convert(value)


@functools.cache
def _prepared(template: str) -> tuple[str, tuple[bool, ...], bool]:
    """``template`` as the driver's SQL, which placeholders take JSON, and whether
    the database is SQLite. The SQL text of a template never changes, so the
    driver's own statement cache finds it again."""
    sqlite = vendor() == "sqlite"
    if sqlite:
        sql = template.replace("%j", "?").replace("%s", "?")
    else:
        sql = template.replace("%j", "%s::jsonb")
    return sql, tuple(mark == "%j" for mark in re.findall(r"%[sj]", template)), sqlite


def _values(json_positions: tuple[bool, ...], values: Sequence[Any], sqlite: bool) -> list[Any]:
    # A JSON placeholder always gets JSON text, as the ORM's JSONField sends it: a
    # str, a number or True is a JSON value too ("hello" is stored as "\"hello\"").
    # None stays SQL NULL.
    table = _ADAPTERS[sqlite]
    get, learn = table.get, table[_LEARN]
    return [
        (None if value is None else _json(value))
        if is_json
        else (value if (convert := get(type(value), learn)) is None else convert(value))
        for is_json, value in zip(json_positions, values, strict=True)
    ]


def _raise_as_django(error: BaseException) -> NoReturn:
    # Driver errors become Django's (IntegrityError, OperationalError, ...), as with
    # the ORM, so callers catch one family of exceptions; Django's wrapper also notes
    # errors that leave the connection unusable.
    with thread_connection().wrap_database_errors:
        raise error
    raise error  # pragma: no cover - the wrapper re-raises every driver error.


def execute(cursor: Any, template: str, values: Sequence[Any]) -> Any:
    """Run ``template`` (``%s`` a value, ``%j`` a JSON value) with ``values``."""
    sql, json_positions, sqlite = _prepared(template)
    statements.count += 1
    params = _values(json_positions, values, sqlite)
    try:
        cursor.execute(sql, params)
    except Exception as error:
        _raise_as_django(error)
    return cursor


def executemany(cursor: Any, template: str, rows: Sequence[Sequence[Any]]) -> None:
    """Run ``template`` once for each of ``rows``, as one statement."""
    sql, json_positions, sqlite = _prepared(template)
    statements.count += 1
    params = [_values(json_positions, row, sqlite) for row in rows]
    try:
        cursor.executemany(sql, params)
    except Exception as error:
        _raise_as_django(error)


def driver_sql(template: str) -> str:
    """``template`` as the driver's SQL (for :func:`run`)."""
    return _prepared(template)[0]


def json_text(value: Any) -> str | None:
    """A value as a JSON placeholder takes it (``None`` is SQL NULL)."""
    return None if value is None else _json(value)


def run(cursor: Any, sql: str, rows: Sequence[Sequence[Any]]) -> None:
    """Run the driver's ``sql`` once for each of ``rows`` of values already adapted
    (see :func:`adapt`, :func:`json_text`), as one statement: for the statements
    every step runs, whose callers adapt their few values directly."""
    statements.count += 1
    try:
        if len(rows) == 1:
            cursor.execute(sql, rows[0])
        else:
            cursor.executemany(sql, rows)
    except Exception as error:
        _raise_as_django(error)


def command(cursor: Any, sql: str) -> None:
    """A transaction-control statement (BEGIN, COMMIT, ROLLBACK) on the driver."""
    try:
        cursor.execute(sql)
    except Exception as error:
        _raise_as_django(error)


def uuid_of(value: Any) -> UUID:
    """A UUID column as read back (SQLite gives hex text)."""
    return value if isinstance(value, UUID) else UUID(hex=value)


def json_of(value: Any) -> Any:
    """A JSON column as read back (text on both vendors under Django)."""
    return json.loads(value) if isinstance(value, str | bytes) else value


def datetime_of(value: Any) -> dt.datetime | None:
    """A datetime column as read back, aware."""
    if value is None:
        return None
    parsed = dt.datetime.fromisoformat(value) if isinstance(value, str) else value
    return parsed.replace(tzinfo=dt.UTC) if parsed.tzinfo is None else parsed


def _converter(field: Any) -> Any:
    from django.db import models

    target = field.target_field if field.is_relation else field
    if isinstance(target, models.UUIDField):
        return lambda v: None if v is None else uuid_of(v)
    if isinstance(field, models.JSONField):
        return lambda v: None if v is None else json_of(v)
    if isinstance(field, models.DateTimeField):
        return datetime_of
    if isinstance(field, models.BooleanField):
        return lambda v: None if v is None else bool(v)
    return None


@functools.cache
def _layout(model: type[Model]) -> tuple[str, list[str], list[Any]]:
    fields = model._meta.concrete_fields
    columns = ", ".join(connection.ops.quote_name(f.column) for f in fields)
    return columns, [f.attname for f in fields], [_converter(f) for f in fields]


def columns(model: type[Model]) -> str:
    """Every column of ``model``, for a SELECT or RETURNING list that :func:`load` reads."""
    return _layout(model)[0]


def load(model: type[M], row: Sequence[Any]) -> M:
    """A model instance from a row of :func:`columns`, converted as the ORM would."""
    _, names, converters = _layout(model)
    values = [convert(v) if convert else v for convert, v in zip(converters, row, strict=True)]
    return model.from_db(DEFAULT_DB_ALIAS, names, values)


# Defaults of these types are shared safely between rows: they cannot be changed.
_IMMUTABLE = (str, int, float, bool, bytes, type(None))


def _default(field: Any) -> tuple[Any, Callable[[], Any] | None]:
    """A field's default as (value, None) when it is one immutable value, or as
    (None, factory) when each row needs a fresh one (``dict``, ``uuid4``)."""
    if field.has_default() and callable(field.default):
        return None, field.default
    value = field.get_default()
    if type(value) in _IMMUTABLE:
        return value, None
    return None, field.get_default


@functools.cache
def _insert_layout(
    model: type[Model],
) -> tuple[str, list[tuple[str, Any, Callable[[], Any] | None]]]:
    fields = model._meta.concrete_fields
    marks = ", ".join("%j" if f.get_internal_type() == "JSONField" else "%s" for f in fields)
    sql = f"INSERT INTO {model._meta.db_table} ({columns(model)}) VALUES ({marks})"  # noqa: S608
    return sql, [(f.attname, *_default(f)) for f in fields]


def create(cursor: Any, model_class: type[M], /, **values: Any) -> M:
    """INSERT a new row of ``model_class`` (fields not given take their defaults)
    and return it as a saved instance, without the ORM's per-save work."""
    sql, layout = _insert_layout(model_class)
    row = [
        values[name] if name in values else (value if factory is None else factory())
        for name, value, factory in layout
    ]
    execute(cursor, sql, row)
    # Positional arguments take Django's fast construction path.
    obj = model_class(*row)
    obj._state.adding = False
    obj._state.db = DEFAULT_DB_ALIAS
    return obj
