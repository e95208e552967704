from __future__ import annotations

from django.contrib import admin

from goaai.admin_base import ReadOnlyAdmin
from memory_app.models import MemoryEntry, MemoryRevision


@admin.register(MemoryEntry)
class MemoryEntryAdmin(ReadOnlyAdmin):
    list_display = [
        "key",
        "scope",
        "session",
        "user",
        "agent",
        "version",
        "written_by_kind",
        "updated_at",
    ]
    list_filter = ["scope", "written_by_kind", "updated_at"]
    search_fields = ["key", "=id", "=session__id", "user__username", "agent"]
    list_select_related = ["session", "user"]
    fields = (
        "id",
        "key",
        "value",
        "scope",
        "session",
        "user",
        "agent",
        "version",
        "written_by_kind",
        "written_by_user",
        "written_by_run",
        "written_by_tool_call",
        "expires_at",
        "created_at",
        "updated_at",
    )
    readonly_fields = fields


@admin.register(MemoryRevision)
class MemoryRevisionAdmin(ReadOnlyAdmin):
    list_display = ["key", "scope", "version", "action", "actor_kind", "actor_user", "created_at"]
    list_filter = ["action", "scope", "actor_kind", "created_at"]
    search_fields = ["key", "=entry_id", "=session__id"]
    list_select_related = ["actor_user"]
    fields = (
        "entry_id",
        "key",
        "scope",
        "session",
        "user",
        "agent",
        "version",
        "value",
        "action",
        "actor_kind",
        "actor_user",
        "actor_run",
        "actor_tool_call",
        "created_at",
    )
    readonly_fields = fields
