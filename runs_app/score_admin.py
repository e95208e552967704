"""Scores on runs in the operators' console: users' feedback (thumbs up or down) and
any other judgement of a run, listed and filtered, read-only here (they are what
their authors said; reviewers add theirs from a run's timeline). Also the runs
list's filter by score (``helpfulness>=4``)."""

from __future__ import annotations

import math
from typing import Any

from django.contrib import admin, messages
from django.db.models import Q, QuerySet
from django.http import HttpRequest
from django.http.response import HttpResponseBase
from django.utils.safestring import SafeString

from goaai.access import has_permission
from goaai.admin_base import (
    FilterValueError,
    InputFilter,
    ReadOnlyAdmin,
    agent_ids,
    choices_filter,
    date_range_filters,
    owner_filter,
)
from goaai.admin_cells import excerpt_cell, time_column
from goaai.api.streaming import JSON_LINES, streamed
from goaai.runtime.vocabulary import ScoreKind
from runs_app.admin_display import run_cell
from runs_app.datasets import dataset_lines
from runs_app.models import Run, Score
from runs_app.score_filters import InvalidScoreFilter, runs_scored, scored_runs
from runs_app.scores import FEEDBACK, score_shown

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


class RunScoreFilter(InputFilter):
    """Runs by their scores, on the runs list: ``helpfulness`` (any score of that
    name), ``feedback=down``, ``tone=rude``, ``helpfulness>=4`` (see
    runs_app.score_filters)."""

    title = "score (name, name=value, name>=number)"
    parameter_name = "score"
    placeholder = "helpfulness>=4"

    def filtered(self, queryset: QuerySet[Any], value: str) -> QuerySet[Any]:
        try:
            return runs_scored(queryset, [value])
        except InvalidScoreFilter as invalid:
            raise FilterValueError(str(invalid)) from None


@admin.action(description="Export selected runs as a dataset (JSONL)", permissions=["dataset"])
def export_dataset(
    model_admin: Any, request: HttpRequest, queryset: QuerySet[Run]
) -> HttpResponseBase | None:
    """The selected runs that have a score, as a dataset of JSON lines (see
    runs_app.datasets); the page says how many selected runs had none."""
    selected = queryset.count()
    scored = scored_runs(queryset)
    kept = scored.count()
    if not kept:
        model_admin.message_user(
            request, "None of the selected runs has a score: nothing to export.", messages.WARNING
        )
        return None
    if kept < selected:
        model_admin.message_user(
            request,
            f"{selected - kept} of the {selected} selected runs have no score and were "
            f"left out of the dataset ({kept} exported).",
            messages.INFO,
        )
    return streamed(
        request, dataset_lines(scored), content_type=JSON_LINES, filename="scored-runs.jsonl"
    )


class AuthorFilter(InputFilter):
    title = "author (username)"
    parameter_name = "author"
    placeholder = "username"

    def condition(self, value: str) -> Q:
        return Q(author__username=value)


def _number(value: str) -> float:
    try:
        number = float(value)
    except ValueError:
        number = math.nan
    if not math.isfinite(number):
        raise FilterValueError("expected a number, such as 4 or 0.5.")
    return number


class ValueFromFilter(InputFilter):
    """Numeric and boolean scores whose value is at least this (a boolean is 1 or 0)."""

    title = "value at least"
    parameter_name = "value_from"
    placeholder = "e.g. 4"

    def condition(self, value: str) -> Q:
        return Q(value__gte=_number(value))


class ValueToFilter(InputFilter):
    """Numeric and boolean scores whose value is at most this."""

    title = "value at most"
    parameter_name = "value_to"
    placeholder = "e.g. 2.5"

    def condition(self, value: str) -> Q:
        return Q(value__lte=_number(value))


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
        time_column("created_at", "Created"),
    ]
    list_filter = [
        NameFilter,
        "source",
        ValueFilter,
        "kind",
        ValueFromFilter,
        ValueToFilter,
        AuthorFilter,
        choices_filter("run agent", "run__agent", agent_ids, parameter="agent"),
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
        return score_shown(obj)

    @admin.display(description="Run")
    def run_link(self, obj: Score) -> SafeString | None:
        return run_cell(obj.run_id)

    @admin.display(description="Comment")
    def comment_excerpt(self, obj: Score) -> SafeString | None:
        return excerpt_cell(obj.comment, 80) if obj.comment else None
