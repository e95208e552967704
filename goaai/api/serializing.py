"""A model serializer whose fields are worked out from its model once, and whose
times are written in UTC without asking for the current time zone each time; a
serializer whose declared fields are copied, not made again.

DRF's ``ModelSerializer`` builds its fields from the model's fields at every
instantiation: for a run with its turns and tool calls that is a quarter of the
request (three serializers, about sixty fields, each looked up and built again).
:class:`ModelSerializer` builds them the first time and gives each instance copies:
a shallow one of a plain field (a new object, the arguments it was made with
shared, as they are only read), a deep one, as DRF makes of every declared field,
of a field with fields inside it (a nested serializer, a list of related ids), whose
inner fields are bound to it.

The API answers in UTC (the pages' time zone middleware leaves it alone, and the
server's zone is UTC). DRF's ``DateTimeField`` without a zone of its own looks the
current one up for every value it writes, a third of a page of sessions;
:class:`UtcDateTimeField` has UTC as its own, and writes the same text.
"""

from __future__ import annotations

import copy
import datetime as dt
from typing import Any

from django.db import models
from rest_framework import serializers
from rest_framework.relations import ManyRelatedField

Field = serializers.Field[Any, Any, Any, Any]
_NESTING = (
    serializers.BaseSerializer,
    ManyRelatedField,
    serializers.ListField,
    serializers.DictField,
)


def _copy(field: Field) -> Field:
    if isinstance(field, _NESTING):
        return copy.deepcopy(field)
    # What copy.copy makes of a field (a new object with the same attributes),
    # without its general protocol: a quarter of the cost.
    clone: Field = object.__new__(type(field))
    clone.__dict__.update(field.__dict__)
    return clone


def utc_text(value: dt.datetime | None) -> str | None:
    """A time as the API writes it (as :class:`UtcDateTimeField` does): ISO 8601 in
    UTC, ``Z`` for its offset."""
    if value is None:
        return None
    text = value.astimezone(dt.UTC).isoformat()
    return text[:-6] + "Z" if text.endswith("+00:00") else text


class UtcDateTimeField(serializers.DateTimeField):
    """A ``DateTimeField`` in UTC, the API's time zone, as its own."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("default_timezone", dt.UTC)
        super().__init__(**kwargs)


class Serializer(serializers.Serializer):  # type: ignore[type-arg]
    """``Serializer`` whose instances copy its declared fields as
    :class:`ModelSerializer` copies its built ones, where DRF makes each anew from
    the arguments it was declared with: for the bodies read on every request that
    starts a run."""

    def get_fields(self) -> dict[str, Field]:
        return {name: _copy(field) for name, field in self._declared_fields.items()}


class ModelSerializer(serializers.ModelSerializer):  # type: ignore[type-arg]
    """``ModelSerializer``, its fields built once per class, its times in UTC
    (:class:`UtcDateTimeField`). A subclass whose fields depend on the instance or
    the request overrides ``get_fields`` itself."""

    serializer_field_mapping = {
        **serializers.ModelSerializer.serializer_field_mapping,
        models.DateTimeField: UtcDateTimeField,
    }

    def get_fields(self) -> dict[str, Field]:
        cls = type(self)
        built: dict[str, Field] | None = cls.__dict__.get("_fields_built")
        if built is None:
            built = super().get_fields()
            cls._fields_built = built  # type: ignore[attr-defined]
        return {name: _copy(field) for name, field in built.items()}
