"""Scores on runs in the operators' console: users' feedback (thumbs up or down) and
any other judgement of a run, listed and filtered, read-only (they are what their
authors said)."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils.text import Truncator

from goaai.access import has_permission
from goaai.admin_base import ReadOnlyAdmin, admin_id_link, date_range_filters, owner_filter
from goaai.runtime.vocabulary import ScoreKind
from runs_app.models import Run, Score
from runs_app.scores import FEEDBACK, thumb_of

# Names offered in the name filter, at most (a filter lists, it does not page).
NAMES_LISTED = 50


class NameFilter(admin.SimpleListFilter):
    title = "name"
    parameter_name = "name"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        # The (name, created_at) index answers this without reading the table.
        names = Score.objects.order_by("name").values_list("name", flat=True).distinct()
        return [(name, name) for name in dict.fromkeys([FEEDBACK, *names[:NAMES_LISTED]])]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        value = self.value()
        return queryset if value is None else queryset.filter(name=value)


class ValueFilter(admin.SimpleListFilter):
    """Thumbs up or down (a boolean's 1 or 0), whatever the score's name."""

    title = "value"
    parameter_name = "value"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [("up", "up (1)"), ("down", "down (0)")]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        value = self.value()
        if value == "up":
            return queryset.filter(kind=ScoreKind.BOOLEAN, value__gte=0.5)
        if value == "down":
            return queryset.filter(kind=ScoreKind.BOOLEAN, value__lt=0.5)
        return queryset


@admin.register(Score)
class ScoreAdmin(ReadOnlyAdmin):
    list_display = [
        "name",
        "shown_value",
        "kind",
        "source",
        "author",
        "run_link",
        "comment_excerpt",
        "created_at",
    ]
    list_filter = [
        NameFilter,
        "source",
        ValueFilter,
        "kind",
        owner_filter("run__session__owner"),
        *date_range_filters("created_at"),
    ]
    search_fields = ["=run__id", "comment"]
    list_select_related = ["author"]
    ordering = ["-created_at"]
    fields = (
        "id",
        "run_link",
        "name",
        "kind",
        "shown_value",
        "value",
        "category",
        "source",
        "author",
        "comment",
        "created_at",
        "updated_at",
    )
    readonly_fields = fields

    # A score is part of its run's record: reading runs lets one read their scores.
    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return super().has_view_permission(request, obj) or has_permission(
            request.user, Run, "view"
        )

    def has_module_permission(self, request: HttpRequest) -> bool:
        return super().has_module_permission(request) or has_permission(request.user, Run, "view")

    @admin.display(description="Value", ordering="value")
    def shown_value(self, obj: Score) -> str:
        if obj.kind == ScoreKind.CATEGORY:
            return obj.category
        if obj.kind == ScoreKind.BOOLEAN:
            return thumb_of(obj.value) or ""
        return "" if obj.value is None else f"{obj.value:g}"

    @admin.display(description="Run")
    def run_link(self, obj: Score) -> str:
        return admin_id_link(Run, obj.run_id)

    @admin.display(description="Comment")
    def comment_excerpt(self, obj: Score) -> str:
        return Truncator(obj.comment.replace("\n", " ")).chars(80)
