"""Filters of the session list."""

from __future__ import annotations

from typing import Any

import django_filters
from django.db.models import QuerySet

from goaai.api.filters import CreatedRangeFilterSet
from goaai.runtime.vocabulary import SESSION_STATUS_CHOICES
from sessions_app.models import Session


class SessionFilter(CreatedRangeFilterSet):
    status = django_filters.ChoiceFilter(choices=SESSION_STATUS_CHOICES)
    agent = django_filters.CharFilter()
    q = django_filters.CharFilter(method="search", label="Text in the title.")
    metadata_field = "metadata"

    class Meta:
        model = Session
        fields = ["status", "agent"]

    def search(self, queryset: QuerySet[Any], name: str, value: str) -> QuerySet[Any]:
        return queryset.filter(title__icontains=value)
