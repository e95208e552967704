"""Sessions in the operators' console: each with its runs, its timeline, exports
and the end action (which stops its runs), so it sits with the runs."""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.http.response import HttpResponseBase
from django.urls import path, reverse
from django.utils.html import format_html
from django.utils.safestring import SafeString

from goaai.access import CHANGE, log_actions
from goaai.admin_base import (
    ReadOnlyAdmin,
    agent_ids,
    choices_filter,
    csv_download,
    date_range_filters,
    json_download,
    owner_filter,
    related_count,
)
from goaai.admin_cells import excerpt_cell, time_column
from goaai.runtime.types import known_cost
from goaai.runtime.vocabulary import SessionStatus
from runs_app import admin_timeline as timeline
from runs_app.access import SESSION_EXPORT, may_read_every_record
from runs_app.admin_display import record_cell
from runs_app.export import session_document
from runs_app.models import Run
from runs_app.sessions import session_end
from runs_app.timeline.values import format_cost, format_tokens
from sessions_app.access import may_act_on_every
from sessions_app.models import Session
from sessions_app.selectors import session_run_totals, sessions_with_usage
from sessions_app.services import session_delete


class SessionAdmin(ReadOnlyAdmin):
    list_display = [
        "session_id",
        "title_excerpt",
        "owner",
        "agent",
        "status",
        "run_count",
        "cost",
        "last_event_seq",
        time_column("created_at", "Created"),
        time_column("ended_at", "Ended"),
    ]
    list_display_links = None
    list_filter = [
        "status",
        choices_filter("agent", "agent", agent_ids),
        owner_filter("owner"),
        *date_range_filters("created_at"),
        *date_range_filters("ended_at", "ended"),
    ]
    search_fields = ["=id", "title", "=owner__username"]
    list_select_related = ["owner"]
    ordering = ["-created_at"]
    actions = ["export_json", "export_csv", "end_sessions"]
    fields = (
        "id",
        "timeline",
        "owner",
        "agent",
        "title",
        "metadata",
        "status",
        "last_event_seq",
        "usage",
        "cost",
        "created_at",
        "updated_at",
        "ended_at",
        "runs",
    )
    readonly_fields = fields

    def get_queryset(self, request: HttpRequest) -> QuerySet[Session]:
        # A correlated count: the database computes it for the page's rows only,
        # where a join with GROUP BY would aggregate every run of every session.
        # The cost is two more, of the same kind.
        sessions: QuerySet[Session] = super().get_queryset(request)
        sessions = sessions_with_usage(sessions, fields=("cost", "unpriced_turns"))
        return sessions.annotate(_runs=related_count(Run, "session"))

    @admin.display(description="Session")
    def session_id(self, obj: Session) -> SafeString | None:
        return record_cell(Session, obj.pk, "session id")

    @admin.display(description="Title", ordering="title")
    def title_excerpt(self, obj: Session) -> SafeString | None:
        return excerpt_cell(obj.title, 60) if obj.title else None

    @admin.display(description="Runs", ordering="_runs")
    def run_count(self, obj: Session) -> int:
        return int(getattr(obj, "_runs", None) or 0)

    @admin.display(description="Total cost", ordering="runs_cost")
    def cost(self, obj: Session) -> str:
        totals = session_run_totals(obj, fields=("cost", "unpriced_turns"))
        return format_cost(known_cost(totals["cost"], totals["unpriced_turns"]))

    @admin.display(description="Tokens of its runs")
    def usage(self, obj: Session) -> str:
        totals = session_run_totals(obj)
        parts = [
            f"{format_tokens(totals['input_tokens'])} in",
            f"{format_tokens(totals['cached_input_tokens'])} cached",
            f"{format_tokens(totals['cache_write_tokens'])} written to the cache",
            f"{format_tokens(totals['output_tokens'])} out "
            f"({format_tokens(totals['reasoning_tokens'])} reasoning)",
            f"{format_tokens(totals['total_tokens'])} total",
        ]
        unpriced = totals["unpriced_turns"]
        if unpriced:
            parts.append(f"{unpriced} turn(s) without a price")
        return " · ".join(parts)

    @admin.display(description="Timeline")
    def timeline(self, obj: Session) -> str:
        url = reverse("admin:sessions_app_session_timeline", args=[obj.pk])
        return format_html('<a href="{}">Every event of this session, in order</a>', url)

    @admin.display(description="Runs")
    def runs(self, obj: Session) -> str:
        url = reverse("admin:runs_app_run_changelist") + f"?session__id__exact={obj.pk}"
        return format_html('<a href="{}">Runs of this session</a>', url)

    # Deleting a session (and everything under it) is the one removal operators may
    # make here; it is how a user's request to forget a conversation is honoured.
    # It takes sessions_app.delete_session, and only that: the runs, events and
    # memory go with their session, never one by one.
    def has_delete_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return may_act_on_every(request.user, "delete")

    def get_deleted_objects(self, objs: Any, request: HttpRequest) -> Any:
        deleted, counts, _, protected = super().get_deleted_objects(objs, request)
        return deleted, counts, set(), protected

    # The actions ask for what they do: the JSON export is each session's whole
    # record with its memory; ending is sessions_app.end_session.
    def has_export_permission(self, request: HttpRequest) -> bool:
        return may_read_every_record(request.user, SESSION_EXPORT)

    def has_end_permission(self, request: HttpRequest) -> bool:
        return may_act_on_every(request.user, "end")

    def delete_model(self, request: HttpRequest, obj: Session) -> None:
        session_delete(session_id=obj.pk)

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[Session]) -> None:
        for session_id in queryset.values_list("id", flat=True):
            session_delete(session_id=session_id)

    def get_urls(self) -> list[Any]:
        view = self.admin_site.admin_view
        return [
            path(
                "<uuid:session_id>/timeline/",
                view(timeline.session_timeline),
                name="sessions_app_session_timeline",
            ),
            *super().get_urls(),
        ]

    @admin.action(description="Export selected sessions as JSON", permissions=["export"])
    def export_json(self, request: HttpRequest, queryset: QuerySet[Session]) -> HttpResponse:
        sessions = sessions_with_usage(queryset.select_related("owner")).order_by("created_at")
        documents = [session_document(session) for session in sessions]
        return json_download(
            "sessions.json", {"format": "goaai.sessions.v1", "sessions": documents}
        )

    @admin.action(description="Export selected sessions as CSV")
    def export_csv(self, request: HttpRequest, queryset: QuerySet[Session]) -> HttpResponseBase:
        columns = ["id", "owner__username", "agent", "title", "status", "metadata"]
        columns += ["last_event_seq", "created_at", "updated_at", "ended_at"]
        header = ["owner" if c == "owner__username" else c for c in columns]
        return csv_download("sessions.csv", queryset.order_by("created_at"), columns, header)

    @admin.action(description="End selected sessions (cancels their runs)", permissions=["end"])
    def end_sessions(self, request: HttpRequest, queryset: QuerySet[Session]) -> None:
        active = list(queryset.filter(status=SessionStatus.ACTIVE))
        # The runs it stops say who stopped them.
        reason = f"session ended by {request.user.get_username()} (user {request.user.pk})"
        for session in active:
            session_end(session_id=session.pk, reason=reason, ended_by=request.user.pk)
        log_actions(request.user, active, CHANGE, "Ended the session (admin action)")
        self.message_user(request, f"Ended {len(active)} session(s).", messages.SUCCESS)
