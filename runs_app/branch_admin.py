"""The records of long conversations in the operators' console: the summaries that
stand for the earlier part of a session, and the sessions forked from others.

Both are audit records, written as runs work or users fork: read-only here."""

from __future__ import annotations

from django.contrib import admin

from goaai.admin_base import ReadOnlyAdmin, admin_id_link
from runs_app.models import HistorySummary, Run, SessionFork
from runs_app.timeline.values import format_cost
from sessions_app.models import Session


@admin.register(HistorySummary)
class HistorySummaryAdmin(ReadOnlyAdmin):
    list_display = [
        "id",
        "session_link",
        "run_link",
        "through_run_link",
        "runs_covered",
        "input_tokens",
        "output_tokens",
        "cost_column",
        "created_at",
    ]
    search_fields = ["=id", "=session__id", "=run__id", "=through_run__id", "text"]
    ordering = ["-created_at"]
    fields = (
        "id",
        "session_link",
        "run_link",
        "through_run_link",
        "previous",
        "runs_covered",
        "text",
        "model",
        "input_tokens",
        "output_tokens",
        "cost_column",
        "latency_ms",
        "created_at",
    )
    readonly_fields = fields

    @admin.display(description="Session")
    def session_link(self, obj: HistorySummary) -> str:
        return admin_id_link(Session, obj.session_id)

    @admin.display(description="Written by run")
    def run_link(self, obj: HistorySummary) -> str:
        return admin_id_link(Run, obj.run_id)

    @admin.display(description="Covers the branch through")
    def through_run_link(self, obj: HistorySummary) -> str:
        return admin_id_link(Run, obj.through_run_id)

    @admin.display(description="Cost", ordering="cost")
    def cost_column(self, obj: HistorySummary) -> str:
        return format_cost(obj.cost)


@admin.register(SessionFork)
class SessionForkAdmin(ReadOnlyAdmin):
    list_display = [
        "session_link",
        "source_session_link",
        "source_run_link",
        "created_by",
        "created_at",
    ]
    search_fields = ["=session__id", "=source_session__id", "=source_run__id"]
    ordering = ["-created_at"]
    fields = ("session_link", "source_session_link", "source_run_link", "created_by", "created_at")
    readonly_fields = fields
    list_select_related = ["created_by"]

    @admin.display(description="Session")
    def session_link(self, obj: SessionFork) -> str:
        return admin_id_link(Session, obj.session_id)

    @admin.display(description="Forked from session")
    def source_session_link(self, obj: SessionFork) -> str:
        return admin_id_link(Session, obj.source_session_id) if obj.source_session_id else "deleted"

    @admin.display(description="At run")
    def source_run_link(self, obj: SessionFork) -> str:
        return admin_id_link(Run, obj.source_run_id) if obj.source_run_id else "deleted"
