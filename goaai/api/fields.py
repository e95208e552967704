"""Input checks shared by the API's serializers."""

from __future__ import annotations

import json
from typing import Any

from rest_framework import serializers

MAX_JSON_BYTES = 16 * 1024
MAX_LABELS = 32


def has_nul(value: Any) -> bool:
    """Whether a JSON value holds a NUL character in a key or a string anywhere
    (PostgreSQL cannot store one in text or JSON)."""
    if isinstance(value, str):
        return "\x00" in value
    if isinstance(value, dict):
        return any(has_nul(key) or has_nul(item) for key, item in value.items())
    if isinstance(value, list):
        return any(has_nul(item) for item in value)
    return False


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
