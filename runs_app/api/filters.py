"""Filters of the run, turn and tool-call lists (the audit views)."""

from __future__ import annotations

from typing import Any

import django_filters
from django.db.models import Q, QuerySet
from rest_framework.exceptions import ValidationError

from goaai.api.filters import CreatedRangeFilterSet, UtcIsoDateTimeFilter, filter_json_key
from goaai.runtime.vocabulary import ErrorKind, RunStatus, ToolCallStatus, choices
from runs_app.models import Run, ToolCall, Turn


class RunFilter(CreatedRangeFilterSet):
    session = django_filters.UUIDFilter(field_name="session_id")
    status = django_filters.MultipleChoiceFilter(choices=choices(RunStatus))
    agent = django_filters.CharFilter()
    parent_run = django_filters.UUIDFilter(field_name="parent_run_id")
    label = django_filters.CharFilter(
        method="with_label", label="A label as key:value; repeat to require several."
    )
    q = django_filters.CharFilter(method="search", label="Text in the input or the output.")
    metadata_field = "metadata"

    class Meta:
        model = Run
        fields = ["session", "status", "agent", "parent_run"]

    def with_label(self, queryset: QuerySet[Any], name: str, value: str) -> QuerySet[Any]:
        for pair in self.data.getlist("label"):
            key, sep, wanted = pair.partition(":")
            if not sep:
                raise ValidationError({"label": ["Write a label as key:value."]}, code="invalid")
            queryset = filter_json_key(queryset, "labels", key, wanted, "label")
        return queryset

    def search(self, queryset: QuerySet[Any], name: str, value: str) -> QuerySet[Any]:
        return queryset.filter(Q(input__icontains=value) | Q(output__icontains=value))


class TurnFilter(CreatedRangeFilterSet):
    run = django_filters.UUIDFilter(field_name="run_id")
    session = django_filters.UUIDFilter(field_name="run__session_id")
    has_reasoning = django_filters.BooleanFilter(
        method="with_reasoning", label="Only turns whose model showed its reasoning (or none)."
    )
    created_after = UtcIsoDateTimeFilter(field_name="started_at", lookup_expr="gte")
    created_before = UtcIsoDateTimeFilter(field_name="started_at", lookup_expr="lt")

    class Meta:
        model = Turn
        fields = ["run", "session"]

    def with_reasoning(self, queryset: QuerySet[Any], name: str, value: bool) -> QuerySet[Any]:
        return queryset.exclude(reasoning="") if value else queryset.filter(reasoning="")


class ToolCallFilter(CreatedRangeFilterSet):
    run = django_filters.UUIDFilter(field_name="run_id")
    session = django_filters.UUIDFilter(field_name="session_id")
    name = django_filters.CharFilter()
    status = django_filters.MultipleChoiceFilter(choices=choices(ToolCallStatus))
    error_kind = django_filters.MultipleChoiceFilter(choices=choices(ErrorKind))
    agent = django_filters.CharFilter(field_name="run__agent")
    requires_approval = django_filters.BooleanFilter()

    class Meta:
        model = ToolCall
        fields = ["run", "session", "name", "status", "error_kind", "agent"]
