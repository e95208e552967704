"""Paging: cursors that stay stable while rows are being added."""

from __future__ import annotations

import datetime as dt
from typing import Any

from django.core.exceptions import ValidationError as DjangoValidationError
from django.db.models import Field, Model, QuerySet
from django.db.models.constants import LOOKUP_SEP
from django.utils import timezone
from rest_framework.exceptions import NotFound, ValidationError
from rest_framework.pagination import BasePagination, CursorPagination
from rest_framework.pagination import Cursor as CursorPosition
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.utils.urls import replace_query_param

MAX_PAGE_SIZE = 200


class Cursor(CursorPagination):
    """``{"next", "previous", "results"}``, newest first, ``?page_size=`` up to 200.

    A cursor points between rows rather than at an offset, so rows inserted while a
    client pages do not shift or repeat what it sees.
    """

    page_size = 50
    page_size_query_param = "page_size"
    max_page_size = MAX_PAGE_SIZE
    ordering = "-created_at"

    def paginate_queryset(
        self, queryset: QuerySet[Any], request: Request, view: Any = None
    ) -> list[Any] | None:
        self.model = queryset.model
        return super().paginate_queryset(queryset, request, view)

    def decode_cursor(self, request: Request) -> CursorPosition | None:
        """The cursor of the request, its position checked against the ordering field.

        A cursor is only base64 of a query string: a client can send one whose
        position no row could have (text for a time, a number past the column's
        range). That is an invalid cursor, as a garbled one is, not a database error.
        """
        cursor: CursorPosition | None = super().decode_cursor(request)
        if cursor is None or cursor.position is None:
            return cursor
        field = _ordering_field(self.model, self.ordering[0].lstrip("-"))
        try:
            position = _position(field, str(cursor.position))
        except (DjangoValidationError, ValueError, TypeError, OverflowError):
            raise NotFound(self.invalid_cursor_message) from None
        # (The stubs type a position as an int; DRF keeps the text of any field.)
        return cursor._replace(position=position)  # type: ignore[arg-type]


def _ordering_field(model: type[Model], attr: str) -> Field[Any, Any]:
    *relations, name = attr.split(LOOKUP_SEP)
    for relation in relations:
        model = model._meta.get_field(relation).related_model  # type: ignore[assignment]
    field = model._meta.get_field(name)
    if not isinstance(field, Field):  # a reverse relation: no ordering is one
        raise TypeError(f"Cannot page by {attr}.")
    return field


def _position(field: Field[Any, Any], raw: str) -> str:
    """``raw`` as a value of ``field`` the database can compare with, or an error."""
    if "\x00" in raw:
        raise ValueError("NUL in a cursor")
    value = field.to_python(raw)
    if value is None:
        raise ValueError("no position")
    field.run_validators(value)  # an integer column's range, a text column's length
    if isinstance(value, dt.datetime):
        # In UTC, and inside the years Python and both databases hold (an offset
        # past ±16 h or one that pushes year 1 or 9999 over the edge is not).
        if timezone.is_naive(value):
            value = timezone.make_aware(value, dt.UTC)
        value = value.astimezone(dt.UTC)
        if not dt.MINYEAR < value.year < dt.MAXYEAR:
            raise OverflowError("out of range")
    return str(value)


class SeqPage(BasePagination):
    """A session's events after a sequence number: ``?after=N&limit=M``, oldest first.

    ``next`` continues after the last event returned; it is ``null`` when the page
    was not full (the client has caught up).
    """

    default_limit = 100
    max_limit = 1000

    def after_and_limit(self, request: Request) -> tuple[int, int]:
        values: dict[str, int] = {}
        for name, default, low, high in (
            ("after", 0, 0, 2**62),
            ("limit", self.default_limit, 1, self.max_limit),
        ):
            raw = request.query_params.get(name)
            if raw is None or raw == "":
                values[name] = default
                continue
            try:
                value = int(raw)
            except ValueError:
                raise ValidationError({name: ["Must be an integer."]}) from None
            if not low <= value <= high:
                raise ValidationError({name: [f"Must be between {low} and {high}."]})
            values[name] = value
        return values["after"], values["limit"]

    def paginate(self, rows: list[Any], request: Request, limit: int) -> None:
        self.request = request
        self.next_after = rows[-1].seq if len(rows) == limit else None

    def get_paginated_response(self, data: Any) -> Response:
        url = self.request.build_absolute_uri()
        next_url = None
        if self.next_after is not None:
            next_url = replace_query_param(url, "after", self.next_after)
        return Response({"next": next_url, "previous": None, "results": data})

    def get_paginated_response_schema(self, schema: dict[str, Any]) -> dict[str, Any]:
        return {
            "type": "object",
            "required": ["next", "previous", "results"],
            "properties": {
                "next": {"type": "string", "format": "uri", "nullable": True},
                "previous": {"type": "string", "format": "uri", "nullable": True},
                "results": schema,
            },
        }

    def get_schema_operation_parameters(self, view: Any) -> list[dict[str, Any]]:
        return [
            {
                "name": "after",
                "in": "query",
                "required": False,
                "description": "Only events with a sequence number above this one.",
                "schema": {"type": "integer", "minimum": 0, "default": 0},
            },
            {
                "name": "limit",
                "in": "query",
                "required": False,
                "description": f"At most this many events (1 to {self.max_limit}).",
                "schema": {
                    "type": "integer",
                    "minimum": 1,
                    "maximum": self.max_limit,
                    "default": self.default_limit,
                },
            },
        ]
