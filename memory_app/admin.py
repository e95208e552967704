"""Memory in the operators' console: staff may correct or remove what agents
remember, always through the services, so that every edit is a revision naming the
staff user; the revisions themselves are read-only."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.contrib.admin.views.main import ChangeList
from django.db.models import Exists, JSONField, OuterRef, QuerySet, Subquery
from django.forms import ModelForm
from django.http import HttpRequest
from django.urls import reverse
from django.utils.html import format_html
from django.utils.safestring import SafeString
from rest_framework.exceptions import ValidationError as ApiValidationError

from goaai.admin_base import (
    BoundedCountPaginator,
    CheckedChangeList,
    ReadOnlyAdmin,
    admin_fk_link,
    date_range_filters,
    owner_filter,
)
from goaai.admin_cells import excerpt_cell, short_id, time_column
from goaai.runtime.errors import GoaaiError, MemoryConflict
from memory_app.admin_values import MemoryValueField, change_summary, diff_html
from memory_app.api.serializers import check_value
from memory_app.models import MemoryEntry, MemoryRevision, RevisionAction
from memory_app.selectors import expired, unexpired
from memory_app.services import memory_delete, memory_store


class MemoryEntryForm(forms.ModelForm):  # type: ignore[type-arg]
    """The value and expiry are editable; the version the editor saw is carried
    along, so an edit on top of a change made meanwhile is refused, not lost.

    The value is typed as plain text or JSON (see MemoryValueField) and checked as
    the API checks it; it is the form's own field, not the model's, whose "blank"
    check would refuse values an entry may hold ("", [] and {})."""

    seen_version = forms.IntegerField(widget=forms.HiddenInput, required=False)
    value = MemoryValueField()

    class Meta:
        model = MemoryEntry
        fields = ["key", "scope", "session", "user", "agent", "expires_at"]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self.instance.pk:
            self.fields["seen_version"].initial = self.instance.version
            self.initial.setdefault("value", self.instance.value)

    def clean_value(self) -> Any:
        value = self.cleaned_data.get("value")
        try:
            return check_value(value)
        except ApiValidationError as refused:
            raise forms.ValidationError([str(detail) for detail in refused.detail]) from None

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


def _session_cell(session_id: Any) -> SafeString | None:
    if session_id is None:
        return None
    url = reverse("admin:sessions_app_session_change", args=[session_id])
    return short_id(session_id, url=url, what="session id")


def _run_cell(run_id: Any) -> SafeString | None:
    # A run opens at its timeline, as in the runs list.
    if run_id is None:
        return None
    url = reverse("admin:runs_app_run_timeline", args=[run_id])
    return short_id(run_id, url=url, what="run id")


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
    # The value is the form's own field, never the model's (see MemoryEntryForm).
    exclude = ["value"]
    list_display = [
        "key_column",
        "value_excerpt",
        "scope",
        "owner_of",
        "agent",
        "version",
        "written_by",
        time_column("expires_at", "Expires"),
        time_column("updated_at", "Updated"),
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

    def get_changelist(self, request: HttpRequest, **kwargs: Any) -> type[ChangeList]:
        # Its field filters say what is wrong with a value, as the audit lists' do.
        return CheckedChangeList

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> list[str]:
        # Which entry it is (scope, owner, key) is fixed once it exists.
        fixed = ["key", "scope", "session", "user", "agent"] if obj is not None else []
        return [*fixed, *self.readonly_fields]

    def get_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        # The value comes first on an entry's page, after the key on a new one's.
        fields = [name for name in super().get_fields(request, obj) if name != "value"]
        at = fields.index("key") + 1 if "key" in fields else 0
        return [*fields[:at], "value", *fields[at:]]

    @admin.display(description="Key", ordering="key")
    def key_column(self, obj: MemoryEntry) -> SafeString:
        return excerpt_cell(obj.key, 200)

    @admin.display(description="Value")
    def value_excerpt(self, obj: MemoryEntry) -> SafeString:
        return excerpt_cell(obj.value, 80)

    @admin.display(description="Owner")
    def owner_of(self, obj: MemoryEntry) -> SafeString | str:
        if obj.session_id:
            return _session_cell(obj.session_id) or ""
        return obj.user.get_username() if obj.user_id and obj.user else ""

    @admin.display(description="Written by")
    def written_by(self, obj: MemoryEntry) -> SafeString | str:
        if obj.written_by_run_id:
            return format_html("run {}", _run_cell(obj.written_by_run_id))
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
        "key_column",
        "scope",
        "version",
        "action",
        "change_summary",
        "actor_kind",
        "actor_user",
        "actor_run_link",
        time_column("created_at", "Time"),
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
        "change",
        "action",
        "actor_kind",
        "actor_user",
        "actor_run",
        "actor_tool_call",
        "created_at",
    )
    readonly_fields = fields

    def get_queryset(self, request: HttpRequest) -> QuerySet[MemoryRevision]:
        # The value of the version before each listed one, for the change column:
        # one correlated read of the (entry, version) index per row of the page.
        revisions: QuerySet[MemoryRevision] = super().get_queryset(request)
        earlier = _before(OuterRef("entry_id"), OuterRef("version"))
        return revisions.annotate(
            _before=Subquery(earlier.values("value")[:1], output_field=JSONField()),
            _had_before=Exists(earlier),
        )

    @admin.display(description="Key", ordering="key")
    def key_column(self, obj: MemoryRevision) -> SafeString:
        return excerpt_cell(obj.key, 200)

    @admin.display(description="Change")
    def change_summary(self, obj: MemoryRevision) -> SafeString:
        before, had_before = _previous(obj)
        return excerpt_cell(change_summary(obj.action, before, obj.value, had_before=had_before))

    @admin.display(description="Change against the version before")
    def change(self, obj: MemoryRevision) -> SafeString:
        before, _ = _previous(obj)
        after = None if obj.action == RevisionAction.DELETED else obj.value
        return diff_html(before, after)

    @admin.display(description="Run")
    def actor_run_link(self, obj: MemoryRevision) -> SafeString | None:
        return _run_cell(obj.actor_run_id)


def _before(entry_id: Any, version: Any) -> QuerySet[MemoryRevision]:
    """The revisions of ``entry_id`` before ``version``, the latest first."""
    return MemoryRevision.objects.filter(entry_id=entry_id, version__lt=version).order_by(
        "-version"
    )


def _previous(revision: MemoryRevision) -> tuple[Any, bool]:
    """The value of the revision before ``revision`` and whether there is one: read
    with the page's rows (see get_queryset), or on its own for a revision's page."""
    if hasattr(revision, "_had_before"):
        return getattr(revision, "_before", None), bool(revision._had_before)
    previous = _before(revision.entry_id, revision.version).values_list("value", flat=True)
    found = list(previous[:1])
    return (found[0], True) if found else (None, False)
