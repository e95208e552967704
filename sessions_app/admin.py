from __future__ import annotations

from django.contrib import admin
from django.http import HttpRequest
from django.urls import reverse
from django.utils.html import format_html

from goaai.admin_base import ReadOnlyAdmin
from sessions_app.models import Session


@admin.register(Session)
class SessionAdmin(ReadOnlyAdmin):
    list_display = ["id", "title", "owner", "agent", "status", "created_at", "ended_at"]
    list_filter = ["status", "agent", "created_at"]
    search_fields = ["=id", "title", "owner__username"]
    list_select_related = ["owner"]
    date_hierarchy = "created_at"
    fields = (
        "id",
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

    @admin.display(description="Runs")
    def runs(self, obj: Session) -> str:
        url = reverse("admin:runs_app_run_changelist") + f"?session__id__exact={obj.pk}"
        return format_html('<a href="{}">Runs of this session</a>', url)

    # Deleting a session (and everything under it) is the one removal operators may
    # make here; it is how a user's request to forget a conversation is honoured.
    def has_delete_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return bool(request.user.is_superuser)
