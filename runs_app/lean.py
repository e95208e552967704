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

import datetime as dt
import functools
import json
import re
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, TypeVar
from uuid import UUID

from django.db import connection
from django.db.models import Model

M = TypeVar("M", bound=Model)


@functools.cache
def _sql(vendor: str, template: str) -> str:
    if vendor == "sqlite":
        return template.replace("%j", "?").replace("%s", "?")
    return template.replace("%j", "%s::jsonb")


class _Counter:
    """How many lean statements this process has run (for query-count tests)."""

    def __init__(self) -> None:
        self.count = 0


statements = _Counter()


@contextmanager
def cursor() -> Iterator[Any]:
    """The driver's cursor on Django's current connection (opened if needed). On
    PostgreSQL it binds parameters on the server, so that statements run again and
    again are prepared once (Django's own cursors bind on the client)."""
    connection.ensure_connection()
    if connection.vendor == "postgresql":
        import psycopg

        raw = psycopg.Cursor(connection.connection)
    else:
        raw = connection.connection.cursor()
    try:
        yield raw
    finally:
        raw.close()


def _json(value: Any) -> str:
    return json.dumps(value, default=str)


def _sqlite_datetime(value: dt.datetime) -> str:
    return value.astimezone(dt.UTC).replace(tzinfo=None).isoformat(sep=" ")


# How each type is passed to the driver, the way Django stores it; looked up by exact
# type first, since this runs for every value of every statement.
_ADAPTERS: dict[bool, dict[type, Callable[[Any], Any]]] = {
    True: {UUID: lambda v: v.hex, dt.datetime: _sqlite_datetime, dict: _json, list: _json},
    False: {dict: _json, list: _json},
}
_PLAIN = frozenset({str, int, float, bool, type(None)})


def adapt(value: Any, *, sqlite: bool) -> Any:
    kind = type(value)
    if kind in _PLAIN:
        return value
    convert = _ADAPTERS[sqlite].get(kind)
    if convert is not None:
        return convert(value)
    # Subclasses (status enums are str subclasses, JSON may hold dict subclasses).
    if isinstance(value, dict | list):
        return _json(value)
    if sqlite and isinstance(value, UUID):
        return value.hex
    if sqlite and isinstance(value, dt.datetime):
        return _sqlite_datetime(value)
    return value


@functools.cache
def vendor() -> str:
    """The database vendor; one database per process, so asked once."""
    return str(connection.vendor)


@functools.cache
def _json_positions(template: str) -> tuple[bool, ...]:
    """For each placeholder of ``template`` in order, whether it takes JSON."""
    return tuple(mark == "%j" for mark in re.findall(r"%[sj]", template))


def _values(template: str, values: Sequence[Any], sqlite: bool) -> list[Any]:
    # A JSON placeholder always gets JSON text, as the ORM's JSONField sends it: a
    # str, a number or True is a JSON value too ("hello" is stored as "\"hello\"").
    # None stays SQL NULL.
    return [
        (None if value is None else _json(value)) if is_json else adapt(value, sqlite=sqlite)
        for is_json, value in zip(_json_positions(template), values, strict=True)
    ]


def execute(cursor: Any, template: str, values: Sequence[Any]) -> Any:
    name = vendor()
    statements.count += 1
    # Driver errors become Django's (IntegrityError, OperationalError, ...), as with
    # the ORM, so callers catch one family of exceptions.
    with connection.wrap_database_errors:
        cursor.execute(_sql(name, template), _values(template, values, name == "sqlite"))
    return cursor


def executemany(cursor: Any, template: str, rows: Sequence[Sequence[Any]]) -> None:
    name = vendor()
    sqlite = name == "sqlite"
    statements.count += 1
    with connection.wrap_database_errors:
        cursor.executemany(_sql(name, template), [_values(template, row, sqlite) for row in rows])


def command(cursor: Any, sql: str) -> None:
    """A transaction-control statement (BEGIN, COMMIT, ROLLBACK) on the driver."""
    with connection.wrap_database_errors:
        cursor.execute(sql)


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
    return model.from_db(connection.alias, names, values)


@functools.cache
def _insert_layout(model: type[Model]) -> tuple[str, list[tuple[str, Any]]]:
    fields = model._meta.concrete_fields
    marks = ", ".join("%j" if f.get_internal_type() == "JSONField" else "%s" for f in fields)
    sql = f"INSERT INTO {model._meta.db_table} ({columns(model)}) VALUES ({marks})"  # noqa: S608
    return sql, [(f.attname, f.get_default) for f in fields]


def create(cursor: Any, model_class: type[M], /, **values: Any) -> M:
    """INSERT a new row of ``model_class`` (fields not given take their defaults)
    and return it as a saved instance, without the ORM's per-save work."""
    sql, layout = _insert_layout(model_class)
    row = [values[name] if name in values else default() for name, default in layout]
    execute(cursor, sql, row)
    # Positional arguments take Django's fast construction path.
    obj = model_class(*row)
    obj._state.adding = False
    obj._state.db = connection.alias
    return obj
