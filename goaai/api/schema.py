"""The OpenAPI schema: every error an endpoint can answer, documented with it.

drf-standardized-errors describes the errors DRF itself raises (400, 401, 403, 404,
405, 406, 415, 429, 500); goaai adds the two of its own: 409 for conflicts on the
operations that can have them (views list them in ``conflict_actions``), 403 for
the ones refused to some callers (``forbidden_actions``, or ``forbidden_methods``
of a plain view), 413 for every operation
that takes a body, and parse errors for malformed JSON.
"""

from __future__ import annotations

from typing import Any

from drf_standardized_errors.openapi import AutoSchema
from drf_standardized_errors.openapi_serializers import ClientErrorEnum
from rest_framework import serializers

from goaai.api.parsers import LimitedJSONParser

CONFLICT_CODES = [
    ("conflict", "conflict"),
    ("run_ended", "run_ended"),
    ("session_ended", "session_ended"),
    ("illegal_transition", "illegal_transition"),
    ("idempotency_key_reused", "idempotency_key_reused"),
    ("version_conflict", "version_conflict"),
    ("run_active", "run_active"),
    ("run_not_ended", "run_not_ended"),
]


class Error409Serializer(serializers.Serializer):  # type: ignore[type-arg]
    code = serializers.ChoiceField(choices=CONFLICT_CODES)
    detail = serializers.CharField()
    attr = serializers.CharField(allow_null=True)


class ErrorResponse409Serializer(serializers.Serializer):  # type: ignore[type-arg]
    type = serializers.ChoiceField(choices=ClientErrorEnum.choices)
    errors = Error409Serializer(many=True)  # type: ignore[assignment]
    current = serializers.DictField(
        required=False,
        allow_null=True,
        help_text="For a memory version conflict: the entry as it is now (null if gone).",
    )
    active_run = serializers.UUIDField(
        required=False,
        help_text="For a message refused while a run of the session is active "
        "(`run_active`, the session's policy is `multitask: reject`): that run's id.",
    )


class Error413Serializer(serializers.Serializer):  # type: ignore[type-arg]
    code = serializers.ChoiceField(choices=[("payload_too_large", "payload_too_large")])
    detail = serializers.CharField()
    attr = serializers.CharField(allow_null=True)


class ErrorResponse413Serializer(serializers.Serializer):  # type: ignore[type-arg]
    type = serializers.ChoiceField(choices=ClientErrorEnum.choices)
    errors = Error413Serializer(many=True)  # type: ignore[assignment]


class GoaaiAutoSchema(AutoSchema):
    def _get_allowed_error_status_codes(self) -> list[str]:
        return [*super()._get_allowed_error_status_codes(), "409", "413"]

    def _should_add_error_response(self, responses: dict[str, Any], status_code: str) -> bool:
        if status_code in responses:
            return False
        if status_code == "409":
            return getattr(self.view, "action", None) in getattr(self.view, "conflict_actions", ())
        if status_code == "413":
            return self.method in ("POST", "PUT", "PATCH")
        if status_code == "403" and getattr(self.view, "action", None) in getattr(
            self.view, "forbidden_actions", ()
        ):
            return True
        if status_code == "403" and self.method.lower() in getattr(
            self.view, "forbidden_methods", ()
        ):
            return True
        return bool(super()._should_add_error_response(responses, status_code))

    def _should_add_parse_error_response(self) -> bool:
        # goaai's parser is not a JSONParser subclass (see goaai.api.parsers), and
        # it answers malformed JSON with a parse error all the same.
        if any(isinstance(p, LimitedJSONParser) for p in self.view.get_parsers()):
            return self.method in ("POST", "PUT", "PATCH")
        return bool(super()._should_add_parse_error_response())

    def _get_error_response_serializer(self, status_code: str) -> Any:
        if status_code == "409":
            return ErrorResponse409Serializer
        if status_code == "413":
            return ErrorResponse413Serializer
        return super()._get_error_response_serializer(status_code)
