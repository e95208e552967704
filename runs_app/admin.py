"""Runs, turns, tool calls and events in the operators' console: filters and search
an audit needs, links along the run tree, exports and cancel, no per-row queries."""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.db.models import Model, Q, QuerySet
from django.http import HttpRequest, HttpResponse
from django.http.response import HttpResponseBase
from django.urls import path, reverse
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from goaai.access import CHANGE, log_actions
from goaai.admin_base import (
    LabelFilter,
    ReadOnlyAdmin,
    agent_ids,
    agent_models,
    choices_filter,
    csv_download,
    date_range_filters,
    json_download,
    owner_filter,
    shown_fields,
    tool_names,
    vocabulary_filter,
)
from goaai.admin_cells import duration_cell, excerpt_cell, time_column
from goaai.runtime import rt
from goaai.runtime.types import known_cost
from goaai.runtime.vocabulary import (
    OPEN_RUN_STATUSES,
    RUN_STATUS_CHOICES,
    TOOL_CALL_STATUS_CHOICES,
    AwaitingKind,
    RunStatus,
)
from runs_app import admin_timeline as timeline
from runs_app import (
    agent_admin,  # noqa: F401  (registers the agents' admin)
    branch_admin,  # noqa: F401  (registers summaries and forks)
    score_admin,  # noqa: F401  (registers scores: users' feedback)
)
from runs_app.access import (
    DATASET_RECORD,
    RUN_RECORD,
    canceled_by,
    may_act_on_every_run,
    may_read_every_record,
)
from runs_app.admin_display import (
    RUN_FIELDS_SHOWN,
    TOOL_CALL_FIELDS_SHOWN,
    TURN_FIELDS_SHOWN,
    record_cell,
    run_cell,
)
from runs_app.dashboard.views import dashboard
from runs_app.export import run_document
from runs_app.models import ERROR_KIND_CHOICES, ModelPrice, Run, Score, ToolCall, Turn
from runs_app.price_admin import ModelPriceAdmin
from runs_app.run_filters import DurationFrom, WorkingFrom
from runs_app.score_admin import RunScoreFilter, export_dataset
from runs_app.session_admin import SessionAdmin
from runs_app.timeline.values import format_cost, format_tokens
from sessions_app.models import RunEvent, Session

admin.site.register(Session, SessionAdmin)
admin.site.register(ModelPrice, ModelPriceAdmin)


def _changelist_link(model: type[Model], field: str, value: object, label: str) -> str:
    meta = model._meta
    url = reverse(f"admin:{meta.app_label}_{meta.model_name}_changelist") + f"?{field}={value}"
    return format_html('<a href="{}">{}</a>', url, label)


# What a waiting run waits for, as the runs list's "waiting for" filter names it.
WAITING_FOR = [
    (AwaitingKind.APPROVAL, "Approval of a tool call"),
    (AwaitingKind.QUESTION, "An answer to a question"),
    (AwaitingKind.CLIENT_TOOL, "The caller's tool result"),
    (AwaitingKind.DELEGATED, "A run it called"),
]
RUN_CSV_COLUMNS = [
    "id",
    "session_id",
    "agent",
    "status",
    "input",
    "output",
    "labels",
    "input_tokens",
    "output_tokens",
    "cached_input_tokens",
    "cache_write_tokens",
    "reasoning_tokens",
    "total_tokens",
    "cost",
    "unpriced_turns",
    "error_kind",
    "error_message",
    "parent_run_id",
    "created_at",
    "started_at",
    "ended_at",
]


