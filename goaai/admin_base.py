"""Admin building blocks shared by the apps: read-only audit pages that stay fast on
tables with millions of rows, and the filters operators need."""

from __future__ import annotations

import csv
import datetime as dt
import json
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from django.contrib import admin
from django.core.paginator import Paginator
from django.core.serializers.json import DjangoJSONEncoder
from django.db.models import Count, ForeignKey, IntegerField, Model, OuterRef, Q, QuerySet, Subquery
from django.db.models.fields.json import KeyTransform
from django.http import HttpRequest, HttpResponse, StreamingHttpResponse
from django.urls import reverse
from django.utils import timezone
from django.utils.dateparse import parse_date, parse_datetime
from django.utils.functional import cached_property
from django.utils.html import format_html

from goaai.runtime import rt

# Changelists count at most this many rows; past it they say "10,000+".
COUNT_CAP = 10_000


class BoundedCountPaginator(Paginator):  # type: ignore[type-arg]
    """Counts at most ``COUNT_CAP + 1`` rows (``COUNT(*)`` over a ``LIMIT``ed
    subquery), so a changelist over millions of rows costs what a page costs."""

    @cached_property
    def count(self) -> int:
        object_list: Any = self.object_list
        if isinstance(object_list, QuerySet):
            # Without the ordering: the count is the same, and a filter can then be
            # counted through its own index instead of along the ordering's.
            return int(object_list.order_by()[: COUNT_CAP + 1].count())
        return len(object_list)


class ReadOnlyAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    """An admin for audit records: browsable, never added, edited or deleted here.

    The records are written by services as agents work; an edit by hand would make
    the audit trail lie.
    """

    # Huge tables: never COUNT(*) the table, filtered or not.
    show_full_result_count = False
    paginator = BoundedCountPaginator
    list_per_page = 100

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


def admin_id_link(model: type[Model], pk: Any, label: str | None = None) -> str:
    """A link to a row's admin page from its id alone (no query for the row)."""
    if pk is None:
        return ""
    meta = model._meta
    url = reverse(f"admin:{meta.app_label}_{meta.model_name}_change", args=[pk])
    return format_html('<a href="{}">{}</a>', url, label or str(pk))


def admin_fk_link(obj: Model, field: str, label: str | None = None) -> str:
    """A link to the admin page of the row ``obj.field`` points at, from the stored
    id alone (no query for the row)."""
    relation = obj._meta.get_field(field)
    target = relation.related_model
    if not isinstance(relation, ForeignKey) or not isinstance(target, type):
        raise TypeError(f"{type(obj).__name__}.{field} is not a foreign key.")
    return admin_id_link(target, getattr(obj, relation.attname), label)


def related_count(model: type[Model], field: str) -> Subquery:
    """How many ``model`` rows point at the outer row through ``field``, as a
    correlated subquery (evaluated for the rows a page shows)."""
    rows = (
        model._default_manager.filter(**{field: OuterRef("pk")})
        .order_by()
        .values(field)
        .annotate(n=Count("*"))
        .values("n")
    )
    return Subquery(rows, output_field=IntegerField())


# Filters


class InputFilter(admin.ListFilter):
    """A filter with a text box, for values too many to list (owners, labels, dates).

    Subclasses name their ``parameter_name`` and turn the typed value into a
    condition in :meth:`condition`; a value it cannot read filters nothing and says so.
    """

    template = "admin/input_filter.html"
    parameter_name: str
    placeholder = ""

    def __init__(
        self, request: HttpRequest, params: dict[str, Any], model: Any, model_admin: Any
    ) -> None:
        super().__init__(request, params, model, model_admin)
        raw = params.pop(self.parameter_name, None)
        if isinstance(raw, list):
            raw = raw[-1] if raw else None
        self.value = (raw or "").strip()
        # Submitting the box keeps every other filter, the search and the ordering.
        self.others = [
            (key, value)
            for key, values in request.GET.lists()
            if key not in (self.parameter_name, "p")
            for value in values
        ]

    def has_output(self) -> bool:
        return True

    def expected_parameters(self) -> list[str | None]:
        return [self.parameter_name]

    def choices(self, changelist: Any) -> Iterator[Any]:
        # The template renders one text box; "all" clears the value.
        yield {
            "parameter": self.parameter_name,
            "value": self.value,
            "placeholder": self.placeholder,
            "clear_url": changelist.get_query_string(remove=[self.parameter_name]),
            "others": self.others,
        }

    def condition(self, value: str) -> Q | None:
        raise NotImplementedError

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        if not self.value:
            return queryset
        condition = self.condition(self.value)
        if condition is None:
            return queryset.none()
        return queryset.filter(condition)


