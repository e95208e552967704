"""Filters of the memory list."""

from __future__ import annotations

import json
from typing import Any

import django_filters
from django.db.models import Q, QuerySet, TextField
from django.db.models.functions import Cast

from goaai.api.filters import FilterSet
from goaai.runtime.vocabulary import MemoryScope, choices
from memory_app.models import MemoryEntry
from memory_app.selectors import expired, unexpired


class MemoryFilter(FilterSet):
    scope = django_filters.ChoiceFilter(choices=choices(MemoryScope))
    session = django_filters.UUIDFilter(field_name="session_id")
    user = django_filters.NumberFilter(
        field_name="user_id",
        label="A user's id (user scope).",
        min_value=1,
        max_value=2**63 - 1,
        decimal_places=0,
    )
    agent = django_filters.CharFilter()
    key = django_filters.CharFilter()
    q = django_filters.CharFilter(method="search", label="Text in the key or the value.")
    expired = django_filters.ChoiceFilter(
        choices=[("true", "true"), ("false", "false")],
        method="by_expiry",
        label="true: only entries whose expiry has passed and that are not purged yet "
        "(for an audit); false, the default: only live entries.",
    )

    class Meta:
        model = MemoryEntry
        fields = ["scope", "session", "user", "agent", "key"]

    def filter_queryset(self, queryset: QuerySet[Any]) -> QuerySet[Any]:
        # Expired entries are gone for every reader; only an audit asks for them.
        if self.form.cleaned_data.get("expired") != "true":
            queryset = queryset.filter(unexpired())
        return super().filter_queryset(queryset)

    def by_expiry(self, queryset: QuerySet[Any], name: str, value: str) -> QuerySet[Any]:
        return queryset.filter(expired()) if value == "true" else queryset

    def search(self, queryset: QuerySet[Any], name: str, value: str) -> QuerySet[Any]:
        # The value is JSON text: searching it finds words inside strings too. SQLite
        # keeps non-ASCII characters as \uXXXX escapes (and both databases escape
        # quotes), so the escaped form of the search is looked for as well.
        text = Q(key__icontains=value) | Q(_value_text__icontains=value)
        escaped = json.dumps(value)[1:-1]
        if escaped != value:
            text |= Q(_value_text__icontains=escaped)
        return queryset.alias(_value_text=Cast("value", TextField())).filter(text)