@admin.register(Run)
class RunAdmin(ReadOnlyAdmin):
    list_display = [
        "run_id",
        "agent",
        "model_column",
        "status",
        "owner",
        "input_excerpt",
        "session_link",
        "parent_link",
        "tokens",
        "cost_column",
        "duration",
        time_column("created_at", "Created"),
    ]
    # A run opens at its timeline (its id); the raw record is a link from there.
    list_display_links = None
    list_filter = [
        vocabulary_filter("status", "status", RUN_STATUS_CHOICES),
        choices_filter("agent", "agent", agent_ids),
        choices_filter("model", "model", agent_models),
        vocabulary_filter("error kind", "error_kind", ERROR_KIND_CHOICES),
        vocabulary_filter(
            "waiting for",
            "awaiting__kind",
            WAITING_FOR,
            parameter="waiting_for",
            also=Q(status=RunStatus.AWAITING_INPUT),
        ),
        LabelFilter,
        RunScoreFilter,
        owner_filter("session__owner"),
        DurationFrom,
        WorkingFrom,
        *date_range_filters("created_at"),
    ]
    search_fields = ["=id", "=session__id", "input", "output"]
    list_select_related = ["session__owner"]
    ordering = ["-created_at"]
    actions = ["export_json", "export_csv", export_dataset, "cancel_runs"]
    fields = (
        "id",
        "timeline",
        "session_link",
        "agent",
        "model",
        "status",
        "input",
        "output",
        "labels",
        "metadata",
        "policy",
        "parent_run_link",
        "parent_tool_call_link",
        "branch_links",
        "multitask",
        "created_by",
        "input_tokens",
        "output_tokens",
        "cached_input_tokens",
        "cache_write_tokens",
        "reasoning_tokens",
        "total_tokens",
        "cost_column",
        "unpriced_turns",
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

    def get_fields(self, request: HttpRequest, obj: Run | None = None) -> Any:
        # The page shows what this run holds: no error fields on a run without an
        # error, no lease on an ended run, never the digests kept for the machinery.
        fields = super().get_fields(request, obj)
        return fields if obj is None else shown_fields(fields, obj, RUN_FIELDS_SHOWN)

    @admin.display(description="Run")
    def run_id(self, obj: Run) -> SafeString | None:
        return run_cell(obj.pk)

    @admin.display(description="Model", ordering="model")
    def model_column(self, obj: Run) -> SafeString | None:
        return excerpt_cell(obj.model) if obj.model else None

    @admin.display(description="Owner", ordering="session__owner__username")
    def owner(self, obj: Run) -> SafeString:
        return excerpt_cell(obj.session.owner.get_username())

    @admin.display(description="Input")
    def input_excerpt(self, obj: Run) -> SafeString:
        return excerpt_cell(obj.input)

    @admin.display(description="Session")
    def session_link(self, obj: Run) -> SafeString | None:
        return record_cell(Session, obj.session_id, "session id")

    @admin.display(description="Parent")
    def parent_link(self, obj: Run) -> SafeString | None:
        return run_cell(obj.parent_run_id, "parent run id")

    @admin.display(description="Tokens", ordering="total_tokens")
    def tokens(self, obj: Run) -> str:
        return format_tokens(obj.total_tokens)

    @admin.display(description="Branch")
    def branch_links(self, obj: Run) -> str:
        """The run this one continues from, and the run it redoes (by id alone)."""
        links = [
            format_html("{} {}", label, run_cell(pk))
            for label, pk in (
                ("continues from", obj.previous_run_id),
                ("retry of", obj.retry_of_id),
                ("regenerates", obj.regenerates_id),
                ("edit of", obj.edit_of_id),
            )
            if pk is not None
        ]
        return format_html_join(" · ", "{}", ((link,) for link in links)) or "none"

    @admin.display(description="Cost", ordering="cost")
    def cost_column(self, obj: Run) -> str:
        # Unknown when no turn had a price; a run partly priced shows what is known
        # (its unpriced turns are counted on its page).
        return format_cost(known_cost(obj.cost, obj.unpriced_turns))

    @admin.display(description="Duration")
    def duration(self, obj: Run) -> str | None:
        return duration_cell(obj.duration_ms)

    @admin.display(description="Timeline")
    def timeline(self, obj: Run) -> str:
        url = reverse("admin:runs_app_run_timeline", args=[obj.pk])
        return format_html('<a href="{}">Every event of this run, in order</a>', url)

    @admin.display(description="Parent run")
    def parent_run_link(self, obj: Run) -> SafeString | None:
        return run_cell(obj.parent_run_id, "parent run id")

    @admin.display(description="Parent tool call")
    def parent_tool_call_link(self, obj: Run) -> SafeString | None:
        return record_cell(ToolCall, obj.parent_tool_call_id, "tool call id")

    @admin.display(description="Steps")
    def steps(self, obj: Run) -> str:
        return format_html(
            "{} · {} · {} · {} · {}",
            _changelist_link(Turn, "run__id__exact", obj.pk, "Turns"),
            _changelist_link(ToolCall, "run__id__exact", obj.pk, "Tool calls"),
            _changelist_link(RunEvent, "run__id__exact", obj.pk, "Events"),
            _changelist_link(Run, "parent_run__id__exact", obj.pk, "Child runs"),
            _changelist_link(Score, "run__id__exact", obj.pk, "Scores"),
        )

    def get_urls(self) -> list[Any]:
        view = self.admin_site.admin_view
        return [
            path("dashboard/", view(dashboard), name="runs_app_run_dashboard"),
            path(
                "<uuid:run_id>/timeline/", view(timeline.run_timeline), name="runs_app_run_timeline"
            ),
            path(
                "<uuid:run_id>/timeline/download/",
                view(timeline.run_download),
                name="runs_app_run_timeline_download",
            ),
            path(
                "<uuid:run_id>/timeline/cancel/",
                view(timeline.run_cancel),
                name="runs_app_run_timeline_cancel",
            ),
            path(
                "timeline/payload/<str:kind>/<str:object_id>/",
                view(timeline.timeline_payload),
                name="runs_app_timeline_payload",
            ),
            *super().get_urls(),
        ]

    # The actions ask for what they do: the JSON export holds each run's turns,
    # tool calls and events; cancel is runs_app.cancel_run.
    def has_export_permission(self, request: HttpRequest) -> bool:
        return may_read_every_record(request.user, RUN_RECORD)

    # A dataset holds each run with its tool calls and scores.
    def has_dataset_permission(self, request: HttpRequest) -> bool:
        return may_read_every_record(request.user, DATASET_RECORD)

    def has_cancel_permission(self, request: HttpRequest) -> bool:
        return may_act_on_every_run(request.user, "cancel")

    @admin.action(description="Export selected runs as JSON", permissions=["export"])
    def export_json(self, request: HttpRequest, queryset: QuerySet[Run]) -> HttpResponse:
        runs = [run_document(run) for run in queryset.order_by("created_at")]
        return json_download("runs.json", {"format": "goaai.runs.v1", "runs": runs})

    @admin.action(description="Export selected runs as CSV")
    def export_csv(self, request: HttpRequest, queryset: QuerySet[Run]) -> HttpResponseBase:
        return csv_download("runs.csv", queryset.order_by("created_at"), RUN_CSV_COLUMNS)

    @admin.action(description="Cancel selected runs that have not ended", permissions=["cancel"])
    def cancel_runs(self, request: HttpRequest, queryset: QuerySet[Run]) -> None:
        runs = list(queryset.filter(status__in=OPEN_RUN_STATUSES))
        reason = canceled_by(request.user)
        for run in runs:
            rt.cancel_run(run.pk, reason=reason, by=request.user)
        log_actions(request.user, runs, CHANGE, "Canceled (admin action)")
        skipped = queryset.count() - len(runs)
        self.message_user(request, f"Asked {len(runs)} run(s) to stop.", messages.SUCCESS)
        if skipped:
            self.message_user(request, f"{skipped} run(s) had already ended.", messages.INFO)


@admin.register(Turn)
class TurnAdmin(ReadOnlyAdmin):
    list_display = [
        "turn_id",
        "run_link",
        "index",
        "model",
        "input_tokens",
        "output_tokens",
        "cost_column",
        "finish_reason",
        "retries",
        "latency",
        time_column("started_at", "Started"),
    ]
    list_display_links = None
    list_filter = [
        choices_filter("model", "model", agent_models),
        "finish_reason",
        *date_range_filters("started_at", "started"),
    ]
    search_fields = ["=id", "=run__id", "response_text"]
    ordering = ["-started_at"]
    fields = (
        "id",
        "run_link",
        "index",
        "model",
        "response_model",
        "request_messages",
        "response_text",
        "response_tool_calls",
        "finish_reason",
        "reasoning",
        "input_tokens",
        "output_tokens",
        "cached_input_tokens",
        "cache_write_tokens",
        "reasoning_tokens",
        "cost_column",
        "usage_estimated",
        "interruption",
        "retries",
        "retry_errors",
        "latency_ms",
        "started_at",
        "ended_at",
    )
    readonly_fields = fields

    def get_fields(self, request: HttpRequest, obj: Turn | None = None) -> Any:
        fields = super().get_fields(request, obj)
        return fields if obj is None else shown_fields(fields, obj, TURN_FIELDS_SHOWN)

    @admin.display(description="Turn")
    def turn_id(self, obj: Turn) -> SafeString | None:
        return record_cell(Turn, obj.pk, "turn id")

    @admin.display(description="Run")
    def run_link(self, obj: Turn) -> SafeString | None:
        return run_cell(obj.run_id)

    @admin.display(description="Cost", ordering="cost")
    def cost_column(self, obj: Turn) -> str:
        return format_cost(obj.cost)

    @admin.display(description="Latency", ordering="latency_ms")
    def latency(self, obj: Turn) -> str | None:
        return duration_cell(obj.latency_ms)


@admin.register(ToolCall)
class ToolCallAdmin(ReadOnlyAdmin):
    list_display = [
        "tool_call_id",
        "name",
        "status",
        "error_kind",
        "decision",
        "run_link",
        "owner",
        "duration",
        time_column("created_at", "Created"),
    ]
    list_display_links = None
    list_filter = [
        vocabulary_filter("status", "status", TOOL_CALL_STATUS_CHOICES),
        choices_filter("tool", "name", tool_names),
        vocabulary_filter("error kind", "error_kind", ERROR_KIND_CHOICES),
        "requires_approval",
        choices_filter("agent", "run__agent", agent_ids, parameter="agent"),
        choices_filter("model", "run__model", agent_models, parameter="model"),
        owner_filter("session__owner"),
        *date_range_filters("created_at"),
        *date_range_filters("run__created_at", "run created", parameter="run_created_at"),
    ]
    search_fields = ["=id", "=run__id", "=session__id", "=name"]
    list_select_related = ["session__owner"]
    ordering = ["-created_at"]
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

    def get_fields(self, request: HttpRequest, obj: ToolCall | None = None) -> Any:
        fields = super().get_fields(request, obj)
        return fields if obj is None else shown_fields(fields, obj, TOOL_CALL_FIELDS_SHOWN)

    @admin.display(description="Tool call")
    def tool_call_id(self, obj: ToolCall) -> SafeString | None:
        return record_cell(ToolCall, obj.pk, "tool call id")

    @admin.display(description="Run")
    def run_link(self, obj: ToolCall) -> SafeString | None:
        return run_cell(obj.run_id)

    @admin.display(description="Owner", ordering="session__owner__username")
    def owner(self, obj: ToolCall) -> SafeString:
        return excerpt_cell(obj.session.owner.get_username())

    @admin.display(description="Duration", ordering="duration_ms")
    def duration(self, obj: ToolCall) -> str | None:
        return duration_cell(obj.duration_ms)

    @admin.display(description="Turn")
    def turn_link(self, obj: ToolCall) -> SafeString | None:
        return record_cell(Turn, obj.turn_id, "turn id")


@admin.register(RunEvent)
class RunEventAdmin(ReadOnlyAdmin):
    list_display = ["seq", "type", "session_link", "run_link", time_column("created_at", "Time")]
    list_filter = ["type", *date_range_filters("created_at")]
    search_fields = ["=session__id", "=run__id"]
    ordering = ["-id"]
    fields = ("id", "session", "run", "seq", "type", "data", "created_at")
    readonly_fields = fields

    @admin.display(description="Session")
    def session_link(self, obj: RunEvent) -> SafeString | None:
        return record_cell(Session, obj.session_id, "session id")

    @admin.display(description="Run")
    def run_link(self, obj: RunEvent) -> SafeString | None:
        return run_cell(obj.run_id)
