"""The records of long conversations in the operators' console: the summaries that
stand for the earlier part of a session, and the sessions forked from others.

Both are audit records, written as runs work or users fork: read-only here."""

from __future__ import annotations

from django.contrib import admin
from django.utils.safestring import SafeString

from goaai.admin_base import ReadOnlyAdmin
from goaai.admin_cells import time_column
from runs_app.admin_display import record_cell, run_cell
from runs_app.models import HistorySummary, SessionFork
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
        time_column("created_at", "Created"),
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
    def session_link(self, obj: HistorySummary) -> SafeString | None:
        return record_cell(Session, obj.session_id, "session id")

    @admin.display(description="Written by run")
    def run_link(self, obj: HistorySummary) -> SafeString | None:
        return run_cell(obj.run_id)

    @admin.display(description="Covers the branch through")
    def through_run_link(self, obj: HistorySummary) -> SafeString | None:
        return run_cell(obj.through_run_id)

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
        time_column("created_at", "Created"),
    ]
    list_display_links = None
    search_fields = ["=session__id", "=source_session__id", "=source_run__id"]
    ordering = ["-created_at"]
    fields = ("session_link", "source_session_link", "source_run_link", "created_by", "created_at")
    readonly_fields = fields
    list_select_related = ["created_by"]

    @admin.display(description="Session")
    def session_link(self, obj: SessionFork) -> SafeString | None:
        return record_cell(Session, obj.session_id, "session id")

    @admin.display(description="Forked from session")
    def source_session_link(self, obj: SessionFork) -> SafeString | str:
        return record_cell(Session, obj.source_session_id, "session id") or "deleted"

    @admin.display(description="At run")
    def source_run_link(self, obj: SessionFork) -> SafeString | str:
        return run_cell(obj.source_run_id) or "deleted"
