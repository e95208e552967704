"""Runs, turns, tool calls and events, as the API shows and accepts them."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from goaai.api.fields import JSONObjectField, StrictCharField, check_labels
from goaai.api.usage import RunUsageSerializer, UsageSerializer, turn_usage_document, usage_document
from goaai.runtime.vocabulary import AwaitingKind, FinishReason
from runs_app.models import DECISION_CHOICES, Run, ToolCall, Turn
from sessions_app.models import RunEvent

MAX_INPUT_LENGTH = 32_000


class RunErrorSerializer(serializers.Serializer):  # type: ignore[type-arg]
    kind = serializers.CharField(help_text="invalid_call, domain_rejection, unavailable, ...")
    message = serializers.CharField()
    retryable = serializers.BooleanField()


class AwaitingSerializer(serializers.Serializer):  # type: ignore[type-arg]
    kind = serializers.ChoiceField(choices=[kind.value for kind in AwaitingKind])
    tool_call = serializers.UUIDField(required=False)
    question = serializers.CharField(required=False)
    child_run = serializers.UUIDField(required=False)


class ToolCallErrorSerializer(serializers.Serializer):  # type: ignore[type-arg]
    kind = serializers.CharField()
    message = serializers.CharField()


class RunSerializer(serializers.ModelSerializer):  # type: ignore[type-arg]
    usage = serializers.SerializerMethodField()
    error = serializers.SerializerMethodField()
    awaiting = serializers.SerializerMethodField()
    duration_ms = serializers.IntegerField(read_only=True, allow_null=True)
    agent_version = serializers.IntegerField(
        source="agent_version_number",
        read_only=True,
        allow_null=True,
        help_text="The version of its agent the run executes (GET /agents/{id}/versions/).",
    )

    class Meta:
        model = Run
        fields = [
            "id",
            "session",
            "agent",
            "agent_version",
            "status",
            "input",
            "output",
            "labels",
            "metadata",
            "policy",
            "parent_run",
            "parent_tool_call",
            "usage",
            "error",
            "awaiting",
            "cancel_requested_at",
            "created_at",
            "started_at",
            "ended_at",
            "duration_ms",
        ]
        read_only_fields = fields

    @extend_schema_field(RunUsageSerializer)
    def get_usage(self, run: Run) -> dict[str, Any]:
        return usage_document(run)

    @extend_schema_field(RunErrorSerializer(allow_null=True))
    def get_error(self, run: Run) -> dict[str, Any] | None:
        if not run.error_kind:
            return None
        return {
            "kind": run.error_kind,
            "message": run.error_message,
            "retryable": run.error_retryable,
        }

    @extend_schema_field(AwaitingSerializer(allow_null=True))
    def get_awaiting(self, run: Run) -> dict[str, Any] | None:
        return run.awaiting if run.status == "awaiting_input" else None


class ToolCallSerializer(serializers.ModelSerializer):  # type: ignore[type-arg]
    error = serializers.SerializerMethodField()
    decision = serializers.ChoiceField(
        choices=DECISION_CHOICES,
        allow_blank=True,
        read_only=True,
        help_text="approved, denied or answered; empty until a person decided.",
    )

    class Meta:
        model = ToolCall
        fields = [
            "id",
            "run",
            "turn",
            "session",
            "call_id",
            "index",
            "name",
            "arguments",
            "result",
            "error",
            "status",
            "requires_approval",
            "decision",
            "decision_reason",
            "decided_by",
            "decided_at",
            "attempt",
            "created_at",
            "started_at",
            "ended_at",
            "duration_ms",
        ]
        read_only_fields = fields

    @extend_schema_field(ToolCallErrorSerializer(allow_null=True))
    def get_error(self, call: ToolCall) -> dict[str, str] | None:
        if not call.error_kind:
            return None
        return {"kind": call.error_kind, "message": call.error_message}


class TurnResponseSerializer(serializers.Serializer):  # type: ignore[type-arg]
    text = serializers.CharField()
    tool_calls = serializers.ListField(child=serializers.DictField())


class TurnSerializer(serializers.ModelSerializer):  # type: ignore[type-arg]
    model = serializers.CharField(
        read_only=True, help_text="The model the agent asked for, as `<profile>:<model>`."
    )
    response_model = serializers.CharField(
        read_only=True,
        help_text="The model that answered, as the provider names it (often a dated "
        "version); empty until it answered.",
    )
    response = serializers.SerializerMethodField()
    usage = serializers.SerializerMethodField()
    finish_reason = serializers.ChoiceField(
        choices=[("", ""), *((reason.value, reason.value) for reason in FinishReason)],
        read_only=True,
        help_text="Why the model stopped: `stop`, `tool_calls`, `length` (cut off by the "
        "output limit), `content_filter` or `other`; empty until it answered.",
    )
    truncated = serializers.SerializerMethodField(
        help_text="Whether the reply was cut off by the output length limit "
        "(`finish_reason` is `length`)."
    )
    reasoning = serializers.CharField(
        read_only=True, help_text="The thinking the model showed before it answered, if any."
    )
    retries = serializers.IntegerField(
        read_only=True,
        help_text="How many times the model was asked again after a retryable error "
        "(each is a `model.retry` event).",
    )

    class Meta:
        model = Turn
        fields = [
            "id",
            "run",
            "index",
            "model",
            "response_model",
            "request_messages",
            "response",
            "finish_reason",
            "truncated",
            "reasoning",
            "usage",
            "retries",
            "latency_ms",
            "started_at",
            "ended_at",
        ]
        read_only_fields = fields

    @extend_schema_field(TurnResponseSerializer)
    def get_response(self, turn: Turn) -> dict[str, Any]:
        return {"text": turn.response_text, "tool_calls": turn.response_tool_calls}

    @extend_schema_field(UsageSerializer)
    def get_usage(self, turn: Turn) -> dict[str, Any]:
        return turn_usage_document(turn)

    def get_truncated(self, turn: Turn) -> bool:
        return turn.finish_reason == FinishReason.LENGTH


class TurnWithToolCallsSerializer(TurnSerializer):
    tool_calls = ToolCallSerializer(many=True, read_only=True)

    class Meta(TurnSerializer.Meta):
        fields = [*TurnSerializer.Meta.fields, "tool_calls"]
        read_only_fields = fields


class RunDetailSerializer(RunSerializer):
    turns = TurnWithToolCallsSerializer(many=True, read_only=True)
    child_runs: serializers.Field[Any, Any, Any, Any] = serializers.PrimaryKeyRelatedField(
        many=True, read_only=True, help_text="Runs of agents this run called as tools."
    )

    class Meta(RunSerializer.Meta):
        fields = [*RunSerializer.Meta.fields, "child_runs", "turns"]
        read_only_fields = fields


class RunEventSerializer(serializers.ModelSerializer):  # type: ignore[type-arg]
    class Meta:
        model = RunEvent
        fields = ["seq", "type", "run", "data", "created_at"]
        read_only_fields = fields


class RunCreateSerializer(serializers.Serializer):  # type: ignore[type-arg]
    input = serializers.CharField(
        max_length=MAX_INPUT_LENGTH, trim_whitespace=False, help_text="The user's message."
    )
    labels = serializers.DictField(
        child=StrictCharField(max_length=200, allow_blank=True),
        required=False,
        default=dict,
        help_text="String labels; label rules in settings tighten the run's policy by them.",
    )
    metadata = JSONObjectField(what="Metadata", required=False, default=dict)

    def validate_input(self, value: str) -> str:
        if not value.strip():
            raise serializers.ValidationError("The message is empty.", code="blank")
        return value

    def validate_labels(self, value: dict[str, str]) -> dict[str, str]:
        return check_labels(value)


class RunCancelSerializer(serializers.Serializer):  # type: ignore[type-arg]
    reason = serializers.CharField(max_length=200, required=False, allow_blank=True, default="")


class RunRespondSerializer(serializers.Serializer):  # type: ignore[type-arg]
    """An approval decision, or an answer to a question: send one or the other."""

    tool_call = serializers.UUIDField(
        required=False, allow_null=True, help_text="The tool call the decision is about."
    )
    decision = serializers.ChoiceField(choices=["approve", "deny"], required=False)
    reason = serializers.CharField(max_length=2000, required=False, allow_blank=True, default="")
    answer = serializers.CharField(
        max_length=MAX_INPUT_LENGTH, required=False, help_text="The answer to the question."
    )

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        has_decision = "decision" in attrs
        has_answer = "answer" in attrs
        if has_decision == has_answer:
            raise serializers.ValidationError(
                "Send either a decision (approve or deny) or an answer.", code="invalid"
            )
        return attrs
