"""Memory entries and their revisions, as the API shows and accepts them."""

from __future__ import annotations

import json
from typing import Any

from django.utils import timezone
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from goaai.api.fields import check_no_nul
from goaai.api.serializing import ModelSerializer
from goaai.runtime.vocabulary import MEMORY_SCOPE_CHOICES
from memory_app.models import MemoryEntry, MemoryRevision

MAX_VALUE_BYTES = 64 * 1024


class WriterSerializer(serializers.Serializer):  # type: ignore[type-arg]
    kind = serializers.ChoiceField(choices=["user", "run", "system"])
    user = serializers.IntegerField(allow_null=True)
    run = serializers.UUIDField(allow_null=True)
    tool_call = serializers.UUIDField(allow_null=True)


def _writer(kind: str, user: Any, run: Any, tool_call: Any) -> dict[str, Any]:
    return {
        "kind": kind,
        "user": user,
        "run": str(run) if run else None,
        "tool_call": str(tool_call) if tool_call else None,
    }


class MemoryEntrySerializer(ModelSerializer):
    written_by = serializers.SerializerMethodField()

    class Meta:
        model = MemoryEntry
        fields = [
            "id",
            "key",
            "value",
            "scope",
            "session",
            "user",
            "agent",
            "version",
            "written_by",
            "expires_at",
            "created_at",
            "updated_at",
        ]
        read_only_fields = fields

    @extend_schema_field(WriterSerializer)
    def get_written_by(self, entry: MemoryEntry) -> dict[str, Any]:
        return _writer(
            entry.written_by_kind,
            entry.written_by_user_id,
            entry.written_by_run_id,
            entry.written_by_tool_call_id,
        )


class MemoryRevisionSerializer(ModelSerializer):
    actor = serializers.SerializerMethodField()

    class Meta:
        model = MemoryRevision
        fields = [
            "id",
            "entry",
            "key",
            "scope",
            "version",
            "value",
            "action",
            "actor",
            "created_at",
        ]
        read_only_fields = fields

    @extend_schema_field(WriterSerializer)
    def get_actor(self, revision: MemoryRevision) -> dict[str, Any]:
        return _writer(
            revision.actor_kind,
            revision.actor_user_id,
            revision.actor_run_id,
            revision.actor_tool_call_id,
        )


def check_value(value: Any) -> Any:
    check_no_nul(value, what="A value")
    if len(json.dumps(value, ensure_ascii=False).encode()) > MAX_VALUE_BYTES:
        raise serializers.ValidationError(
            f"A value is at most {MAX_VALUE_BYTES} bytes once encoded.", code="too_large"
        )
    return value


def check_expiry(value: Any) -> Any:
    if value is not None and value <= timezone.now():
        raise serializers.ValidationError("Must be in the future.", code="in_past")
    return value


class MemoryCreateSerializer(serializers.Serializer):  # type: ignore[type-arg]
    key = serializers.CharField(max_length=200)
    value = serializers.JSONField(help_text="Any JSON value.")
    scope = serializers.ChoiceField(choices=MEMORY_SCOPE_CHOICES)
    session = serializers.UUIDField(
        required=False, allow_null=True, help_text="For scope session: one of your sessions."
    )
    user = serializers.IntegerField(
        required=False,
        allow_null=True,
        help_text="For scope user: staff may name any user; others write their own.",
    )
    agent = serializers.CharField(
        max_length=100, required=False, allow_blank=True, default="", help_text="For scope agent."
    )
    expires_at = serializers.DateTimeField(required=False, allow_null=True, default=None)

    def validate_value(self, value: Any) -> Any:
        return check_value(value)

    def validate_expires_at(self, value: Any) -> Any:
        return check_expiry(value)


class MemoryUpdateSerializer(serializers.Serializer):  # type: ignore[type-arg]
    value = serializers.JSONField(help_text="The new value.")
    version = serializers.IntegerField(
        min_value=1, help_text="The version you read; a stale one is a 409 with the current."
    )
    expires_at = serializers.DateTimeField(required=False, allow_null=True, default=None)

    def validate_value(self, value: Any) -> Any:
        return check_value(value)

    def validate_expires_at(self, value: Any) -> Any:
        return check_expiry(value)


class MemoryFactSerializer(serializers.Serializer):  # type: ignore[type-arg]
    """A fact a search found, as a run is told it."""

    key = serializers.CharField()
    value = serializers.JSONField()
    scope = serializers.ChoiceField(choices=MEMORY_SCOPE_CHOICES)


class MemorySearchSerializer(serializers.Serializer):  # type: ignore[type-arg]
    """What ``GET /memory/search/`` answers: the query and its facts, best first."""

    query = serializers.CharField()
    results = MemoryFactSerializer(many=True)