def owner_filter(lookup: str) -> type[InputFilter]:
    """Rows whose owner (through ``lookup``, e.g. ``session__owner``) has this username."""

    class OwnerFilter(InputFilter):
        title = "owner (username)"
        parameter_name = "owner"
        placeholder = "username"

        def condition(self, value: str) -> Q | None:
            return Q(**{f"{lookup}__username": value})

    return OwnerFilter


class LabelFilter(InputFilter):
    """Runs carrying a label, typed as ``key:value``."""

    title = "label (key:value)"
    parameter_name = "label"
    placeholder = "tier:free"

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        key, sep, value = self.value.partition(":")
        if not self.value:
            return queryset
        if not sep or not key:
            return queryset.none()
        matching: QuerySet[Any] = queryset.alias(_label=KeyTransform(key, "labels"))
        return matching.filter(_label=value)


def _moment(value: str, *, end: bool) -> dt.datetime | None:
    """A typed date (``2026-11-29``, the whole day) or date and time (ISO 8601), in
    UTC; ``None`` for what no calendar has (``2026-02-30``) or what lies outside the
    years 1 to 9999 in UTC. Until the last day there is means no end at all."""
    try:
        day = parse_date(value) if len(value) == 10 else None
        moment = None if day is not None else parse_datetime(value)
    except ValueError:
        return None
    if day is not None:
        if end and day == dt.date.max:
            return dt.datetime.max.replace(tzinfo=dt.UTC)
        moment = dt.datetime.combine(day + dt.timedelta(days=1 if end else 0), dt.time())
    if moment is None:
        return None
    if timezone.is_naive(moment):
        return moment.replace(tzinfo=dt.UTC)
    try:
        return moment.astimezone(dt.UTC)
    except OverflowError:
        return None


def date_range_filters(field: str, label: str = "created") -> list[type[InputFilter]]:
    """Two filters, from and until, on a date-time ``field``."""

    class From(InputFilter):
        title = f"{label} from"
        parameter_name = f"{field}_from"
        placeholder = "YYYY-MM-DD"

        def condition(self, value: str) -> Q | None:
            moment = _moment(value, end=False)
            return None if moment is None else Q(**{f"{field}__gte": moment})

    class Until(InputFilter):
        title = f"{label} until"
        parameter_name = f"{field}_until"
        placeholder = "YYYY-MM-DD"

        def condition(self, value: str) -> Q | None:
            moment = _moment(value, end=True)
            return None if moment is None else Q(**{f"{field}__lt": moment})

    return [From, Until]


def choices_filter(
    title: str, lookup: str, values: Callable[[], Iterable[str]]
) -> type[admin.SimpleListFilter]:
    """A filter whose choices come from code (agents, tool names), not from a
    ``SELECT DISTINCT`` over a table of millions of rows."""

    class ChoicesFilter(admin.SimpleListFilter):
        parameter_name = lookup

        def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
            return [(value, value) for value in sorted(set(values()))]

        def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
            if self.value() is None:
                return queryset
            return queryset.filter(**{lookup: self.value()})

    ChoicesFilter.title = title
    return ChoicesFilter


def agent_ids() -> list[str]:
    return [agent.id for agent in rt.agents.all()]


def tool_names() -> list[str]:
    # An MCP server that cannot be reached leaves its tools out of the filter.
    return [name for agent in rt.agents.all() for name in rt.agents.tools_of(agent, unavailable={})]


# Exports


def _cell(value: Any) -> Any:
    """A CSV cell: JSON values as JSON; text that a spreadsheet would run as a
    formula (=, +, -, @ first) is prefixed with a quote, so it stays text."""
    if isinstance(value, dict | list):
        value = json.dumps(value)
    if isinstance(value, str) and value[:1] in ("=", "+", "-", "@", "\t", "\r"):
        return "'" + value
    return value


class _Echo:
    """A file-like object whose write returns the line, for streaming CSV."""

    def write(self, value: str) -> str:
        return value


def json_download(filename: str, document: dict[str, Any]) -> HttpResponse:
    """A JSON document as a file to save."""
    body = json.dumps(document, cls=DjangoJSONEncoder, ensure_ascii=False)
    response = HttpResponse(body, content_type="application/json")
    response["Content-Disposition"] = f'attachment; filename="{filename}"'
    return response


def csv_download(
    filename: str, queryset: QuerySet[Any], columns: list[str], header: list[str] | None = None
) -> StreamingHttpResponse:
    """``columns`` of ``queryset`` as a CSV file, written row by row as it is sent;
    JSON values (labels, metadata) are written as JSON."""
    writer = csv.writer(_Echo())

    def lines() -> Iterator[str]:
        yield writer.writerow(header or columns)
        for row in queryset.values_list(*columns).iterator():
            yield writer.writerow([_cell(value) for value in row])

    response = StreamingHttpResponse(lines(), content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="{filename}"'
    return response
