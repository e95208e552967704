"""Admin building blocks shared by the apps: read-only audit pages that stay fast on
tables with millions of rows, and the filters operators need."""

from __future__ import annotations

import csv
import datetime as dt
import json
import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

from django.contrib import admin, messages
from django.contrib.admin.filters import ChoicesFieldListFilter, FieldListFilter
from django.contrib.admin.options import IncorrectLookupParameters
from django.contrib.admin.views.main import ChangeList
from django.core.exceptions import ValidationError
from django.core.paginator import Paginator
from django.core.serializers.json import DjangoJSONEncoder
from django.db.models import Count, ForeignKey, IntegerField, Model, OuterRef, Q, QuerySet, Subquery
from django.http import HttpRequest, HttpResponse, StreamingHttpResponse
from django.urls import reverse
from django.utils import timezone
from django.utils.dateparse import parse_date, parse_datetime
from django.utils.functional import cached_property
from django.utils.html import format_html

from goaai.api.filters import json_key_equals
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

    def get_changelist(self, request: HttpRequest, **kwargs: Any) -> type[ChangeList]:
        return CheckedChangeList

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


# A record's page shows a field when its test passes (fields without one always).
FieldTest = Callable[[Any], bool]


def shown_fields(fields: Sequence[Any], obj: Any, shown_when: Mapping[str, FieldTest]) -> list[Any]:
    """``fields`` without those whose test in ``shown_when`` fails for ``obj``: a
    record's page shows what the record holds, not every column it could hold (no
    "Error retryable: no" on a run that did not fail)."""
    return [name for name in fields if name not in shown_when or shown_when[name](obj)]


def holds(attribute: str) -> FieldTest:
    """The test of a field shown when ``attribute`` holds something (not ``None``,
    ``""``, ``0``, ``False``, ``[]`` or ``{}``)."""

    def test(obj: Any) -> bool:
        return bool(getattr(obj, attribute))

    return test


def never(obj: Any) -> bool:
    """The test of a field kept for the machinery (digests, fingerprints): never shown."""
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


class FilterValueError(ValueError):
    """A value given to a filter (typed in its box, or in a link) that it cannot
    use; the message says what it expects instead."""


# How much of a refused value the message repeats.
_SHOWN_VALUE = 80


def refuse_filter_value(request: HttpRequest, parameter: str, value: str, why: str) -> None:
    """Tell the operator that the value of ``parameter`` was refused, and why: the
    list then shows nothing (never every row, as if the filter were not there).
    Said once a page, however often the list is filtered (its counts filter again)."""
    said: set[tuple[str, str]] = request.__dict__.setdefault("_goaai_refused_filters", set())
    if (parameter, value) in said:
        return
    said.add((parameter, value))
    shown = value if len(value) <= _SHOWN_VALUE else value[: _SHOWN_VALUE - 1] + "…"
    messages.error(
        request,
        f"Filter {parameter}={shown!r} was not applied: {why} Nothing is listed until "
        "it is corrected or cleared.",
        fail_silently=True,
    )


def _reason(wrong: IncorrectLookupParameters) -> str:
    """What Django found wrong with a lookup, in its own words."""
    cause = wrong.args[0] if wrong.args else wrong
    if isinstance(cause, ValidationError):
        return " ".join(cause.messages)
    return str(cause).rstrip(".") + "."


class CheckedChangeList(ChangeList):
    """A changelist whose field filters (``"scope"``, ``"requires_approval"``)
    refuse what they cannot use as goaai's own filters do: a value that is not one
    of the field's choices, or not of its type (``requires_approval__exact=maybe``),
    lists nothing and says so. Django would list every row instead: silently for an
    unknown choice, and by sending the page back without any filter for the rest."""

    def get_filters(self, request: HttpRequest) -> Any:
        found = super().get_filters(request)
        self.refused = False
        for spec in found[0]:
            if isinstance(spec, ChoicesFieldListFilter) and spec.lookup_val:
                self.refused |= _refuse_unknown_choices(request, spec)
        return found

    def get_queryset(self, request: HttpRequest, exclude_parameters: Any = None) -> Any:
        try:
            queryset = super().get_queryset(request, exclude_parameters)
        except IncorrectLookupParameters as wrong:
            if not hasattr(self, "filter_specs"):
                raise
            for parameter, values in self._field_lookups().items():
                refuse_filter_value(request, parameter, values[-1], _reason(wrong))
            return self.root_queryset.none()
        return queryset.none() if self.refused else queryset

    def _field_lookups(self) -> dict[str, list[str]]:
        """The lookups of the query string that no goaai filter took (Django's field
        filters', and lookups typed by hand)."""
        taken = {
            parameter
            for spec in self.filter_specs
            if not isinstance(spec, FieldListFilter)
            for parameter in spec.expected_parameters()
        }
        lookups: dict[str, list[str]] = self.get_filters_params()
        return {key: values for key, values in lookups.items() if key not in taken}


