"""API tokens and webhooks in the operators' console (sessions, whose pages show
their runs, are registered by runs_app)."""

from __future__ import annotations

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest

from goaai.access import CHANGE, log_actions
from goaai.admin_base import ReadOnlyAdmin, owner_filter
from sessions_app import webhook_admin  # noqa: F401  (registers the webhooks' admin)
from sessions_app.access import may_revoke_tokens
from sessions_app.models import ApiToken
from sessions_app.services import api_token_revoke


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

    # Revoking another user's token takes sessions_app.delete_apitoken (through the
    # API, revoking is a DELETE).
    def has_revoke_permission(self, request: HttpRequest) -> bool:
        return may_revoke_tokens(request.user)

    @admin.action(description="Revoke selected tokens", permissions=["revoke"])
    def revoke(self, request: HttpRequest, queryset: QuerySet[ApiToken]) -> None:
        tokens = list(queryset.filter(revoked_at__isnull=True))
        for token in tokens:
            api_token_revoke(token_id=token.pk)
        log_actions(request.user, tokens, CHANGE, "Revoked (admin action)")
        self.message_user(request, f"Revoked {len(tokens)} token(s).", messages.SUCCESS)
