"""Admin building blocks shared by the apps."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.db.models import Model
from django.http import HttpRequest
from django.urls import reverse
from django.utils.html import format_html


class ReadOnlyAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    """An admin for audit records: browsable, never added, edited or deleted here.

    The records are written by services as agents work; an edit by hand would make
    the audit trail lie.
    """

    # Huge tables: do not COUNT(*) the unfiltered table for the "n total" link.
    show_full_result_count = False

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


def admin_link(obj: Model | None, label: str | None = None) -> str:
    """A link to ``obj``'s admin page, or an empty string."""
    if obj is None:
        return ""
    meta = obj._meta
    url = reverse(f"admin:{meta.app_label}_{meta.model_name}_change", args=[obj.pk])
    return format_html('<a href="{}">{}</a>', url, label or str(obj))
