"""Input checks shared by the API's serializers."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any, TypeAlias

from rest_framework import serializers

MAX_JSON_BYTES = 16 * 1024
MAX_LABELS = 32

# Where a node sits in a JSON value: (key or index, where its container sits), or
# None at the top. Linked rather than copied, so that a walk costs the same at
# every depth; see json_path().
JsonPlace: TypeAlias = tuple[str | int, "JsonPlace"] | None


def json_nodes(value: Any) -> Iterator[tuple[Any, int, JsonPlace]]:
    """Every node of a JSON value with its depth (1 for the value itself, 2 for
    what it contains...) and its place, without recursion: a value nested deeper
    than the interpreter's stack is walked like any other. An object's keys come
    too, as strings with the object's own depth and place, each just before the
    value it names."""
    stack: list[tuple[Any, int, JsonPlace]] = [(value, 1, None)]
    while stack:
        node, depth, place = stack.pop()
        yield node, depth, place
        if isinstance(node, dict):
            for key, item in node.items():
                stack.append((item, depth + 1, (key, place)))
                stack.append((key, depth, place))
        elif isinstance(node, list):
            stack.extend((item, depth + 1, (i, place)) for i, item in enumerate(node))


def nested_deeper_than(value: Any, limit: int) -> bool:
    """Whether a JSON value has arrays or objects nested more than ``limit`` deep
    (the value itself is level 1)."""
    return any(
        depth > limit and isinstance(node, dict | list) for node, depth, _ in json_nodes(value)
    )


def json_path(place: JsonPlace) -> str:
    """A place as the API names fields in errors: ``metadata.steps.0.note``."""
    parts: list[str] = []
    while place is not None:
        # A key that is not valid Unicode is shown escaped, so that the error
        # naming it can be encoded.
        parts.append(str(place[0]).encode("utf-8", "backslashreplace").decode())
        place = place[1]
    return ".".join(reversed(parts))


def has_nul(value: Any) -> bool:
    """Whether a JSON value holds a NUL character in a key or a string anywhere
    (PostgreSQL cannot store one in text or JSON)."""
    return any(isinstance(node, str) and "\x00" in node for node, _, _ in json_nodes(value))


def check_no_nul(value: Any, *, what: str) -> Any:
    if has_nul(value):
        raise serializers.ValidationError(
            f"{what} cannot contain NUL characters.", code="null_characters_not_allowed"
        )
    return value


def check_json_object(value: Any, *, what: str, max_bytes: int = MAX_JSON_BYTES) -> dict[str, Any]:
    """A JSON object of at most ``max_bytes`` encoded: metadata and the like."""
    if not isinstance(value, dict):
        raise serializers.ValidationError(f"{what} must be a JSON object.", code="invalid")
    check_no_nul(value, what=what)
    if len(json.dumps(value, ensure_ascii=False).encode()) > max_bytes:
        raise serializers.ValidationError(
            f"{what} is larger than {max_bytes} bytes once encoded.", code="too_large"
        )
    return value


def check_labels(value: Any) -> dict[str, str]:
    """Labels: at most 32 pairs of short strings (policies and filters match them)."""
    if not isinstance(value, dict):
        raise serializers.ValidationError("Labels must be a JSON object.", code="invalid")
    if len(value) > MAX_LABELS:
        raise serializers.ValidationError(f"At most {MAX_LABELS} labels.", code="too_many")
    check_no_nul(value, what="Labels")
    for key, item in value.items():
        if not isinstance(item, str) or not key or len(key) > 100 or len(item) > 200:
            raise serializers.ValidationError(
                "Each label is a key of 1 to 100 characters with a string value of at most 200.",
                code="invalid",
            )
    return dict(value)


class StrictCharField(serializers.CharField):
    """A string, and only a string (DRF's CharField turns numbers into strings)."""

    def to_internal_value(self, data: Any) -> str:
        if not isinstance(data, str):
            self.fail("invalid")
        return str(super().to_internal_value(data))


class JSONObjectField(serializers.JSONField):
    """A JSON object (not a list or a scalar), with a size limit."""

    def __init__(self, *, what: str = "This field", **kwargs: Any) -> None:
        self.what = what
        super().__init__(**kwargs)

    def to_internal_value(self, data: Any) -> Any:
        return check_json_object(super().to_internal_value(data), what=self.what)
