"""Runs, turns, tool calls and events, as the API shows and accepts them."""

from __future__ import annotations

from typing import Any
from uuid import UUID

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from goaai.api.fields import JSONObjectField, StrictCharField, check_labels
from goaai.api.serializing import ModelSerializer, Serializer
from goaai.api.usage import RunUsageSerializer, UsageSerializer, turn_usage_document, usage_document
from goaai.runtime import payloads
from goaai.runtime.public_errors import public_error_message
from goaai.runtime.questions import MAX_CHOICE_LENGTH, MAX_CHOICES
from goaai.runtime.vocabulary import (
    AwaitingKind,
    FinishReason,
    Multitask,
    StopKind,
    TurnInterruption,
)
from runs_app.models import DECISION_CHOICES, Run, ToolCall, Turn
from runs_app.scores import caller_feedback
from runs_app.selectors import run_queued_behind
from sessions_app.models import RunEvent

MAX_INPUT_LENGTH = 32_000


class RunErrorSerializer(serializers.Serializer):  # type: ignore[type-arg]
    kind = serializers.CharField(help_text="invalid_call, domain_rejection, unavailable, ...")
    message = serializers.CharField(
        help_text="What went wrong, in words for the person chatting: a plain sentence "
        "per kind for an error of the model or a service (never the provider's own "
        "message), goaai's own reason for a policy limit or a spent time budget."
    )
    retryable = serializers.BooleanField()
    detail = serializers.CharField(
        required=False,
        help_text="Staff only: the error as it was recorded, the provider's own message "
        "included (addresses, error numbers).",
    )


class AwaitingSerializer(serializers.Serializer):  # type: ignore[type-arg]
    kind = serializers.ChoiceField(choices=[kind.value for kind in AwaitingKind])
    tool_call = serializers.UUIDField(required=False)
    question = serializers.CharField(required=False)
    choices = serializers.ListField(
        child=serializers.CharField(),
        required=False,
        help_text="The answers a question offers to pick from (absent: answer in words). "
        "Answer with `{choices: [...]}`, or in words with `{answer}`.",
    )
    multiple = serializers.BooleanField(
        required=False,
        help_text="With `choices`: whether any number of them may be picked (else one).",
    )
    child_run = serializers.UUIDField(required=False)
    tool_calls = serializers.ListField(
        child=serializers.UUIDField(),
        required=False,
        help_text="For `client_tool`: every call of the caller's own tools the run waits "
        "on; the caller (an OpenAI-compatible client) sends their results through `/v1/`.",
    )


class ToolCallErrorSerializer(serializers.Serializer):  # type: ignore[type-arg]
    kind = serializers.CharField()
    message = serializers.CharField()


class StoppedBySerializer(serializers.Serializer):  # type: ignore[type-arg]
    kind = serializers.ChoiceField(
        choices=[kind.value for kind in StopKind],
        help_text="`user`: the run's own user stopped it; `operator`: staff stopped "
        "another user's run; `superseded`: the next message replaced it (multitask "
        "`interrupt`); `policy`: a rule of its policy (a time or turn budget) ended it.",
    )
    user = serializers.CharField(
        allow_null=True, help_text="Who asked, by username (null for a policy, or unknown)."
    )
    rule = serializers.CharField(
        allow_null=True, help_text="For `policy`: the rule that ended the run, else null."
    )


class CallerFeedbackSerializer(serializers.Serializer):  # type: ignore[type-arg]
    value = serializers.ChoiceField(choices=["up", "down"])
    comment = serializers.CharField(allow_blank=True)