def _refuse_unknown_choices(request: HttpRequest, spec: ChoicesFieldListFilter) -> bool:
    known = [str(value) for value, _ in spec.field.flatchoices]
    # Django keeps every value the query string gave the parameter.
    given: list[str] = list(spec.lookup_val or ())
    unknown = [value for value in given if value not in known]
    for value in unknown:
        refuse_filter_value(
            request, spec.lookup_kwarg, value, f"expected one of {', '.join(known)}."
        )
    return bool(unknown)


class InputFilter(admin.ListFilter):
    """A filter with a text box, for values too many to list (owners, labels, dates).

    Subclasses name their ``parameter_name`` and turn the typed value into a
    condition in :meth:`condition`; a value it cannot read filters everything out
    and the page says what was wrong with it (:func:`refuse_filter_value`).
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

    def condition(self, value: str) -> Q:
        """The condition ``value`` stands for; :class:`FilterValueError` saying what
        is expected when it stands for none."""
        raise NotImplementedError

    def filtered(self, queryset: QuerySet[Any], value: str) -> QuerySet[Any]:
        """``queryset`` narrowed to what ``value`` asks for (by :meth:`condition`)."""
        return queryset.filter(self.condition(value))

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        if not self.value:
            return queryset
        try:
            return self.filtered(queryset, self.value)
        except FilterValueError as refused:
            refuse_filter_value(request, self.parameter_name, self.value, str(refused))
            return queryset.none()


# Django's own limit on usernames.
_USERNAME_LENGTH = 150


def owner_filter(lookup: str) -> type[InputFilter]:
    """Rows whose owner (through ``lookup``, e.g. ``session__owner``) has this username."""

    class OwnerFilter(InputFilter):
        title = "owner (username)"
        parameter_name = "owner"
        placeholder = "username"

        def condition(self, value: str) -> Q:
            if len(value) > _USERNAME_LENGTH:
                raise FilterValueError(
                    f"expected a username, which has at most {_USERNAME_LENGTH} characters."
                )
            return Q(**{f"{lookup}__username": value})

    return OwnerFilter


class LabelFilter(InputFilter):
    """Runs carrying a label, typed as ``key:value``."""

    title = "label (key:value)"
    parameter_name = "label"
    placeholder = "tier:free"

    def filtered(self, queryset: QuerySet[Any], value: str) -> QuerySet[Any]:
        key, sep, label = value.partition(":")
        if not sep or not key:
            raise FilterValueError(
                "expected a label as key:value, such as tier:free (the value may be empty)."
            )
        return json_key_equals(queryset, "labels", key, [label])


_EXPECTED_MOMENT = (
    "expected a date (YYYY-MM-DD) or an ISO 8601 date-time, such as 2026-12-02T14:00:00+00:00"
)
# An offset whose "+" arrived as a space (a link that did not encode it):
# "2026-12-02T14:00:00 00:00" is "2026-12-02T14:00:00+00:00".
_SPACED_OFFSET = re.compile(r"^(.+[T ]\d{2}:\d{2}(?::\d{2}(?:[.,]\d+)?)?) (\d{2}(?::?\d{2})?)$")


def _moment(value: str, *, end: bool) -> dt.datetime:
    """A typed date (``2026-11-29``, the whole day) or date and time (ISO 8601), in
    UTC; :class:`FilterValueError` for what is neither, what no calendar has
    (``2026-02-30``) and what lies outside the years 1 to 9999 in UTC. Until the last
    day there is means no end at all."""
    text = _SPACED_OFFSET.sub(r"\1+\2", value)
    try:
        day = parse_date(text) if len(text) == 10 else None
        moment = None if day is not None else parse_datetime(text)
    except ValueError as impossible:
        # What the calendar refuses: "month must be in 1..12", "year 0 is out of range".
        raise FilterValueError(f"no calendar has it ({impossible}); {_EXPECTED_MOMENT}.") from None
    if day is not None:
        if end and day == dt.date.max:
            return dt.datetime.max.replace(tzinfo=dt.UTC)
        moment = dt.datetime.combine(day + dt.timedelta(days=1 if end else 0), dt.time())
    if moment is None:
        raise FilterValueError(f"{_EXPECTED_MOMENT}.")
    if timezone.is_naive(moment):
        return moment.replace(tzinfo=dt.UTC)
    try:
        return moment.astimezone(dt.UTC)
    except OverflowError:
        raise FilterValueError("it lies outside the years 1 to 9999 in UTC.") from None


def date_range_filters(
    field: str, label: str = "created", *, parameter: str = ""
) -> list[type[InputFilter]]:
    """Two filters, from and until, on a date-time ``field`` (through a relation
    too: ``run__created_at``), named ``<parameter>_from`` and ``<parameter>_until``
    (``parameter`` is ``field`` unless given)."""
    name = parameter or field

    class From(InputFilter):
        title = f"{label} from"
        parameter_name = f"{name}_from"
        placeholder = "YYYY-MM-DD"

        def condition(self, value: str) -> Q:
            return Q(**{f"{field}__gte": _moment(value, end=False)})

    class Until(InputFilter):
        title = f"{label} until"
        parameter_name = f"{name}_until"
        placeholder = "YYYY-MM-DD"

        def condition(self, value: str) -> Q:
            return Q(**{f"{field}__lt": _moment(value, end=True)})

    return [From, Until]


def choices_filter(
    title: str, lookup: str, values: Callable[[], Iterable[str]], *, parameter: str = ""
) -> type[admin.SimpleListFilter]:
    """A filter whose choices come from code (agents, models, tool names), not from
    a ``SELECT DISTINCT`` over a table of millions of rows. A value that is not a
    choice filters too (the rows of an agent since removed stay reachable by link).
    Its URL parameter is ``parameter``, or ``lookup`` unless given."""

    class ChoicesFilter(admin.SimpleListFilter):
        parameter_name = parameter or lookup

        def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
            return [(value, value) for value in sorted(set(values()))]

        def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
            if self.value() is None:
                return queryset
            return queryset.filter(**{lookup: self.value()})

    ChoicesFilter.title = title
    return ChoicesFilter


def vocabulary_filter(
    title: str,
    lookup: str,
    vocabulary: Iterable[tuple[str, str]],
    *,
    parameter: str = "",
    also: Q | None = None,
) -> type[admin.SimpleListFilter]:
    """A filter over a closed set of values (statuses, error kinds), in the order
    given: a value outside it is refused with the list of those it takes. ``also``
    is a condition every filtered row meets besides (a waiting run's status)."""
    choices = [(str(value), str(label)) for value, label in vocabulary]
    known = ", ".join(value for value, _ in choices)

    class VocabularyFilter(admin.SimpleListFilter):
        parameter_name = parameter or lookup

        def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
            return choices

        def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
            value = self.value()
            if value is None:
                return queryset
            if value not in dict(choices):
                why = f"expected one of {known}."
                refuse_filter_value(request, str(self.parameter_name), value, why)
                return queryset.none()
            matching = queryset.filter(**{lookup: value})
            return matching if also is None else matching.filter(also)

    VocabularyFilter.title = title
    return VocabularyFilter


def agent_ids() -> list[str]:
    return [agent.id for agent in rt.agents.all()]


def agent_models() -> list[str]:
    """The models the agents are set to use (``scripted``, ``<profile>:<model>``):
    what runs' and turns' ``model`` hold."""
    return [agent.model for agent in rt.agents.all()]


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
