"""Sessions and API tokens in the operators' console."""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.http.response import HttpResponseBase
from django.urls import reverse
from django.utils.html import format_html

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
from runs_app.models import Run
from sessions_app.models import ApiToken, Session, SessionStatus


@admin.register(Session)
class SessionAdmin(ReadOnlyAdmin):
    list_display = [
        "id",
        "title",
        "owner",
        "agent",
        "status",
        "run_count",
        "last_event_seq",
        "created_at",
        "ended_at",
    ]
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
        "created_at",
        "updated_at",
        "ended_at",
        "runs",
    )
    readonly_fields = fields

    def get_queryset(self, request: HttpRequest) -> QuerySet[Session]:
        # A correlated count: the database computes it for the page's rows only,
        # where a join with GROUP BY would aggregate every run of every session.
        sessions: QuerySet[Session] = super().get_queryset(request)
        return sessions.annotate(_runs=related_count(Run, "session"))

    @admin.display(description="Runs", ordering="_runs")
    def run_count(self, obj: Session) -> int:
        return int(getattr(obj, "_runs", None) or 0)

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
    def has_delete_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return bool(request.user.is_superuser)

    def delete_model(self, request: HttpRequest, obj: Session) -> None:
        from sessions_app.services import session_delete

        session_delete(session_id=obj.pk)

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[Session]) -> None:
        from sessions_app.services import session_delete

        for session_id in queryset.values_list("id", flat=True):
            session_delete(session_id=session_id)

    def get_urls(self) -> list[Any]:
        from django.urls import path

        from runs_app import admin_timeline as timeline

        view = self.admin_site.admin_view
        return [
            path(
                "<uuid:session_id>/timeline/",
                view(timeline.session_timeline),
                name="sessions_app_session_timeline",
            ),
            *super().get_urls(),
        ]

    @admin.action(description="Export selected sessions as JSON")
    def export_json(self, request: HttpRequest, queryset: QuerySet[Session]) -> HttpResponse:
        from goaai.api.export import session_document

        sessions = queryset.select_related("owner").order_by("created_at")
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

    @admin.action(description="End selected sessions (cancels their runs)")
    def end_sessions(self, request: HttpRequest, queryset: QuerySet[Session]) -> None:
        from sessions_app.services import session_end

        active = list(queryset.filter(status=SessionStatus.ACTIVE).values_list("id", flat=True))
        for session_id in active:
            session_end(session_id=session_id, reason="ended_by_operator")
        self.message_user(request, f"Ended {len(active)} session(s).", messages.SUCCESS)


@admin.register(ApiToken)
class ApiTokenAdmin(ReadOnlyAdmin):
    """Tokens can be seen and revoked by operators, never read back (only a digest
    is stored)."""

    list_display = [
        "name",
        "user",
        "prefix",
        "created_at",
        "expires_at",
        "last_used_at",
        "revoked_at",
    ]
    list_filter = [owner_filter("user"), "revoked_at"]
    search_fields = ["name", "=prefix", "=user__username"]
    list_select_related = ["user"]
    ordering = ["-created_at"]
    fields = (
        "id",
        "user",
        "name",
        "prefix",
        "created_at",
        "expires_at",
        "last_used_at",
        "revoked_at",
    )
    readonly_fields = fields
    actions = ["revoke"]

    @admin.action(description="Revoke selected tokens")
    def revoke(self, request: HttpRequest, queryset: QuerySet[ApiToken]) -> None:
        from sessions_app.services import api_token_revoke

        tokens = list(queryset.filter(revoked_at__isnull=True).values_list("id", flat=True))
        for token_id in tokens:
            api_token_revoke(token_id=token_id)
        self.message_user(request, f"Revoked {len(tokens)} token(s).", messages.SUCCESS)
