"""A model serializer whose fields are worked out from its model once.

DRF's ``ModelSerializer`` builds its fields from the model's fields at every
instantiation: for a run with its turns and tool calls that is a quarter of the
request (three serializers, about sixty fields, each looked up and built again).
:class:`ModelSerializer` builds them the first time and gives each instance copies:
a shallow one of a plain field (a new object, the arguments it was made with
shared, as they are only read), a deep one, as DRF makes of every declared field,
of a field with fields inside it (a nested serializer, a list of related ids), whose
inner fields are bound to it.
"""

from __future__ import annotations

import copy
from typing import Any

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
    return copy.deepcopy(field) if isinstance(field, _NESTING) else copy.copy(field)


class ModelSerializer(serializers.ModelSerializer):  # type: ignore[type-arg]
    """``ModelSerializer``, its fields built once per class. A subclass whose
    fields depend on the instance or the request overrides ``get_fields`` itself."""

    def get_fields(self) -> dict[str, Field]:
        cls = type(self)
        built: dict[str, Field] | None = cls.__dict__.get("_fields_built")
        if built is None:
            built = super().get_fields()
            cls._fields_built = built  # type: ignore[attr-defined]
        return {name: _copy(field) for name, field in built.items()}
