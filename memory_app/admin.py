"""Memory in the operators' console: staff may correct or remove what agents
remember, always through the services, so that every edit is a revision naming the
staff user; the revisions themselves are read-only."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.db.models import QuerySet
from django.forms import ModelForm
from django.http import HttpRequest
from django.urls import reverse
from django.utils.html import format_html

from goaai.admin_base import (
    BoundedCountPaginator,
    ReadOnlyAdmin,
    admin_fk_link,
    date_range_filters,
    owner_filter,
)
from goaai.runtime.errors import GoaaiError, MemoryConflict
from memory_app.models import MemoryEntry, MemoryRevision
from memory_app.selectors import expired, unexpired
from memory_app.services import memory_delete, memory_store


class MemoryEntryForm(forms.ModelForm):  # type: ignore[type-arg]
    """The value and expiry are editable; the version the editor saw is carried
    along, so an edit on top of a change made meanwhile is refused, not lost."""

    seen_version = forms.IntegerField(widget=forms.HiddenInput, required=False)

    class Meta:
        model = MemoryEntry
        fields = ["key", "value", "scope", "session", "user", "agent", "expires_at"]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self.instance.pk:
            self.fields["seen_version"].initial = self.instance.version

    def clean(self) -> dict[str, Any]:
        data: dict[str, Any] = super().clean() or {}
        if self.instance.pk:
            seen = data.get("seen_version")
            current = MemoryEntry.objects.filter(pk=self.instance.pk).values_list(
                "version", flat=True
            )
            now = current.first()
            if seen is not None and now is not None and seen != now:
                raise forms.ValidationError(
                    f"This entry changed meanwhile (now version {now}); reload to see it."
                )
        return data


def _owner(entry: MemoryEntry) -> dict[str, Any]:
    return {"session_id": entry.session_id, "user_id": entry.user_id, "agent": entry.agent}


class ExpiryFilter(admin.SimpleListFilter):
    """Live entries unless asked: an expired entry is gone for every reader, and
    stays only until the purge removes it."""

    title = "expiry"
    parameter_name = "expiry"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [("expired", "Expired"), ("all", "All, expired too")]

    def choices(self, changelist: Any) -> Iterator[Any]:
        yield {
            "selected": self.value() is None,
            "query_string": changelist.get_query_string(remove=[self.parameter_name]),
            "display": "Live",
        }
        for lookup, title in self.lookup_choices:
            yield {
                "selected": self.value() == lookup,
                "query_string": changelist.get_query_string({self.parameter_name: lookup}),
                "display": title,
            }

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        if self.value() == "all":
            return queryset
        return queryset.filter(expired() if self.value() == "expired" else unexpired())


@admin.register(MemoryEntry)
class MemoryEntryAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    form = MemoryEntryForm
    list_display = [
        "key",
        "scope",
        "owner_of",
        "agent",
        "version",
        "written_by",
        "expires_at",
        "updated_at",
    ]
    list_filter = [
        ExpiryFilter,
        "scope",
        "written_by_kind",
        owner_filter("user"),
        *date_range_filters("updated_at", "updated"),
    ]
    search_fields = ["key", "=id", "=session__id", "=user__username", "=agent"]
    list_select_related = ["user"]
    show_full_result_count = False
    paginator = BoundedCountPaginator
    list_per_page = 100
    ordering = ["key"]
    readonly_fields = [
        "id",
        "version",
        "written_by_kind",
        "written_by_user",
        "written_by_run_link",
        "written_by_tool_call",
        "created_at",
        "updated_at",
        "history",
    ]
    raw_id_fields = ["session", "user"]

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> list[str]:
        # Which entry it is (scope, owner, key) is fixed once it exists.
        fixed = ["key", "scope", "session", "user", "agent"] if obj is not None else []
        return [*fixed, *self.readonly_fields]

    @admin.display(description="Owner")
    def owner_of(self, obj: MemoryEntry) -> str:
        if obj.session_id:
            return admin_fk_link(obj, "session", "session")
        return obj.user.get_username() if obj.user_id and obj.user else ""

    @admin.display(description="Written by")
    def written_by(self, obj: MemoryEntry) -> str:
        if obj.written_by_run_id:
            return admin_fk_link(obj, "written_by_run", "a run")
        return obj.written_by_kind

    @admin.display(description="Written by run")
    def written_by_run_link(self, obj: MemoryEntry) -> str:
        return admin_fk_link(obj, "written_by_run")

    @admin.display(description="Revisions")
    def history(self, obj: MemoryEntry) -> str:
        url = reverse("admin:memory_app_memoryrevision_changelist") + f"?entry__id__exact={obj.pk}"
        return format_html('<a href="{}">Every change of this entry</a>', url)

    def save_model(
        self, request: HttpRequest, obj: MemoryEntry, form: ModelForm[Any], change: bool
    ) -> None:
        data = form.cleaned_data
        try:
            if change:
                saved = memory_store(
                    key=obj.key,
                    value=data["value"],
                    scope=obj.scope,
                    expected_version=data.get("seen_version") or obj.version,
                    expires_at=data.get("expires_at"),
                    written_by_user_id=request.user.pk,
                    **_owner(obj),
                )
            else:
                saved = memory_store(
                    key=data["key"],
                    value=data["value"],
                    scope=data["scope"],
                    session_id=data["session"].pk if data.get("session") else None,
                    user_id=data["user"].pk if data.get("user") else None,
                    agent=data.get("agent") or "",
                    expected_version=0,
                    expires_at=data.get("expires_at"),
                    written_by_user_id=request.user.pk,
                )
        except MemoryConflict as conflict:
            self.message_user(request, f"Not saved: {conflict}", messages.ERROR)
            return
        except GoaaiError as refused:
            self.message_user(request, f"Not saved: {refused}", messages.ERROR)
            return
        obj.pk = saved.pk
        obj.version = saved.version

    def delete_model(self, request: HttpRequest, obj: MemoryEntry) -> None:
        memory_delete(
            key=obj.key, scope=obj.scope, written_by_user_id=request.user.pk, **_owner(obj)
        )

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[MemoryEntry]) -> None:
        for entry in queryset:
            self.delete_model(request, entry)


@admin.register(MemoryRevision)
class MemoryRevisionAdmin(ReadOnlyAdmin):
    list_display = [
        "key",
        "scope",
        "version",
        "action",
        "actor_kind",
        "actor_user",
        "actor_run_link",
        "created_at",
    ]
    list_filter = ["action", "scope", "actor_kind", *date_range_filters("created_at")]
    search_fields = ["key", "=entry__id", "=session__id", "=actor_user__username"]
    list_select_related = ["actor_user"]
    ordering = ["-created_at"]
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

    @admin.display(description="Run")
    def actor_run_link(self, obj: MemoryRevision) -> str:
        return admin_fk_link(obj, "actor_run")
