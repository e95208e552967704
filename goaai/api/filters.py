"""Filters every list shares: a creation time range and JSON key/value matches."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import re
from typing import Any, ClassVar

import django_filters
from django.db import connection
from django.db.models import Q, QuerySet
from django.db.models.fields.json import KeyTransform
from rest_framework.exceptions import ValidationError

_KEY = re.compile(r"^[A-Za-z0-9_\-]{1,100}$")


def json_values(raw: str) -> list[Any]:
    """What a query-string value may mean in JSON: always the string itself, and
    also the number, boolean or null it spells (``?metadata.tries=3`` matches 3)."""
    values: list[Any] = [raw]
    try:
        parsed = json.loads(raw)
    except (ValueError, RecursionError):  # not JSON, or an array nested past the stack
        return values
    if parsed is None or isinstance(parsed, bool | int | float):
        values.append(parsed)
    return values


def filter_json_key(
    queryset: QuerySet[Any], field: str, key: str, raw: str, param: str
) -> QuerySet[Any]:
    """Rows whose JSON ``field`` has ``key`` equal to ``raw`` (see :func:`json_values`)."""
    if not _KEY.match(key):
        raise ValidationError(
            {param: ["Keys are 1 to 100 letters, digits, '_' or '-'."]}, code="invalid"
        )
    if "\x00" in raw:
        raise ValidationError({param: ["NUL characters are not allowed."]}, code="invalid")
    return json_key_equals(queryset, field, key, json_values(raw))


def json_key_equals(
    queryset: QuerySet[Any], field: str, key: str, values: list[Any]
) -> QuerySet[Any]:
    """Rows whose JSON ``field`` has ``key`` equal to one of ``values`` (scalars).

    On PostgreSQL this is JSON containment (``field @> {key: value}``), which a GIN
    index on the field can answer (runs' labels have one); the planner has no
    statistics for a key's value, and compared key by key it read every row.
    Elsewhere the key's value is compared."""
    match = Q()
    if connection.vendor == "postgresql":
        for value in values:
            match |= json_key_q(field, key, value)
        return queryset.filter(match)
    # An alias of its own per key (hyphens are not allowed in alias names).
    alias = f"_json_{field}_{hashlib.blake2s(key.encode(), digest_size=6).hexdigest()}"
    for value in values:
        match |= Q(**{alias: value})
    return queryset.alias(**{alias: KeyTransform(key, field)}).filter(match)


def json_key_q(field: str, key: str, value: Any) -> Q:
    """A condition: JSON ``field`` has ``key`` equal to ``value`` (a scalar), as
    containment on PostgreSQL (see :func:`json_key_equals`). ``key`` must be a plain
    name (letters, digits, ``_``, ``-``), as the filters check."""
    if connection.vendor == "postgresql":
        return Q(**{f"{field}__contains": {key: value}})
    return Q(**{f"{field}__{key}": value})


class UtcIsoDateTimeFilter(django_filters.IsoDateTimeFilter):
    """An ISO 8601 moment compared in UTC; one the database cannot hold (a year 1
    or 9999 moment pushed over the edge by its offset, an offset past ±16 h) is a
    400, not a database error."""

    def filter(self, qs: QuerySet[Any], value: Any) -> QuerySet[Any]:
        if value is not None:
            try:
                value = value.astimezone(dt.UTC)
                if not dt.MINYEAR < value.year < dt.MAXYEAR:
                    raise OverflowError
            except (OverflowError, ValueError):
                raise ValidationError(
                    {self.field_name_in_query(): ["This moment is out of range."]}, code="invalid"
                ) from None
        return super().filter(qs, value)

    def field_name_in_query(self) -> str:
        parent = getattr(self, "parent", None)
        for name, candidate in getattr(parent, "filters", {}).items():
            if candidate is self:
                return str(name)
        return str(self.field_name)


class FilterSet(django_filters.FilterSet):
    """A ``FilterSet`` whose form class is made once per class: django-filter makes
    a new one (a class, and a form field for each filter) for every request, a
    tenth of a list's request. The filters here depend on nothing of the request,
    and each form made from the class gets copies of its fields, as Django's forms
    do."""

    def get_form_class(self) -> type[Any]:
        cls = type(self)
        made: type[Any] | None = cls.__dict__.get("_form_class")
        if made is None:
            made = super().get_form_class()
            cls._form_class = made
        return made


class CreatedRangeFilterSet(FilterSet):
    """``created_after`` / ``created_before`` (ISO 8601), and ``metadata.<key>=<value>``
    for models with a ``metadata`` field (set ``metadata_field``)."""

    created_after = UtcIsoDateTimeFilter(
        field_name="created_at", lookup_expr="gte", label="Created at or after (ISO 8601)."
    )
    created_before = UtcIsoDateTimeFilter(
        field_name="created_at", lookup_expr="lt", label="Created before (ISO 8601)."
    )
    metadata_field: ClassVar[str | None] = None

    def filter_queryset(self, queryset: QuerySet[Any]) -> QuerySet[Any]:
        queryset = super().filter_queryset(queryset)
        if self.metadata_field is None:
            return queryset
        for param, values in self.data.lists():
            if not param.startswith("metadata."):
                continue
            key = param.removeprefix("metadata.")
            for raw in values:
                queryset = filter_json_key(queryset, self.metadata_field, key, raw, param)
        return queryset
