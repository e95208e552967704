"""Filters of the runs list on how long runs took: what the dashboard's latency
percentiles link to (``duration_from_ms``, ``working_from_ms``: the runs that took
at least that long, from start to end, or leaving out their waits for people)."""

from __future__ import annotations

import datetime as dt
from typing import Any

from django.db.models import DurationField, ExpressionWrapper, F, Q, QuerySet, Value

from goaai.admin_base import FilterValueError, InputFilter

# From start to end; the same less the time spent waiting for people.
DURATION = ExpressionWrapper(F("ended_at") - F("started_at"), output_field=DurationField())
WORKING = ExpressionWrapper(
    DURATION - F("paused_seconds") * Value(dt.timedelta(seconds=1)),
    output_field=DurationField(),
)
# Ten thousand years: more than any run takes, less than a timedelta holds.
LONGEST_MS = 10_000 * 365 * 86_400_000


def _milliseconds(value: str) -> dt.timedelta:
    try:
        ms = int(value)
    except ValueError:
        raise FilterValueError("a whole number of milliseconds, e.g. 1500") from None
    if not 0 <= ms <= LONGEST_MS:
        raise FilterValueError(f"a number of milliseconds from 0 to {LONGEST_MS}")
    return dt.timedelta(milliseconds=ms)


class DurationFrom(InputFilter):
    title = "took at least (ms, start to end)"
    parameter_name = "duration_from_ms"
    placeholder = "1500"
    expression: Any = DURATION

    def condition(self, value: str) -> Q:
        return Q(_took__gte=_milliseconds(value))

    def filtered(self, queryset: QuerySet[Any], value: str) -> QuerySet[Any]:
        narrowed: QuerySet[Any] = queryset.alias(_took=self.expression)
        return narrowed.filter(self.condition(value))


class WorkingFrom(DurationFrom):
    title = "worked at least (ms, waits left out)"
    parameter_name = "working_from_ms"
    expression = WORKING