class RunSerializer(ModelSerializer):
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
    multitask = serializers.ChoiceField(
        choices=[("", ""), *((m.value, m.value) for m in Multitask)],
        read_only=True,
        help_text="What the message did because another run of the session was active "
        "when it came: `enqueue` (it waited for that run to end) or `interrupt` (it "
        "stopped that run first); empty when none was active.",
    )
    queued_behind = serializers.SerializerMethodField(
        help_text="While the run waits for its turn (status `pending`): the active or "
        "queued run of its session just before it, which must end first. Null once "
        "its turn has come, and for every other run."
    )
    stopped_by = serializers.SerializerMethodField(
        help_text="Who or what stopped the run, if it was stopped (canceled, or ended by "
        "a policy rule); null otherwise. `cancel_reason` says why, in words."
    )
    feedback = serializers.SerializerMethodField(
        help_text="Your own feedback on the run's answer (POST /runs/{id}/feedback/): "
        "`{value: up|down, comment}`, or null if you gave none."
    )

    class Meta:
        model = Run
        fields = [
            "id",
            "session",
            "agent",
            "agent_version",
            "model",
            "status",
            "input",
            "output",
            "labels",
            "metadata",
            "policy",
            "parent_run",
            "parent_tool_call",
            "previous_run",
            "retry_of",
            "regenerates",
            "edit_of",
            "usage",
            "error",
            "awaiting",
            "multitask",
            "queued_behind",
            "feedback",
            "stopped_by",
            "cancel_reason",
            "cancel_requested_at",
            "created_at",
            "started_at",
            "ended_at",
            "duration_ms",
        ]
        read_only_fields = fields
        extra_kwargs = {
            "previous_run": {
                "help_text": "The run this one continues from: the conversation it sees "
                "is that run's branch (null for a session's first run and for runs "
                "called as tools)."
            },
            "retry_of": {"help_text": "The failed or stopped run this one asks again."},
            "regenerates": {"help_text": "The run whose answer this one gives again."},
            "edit_of": {"help_text": "The run whose message this one changes."},
            "model": {
                "help_text": "The model that answered the run's latest turn "
                "(`<profile>:<model>`); empty before its first."
            },
            "cancel_reason": {
                "help_text": "Why the run was stopped, as the request said (or, for a "
                "policy, the rule that ended it); empty for a run nobody stopped."
            },
        }

    @extend_schema_field(RunUsageSerializer)
    def get_usage(self, run: Run) -> dict[str, Any]:
        return usage_document(run)

    @extend_schema_field(RunErrorSerializer(allow_null=True))
    def get_error(self, run: Run) -> dict[str, Any] | None:
        if not run.error_kind:
            return None
        error: dict[str, Any] = {
            "kind": run.error_kind,
            "message": public_error_message(
                kind=run.error_kind, message=run.error_message, status=run.status
            ),
            "retryable": run.error_retryable,
        }
        request = self.context.get("request")
        if getattr(getattr(request, "user", None), "is_staff", False):
            error["detail"] = run.error_message
        return error

    @extend_schema_field(AwaitingSerializer(allow_null=True))
    def get_awaiting(self, run: Run) -> dict[str, Any] | None:
        return run.awaiting if run.status == "awaiting_input" else None

    @extend_schema_field(StoppedBySerializer(allow_null=True))
    def get_stopped_by(self, run: Run) -> dict[str, Any] | None:
        # Read with the run where lists ask (select_related): only stopped runs name one.
        by = run.cancel_requested_by if run.cancel_requested_by_id else None
        stopped = payloads.stopped_by(
            kind=run.cancel_kind,
            user=by.get_username() if by is not None else None,
            rule=run.cancel_reason,
        )
        return payloads.told_stop(run.status, stopped)

    @extend_schema_field(CallerFeedbackSerializer(allow_null=True))
    def get_feedback(self, run: Run) -> dict[str, Any] | None:
        request = self.context.get("request")
        return caller_feedback(run, getattr(request, "user", None))

    @extend_schema_field(serializers.UUIDField(allow_null=True))
    def get_queued_behind(self, run: Run) -> UUID | None:
        return run_queued_behind(run)


class ToolCallSerializer(ModelSerializer):
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


class TurnSerializer(ModelSerializer):
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
    interruption = serializers.ChoiceField(
        choices=[("", ""), *((kind.value, kind.value) for kind in TurnInterruption)],
        read_only=True,
        help_text="How the turn ended before its model finished answering: `canceled` "
        "(the run was stopped mid-answer), `failed` (the stream broke off with an error) "
        "or `crashed` (the worker died); empty when it finished. An interrupted turn "
        "keeps the text said until then in `response.text`.",
    )
    usage_estimated = serializers.BooleanField(
        read_only=True,
        help_text="Whether `usage` is (in part) an estimate: the reply ended before the "
        "provider reported all of it, and the rest was estimated from the request and "
        "the text said.",
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
            "usage_estimated",
            "interruption",
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


class RunEventSerializer(ModelSerializer):
    class Meta:
        model = RunEvent
        fields = ["seq", "type", "run", "data", "created_at"]
        read_only_fields = fields


class RunCreateSerializer(Serializer):
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
    multitask = serializers.ChoiceField(
        choices=[m.value for m in Multitask],
        required=False,
        help_text="What this message does if another run of the session is still active "
        "(pending, running or awaiting input); by default the agent's "
        "`conversation.multitask`. `enqueue`: it waits, and starts (seeing that run's "
        "answer) once the runs before it have ended; `reject`: it is refused with a 409 "
        "`run_active` naming the active run; `interrupt`: the active run is stopped "
        "(its partial answer kept), and any message queued before this one canceled, "
        "then this one starts.",
    )

    def validate_input(self, value: str) -> str:
        if not value.strip():
            raise serializers.ValidationError("The message is empty.", code="blank")
        return value

    def validate_labels(self, value: dict[str, str]) -> dict[str, str]:
        return check_labels(value)


class RunCancelSerializer(serializers.Serializer):  # type: ignore[type-arg]
    reason = serializers.CharField(max_length=200, required=False, allow_blank=True, default="")


class RunRespondSerializer(serializers.Serializer):  # type: ignore[type-arg]
    """An approval decision, or an answer to a question (in words, or the choices
    it offers): send one of them."""

    tool_call = serializers.UUIDField(
        required=False, allow_null=True, help_text="The tool call the decision is about."
    )
    decision = serializers.ChoiceField(choices=["approve", "deny"], required=False)
    reason = serializers.CharField(max_length=2000, required=False, allow_blank=True, default="")
    answer = serializers.CharField(
        max_length=MAX_INPUT_LENGTH,
        required=False,
        help_text="The answer to the question, in words. Words that name one of the "
        "question's choices (case aside) pick that choice.",
    )
    choices = serializers.ListField(
        child=StrictCharField(max_length=MAX_CHOICE_LENGTH),
        required=False,
        allow_empty=False,
        min_length=1,
        max_length=MAX_CHOICES,
        help_text="The choices picked, each exactly as the question offers it "
        "(`awaiting.choices`): one, or any number when `awaiting.multiple` is true. A "
        "choice it does not offer is a 400 naming it.",
    )

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        sent = [name for name in ("decision", "answer", "choices") if name in attrs]
        if len(sent) != 1:
            raise serializers.ValidationError(
                "Send one of: a decision (approve or deny), an answer, or the choices picked.",
                code="invalid",
            )
        return attrs
