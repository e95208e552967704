"""Sessions and API tokens, as the API shows and accepts them."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from django.utils import timezone
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from goaai.api.fields import JSONObjectField
from goaai.api.serializing import ModelSerializer, UtcDateTimeField, utc_text
from goaai.api.usage import RunUsageSerializer, usage_document
from goaai.runtime import rt
from sessions_app.models import ApiToken, Session
from sessions_app.selectors import session_run_totals


class OwnerSerializer(serializers.Serializer):  # type: ignore[type-arg]
    id = serializers.IntegerField()
    username = serializers.CharField()


class SessionSerializer(ModelSerializer):
    owner = OwnerSerializer(read_only=True)
    last_event_seq = serializers.IntegerField(
        read_only=True, help_text="The sequence number of the session's newest event."
    )
    usage = serializers.SerializerMethodField(
        help_text="What the session's runs (child runs included) add up to: tokens of "
        "each kind and their cost."
    )
    last_activity_at = UtcDateTimeField(
        read_only=True,
        help_text="When the session's newest event was recorded (a message, a run's "
        "progress, a change of memory or title): sessions are listed by it.",
    )

    class Meta:
        model = Session
        fields = [
            "id",
            "agent",
            "title",
            "status",
            "metadata",
            "owner",
            "last_event_seq",
            "usage",
            "created_at",
            "updated_at",
            "ended_at",
            "last_activity_at",
        ]
        read_only_fields = fields

    @extend_schema_field(RunUsageSerializer)
    def get_usage(self, session: Session) -> dict[str, Any]:
        return usage_document(SimpleNamespace(**session_run_totals(session)))

    def to_representation(self, instance: Session) -> dict[str, Any]:
        """What DRF's fields above write, written out: a page of fifty sessions
        spent a third of its request in their per-field machinery (the tests
        compare the two)."""
        owner = instance.owner
        return {
            "id": str(instance.pk),
            "agent": instance.agent,
            "title": instance.title,
            "status": str(instance.status),
            "metadata": instance.metadata,
            "owner": {"id": owner.pk, "username": owner.username},
            "last_event_seq": instance.last_event_seq,
            "usage": self.get_usage(instance),
            "created_at": utc_text(instance.created_at),
            "updated_at": utc_text(instance.updated_at),
            "ended_at": utc_text(instance.ended_at),
            "last_activity_at": utc_text(instance.last_activity_at),
        }


class SessionCreateSerializer(serializers.Serializer):  # type: ignore[type-arg]
    agent = serializers.CharField(max_length=100, help_text="The id of an agent (GET /agents/).")
    title = serializers.CharField(max_length=200, required=False, allow_blank=True, default="")
    metadata = JSONObjectField(what="Metadata", required=False, default=dict)

    def validate_agent(self, value: str) -> str:
        if value not in rt.agents:
            raise serializers.ValidationError(f"No agent named {value!r}.", code="unknown_agent")
        return value


class SessionUpdateSerializer(serializers.Serializer):  # type: ignore[type-arg]
    title = serializers.CharField(max_length=200, required=False, allow_blank=True)
    metadata = JSONObjectField(what="Metadata", required=False)

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        if not attrs:
            raise serializers.ValidationError("Send a title, metadata or both.", code="empty")
        return attrs


class ApiTokenSerializer(ModelSerializer):
    class Meta:
        model = ApiToken
        fields = ["id", "name", "prefix", "parent", "created_at", "expires_at", "last_used_at"]
        read_only_fields = fields


class ApiTokenCreatedSerializer(ApiTokenSerializer):
    token = serializers.CharField(
        read_only=True, help_text="The token itself. It is shown only in this response."
    )

    class Meta(ApiTokenSerializer.Meta):
        fields = [*ApiTokenSerializer.Meta.fields, "token"]
        read_only_fields = fields


class ApiTokenCreateSerializer(serializers.Serializer):  # type: ignore[type-arg]
    name = serializers.CharField(max_length=100, help_text="What the token is for.")
    expires_at = serializers.DateTimeField(
        required=False, allow_null=True, default=None, help_text="When it stops working."
    )

    def validate_expires_at(self, value: Any) -> Any:
        if value is not None and value <= timezone.now():
            raise serializers.ValidationError("Must be in the future.", code="in_past")
        return value
