from __future__ import annotations

from django.contrib import admin
from django.urls import reverse
from django.utils.html import format_html

from goaai.admin_base import ReadOnlyAdmin, admin_link
from runs_app.models import Run, RunEvent, ToolCall, Turn


def _changelist_link(model: str, field: str, value: object, label: str) -> str:
    url = reverse(f"admin:runs_app_{model}_changelist") + f"?{field}={value}"
    return format_html('<a href="{}">{}</a>', url, label)


@admin.register(Run)
class RunAdmin(ReadOnlyAdmin):
    list_display = [
        "id",
        "agent",
        "status",
        "session_link",
        "total_tokens",
        "created_at",
        "ended_at",
    ]
    list_filter = ["status", "agent", "error_kind", "created_at"]
    search_fields = ["=id", "=session__id", "input", "output"]
    list_select_related = ["session"]
    date_hierarchy = "created_at"
    fields = (
        "id",
        "session_link",
        "agent",
        "status",
        "input",
        "output",
        "labels",
        "metadata",
        "policy",
        "parent_run_link",
        "parent_tool_call_link",
        "created_by",
        "input_tokens",
        "output_tokens",
        "total_tokens",
        "error_kind",
        "error_message",
        "error_retryable",
        "cancel_requested_at",
        "cancel_reason",
        "awaiting",
        "awaiting_since",
        "paused_seconds",
        "lease_owner",
        "lease_expires_at",
        "idempotency_key",
        "created_at",
        "started_at",
        "ended_at",
        "steps",
    )
    readonly_fields = fields

    @admin.display(description="Session")
    def session_link(self, obj: Run) -> str:
        return admin_link(obj.session)

    @admin.display(description="Parent run")
    def parent_run_link(self, obj: Run) -> str:
        return admin_link(obj.parent_run)

    @admin.display(description="Parent tool call")
    def parent_tool_call_link(self, obj: Run) -> str:
        return admin_link(obj.parent_tool_call)

    @admin.display(description="Steps")
    def steps(self, obj: Run) -> str:
        return format_html(
            "{} · {} · {} · {}",
            _changelist_link("turn", "run__id__exact", obj.pk, "Turns"),
            _changelist_link("toolcall", "run__id__exact", obj.pk, "Tool calls"),
            _changelist_link("runevent", "run__id__exact", obj.pk, "Events"),
            _changelist_link("run", "parent_run__id__exact", obj.pk, "Child runs"),
        )


@admin.register(Turn)
class TurnAdmin(ReadOnlyAdmin):
    list_display = [
        "id",
        "run_link",
        "index",
        "model",
        "input_tokens",
        "output_tokens",
        "latency_ms",
        "started_at",
    ]
    list_filter = ["model", "started_at"]
    search_fields = ["=id", "=run__id", "response_text"]
    list_select_related = ["run"]
    fields = (
        "id",
        "run_link",
        "index",
        "model",
        "request_messages",
        "response_text",
        "response_tool_calls",
        "input_tokens",
        "output_tokens",
        "latency_ms",
        "started_at",
        "ended_at",
    )
    readonly_fields = fields

    @admin.display(description="Run")
    def run_link(self, obj: Turn) -> str:
        return admin_link(obj.run)


@admin.register(ToolCall)
class ToolCallAdmin(ReadOnlyAdmin):
    list_display = ["id", "name", "status", "error_kind", "run_link", "duration_ms", "created_at"]
    list_filter = ["status", "name", "error_kind", "requires_approval", "created_at"]
    search_fields = ["=id", "=run__id", "=session__id", "name"]
    list_select_related = ["run"]
    date_hierarchy = "created_at"
    fields = (
        "id",
        "run_link",
        "turn_link",
        "session",
        "call_id",
        "index",
        "name",
        "arguments",
        "result",
        "status",
        "error_kind",
        "error_message",
        "requires_approval",
        "decision",
        "decided_by",
        "decided_at",
        "decision_reason",
        "attempt",
        "created_at",
        "started_at",
        "ended_at",
        "duration_ms",
    )
    readonly_fields = fields

    @admin.display(description="Run")
    def run_link(self, obj: ToolCall) -> str:
        return admin_link(obj.run)

    @admin.display(description="Turn")
    def turn_link(self, obj: ToolCall) -> str:
        return admin_link(obj.turn)


@admin.register(RunEvent)
class RunEventAdmin(ReadOnlyAdmin):
    list_display = ["seq", "type", "session", "run", "created_at"]
    list_filter = ["type", "created_at"]
    search_fields = ["=session__id", "=run__id"]
    list_select_related = ["session", "run"]
    ordering = ["session", "seq"]
    fields = ("id", "session", "run", "seq", "type", "data", "created_at")
    readonly_fields = fields
