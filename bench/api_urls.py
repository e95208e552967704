"""URLs of the server that bench/api_throughput.py measures: goaai's own, and bare
DRF views of the same shapes under /bare/.

Each bare view is a plain ``APIView`` with DRF's settings as goaai configures them
(the same ``Authorization: Bearer`` authentication, ``IsAuthenticated``, the same
JSON renderer and parser). It reads or writes the same rows as the goaai endpoint
with one plain queryset each (``.values()``) and answers with a JSON body of the
same fields. It is what a minimal hand-written endpoint costs on the same server,
the same middleware and the same database.
"""

from __future__ import annotations

from typing import Any

from django.db import transaction
from django.db.models import Sum
from django.urls import include, path
from rest_framework import status
from rest_framework.exceptions import NotFound, ValidationError
from rest_framework.pagination import CursorPagination
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from memory_app.models import MemoryEntry
from runs_app.models import Run, ToolCall, Turn
from sessions_app.models import Session
from sessions_app.selectors import RUN_TOTALS

SESSION_FIELDS = (
    "id",
    "agent",
    "title",
    "status",
    "metadata",
    "owner_id",
    "owner__username",
    "last_event_seq",
    "created_at",
    "updated_at",
    "ended_at",
)
RUN_FIELDS = (
    "id",
    "session_id",
    "agent",
    "status",
    "input",
    "output",
    "labels",
    "metadata",
    "policy",
    "parent_run_id",
    "parent_tool_call_id",
    "input_tokens",
    "output_tokens",
    "total_tokens",
    "error_kind",
    "error_message",
    "awaiting",
    "cancel_requested_at",
    "created_at",
    "started_at",
    "ended_at",
)
TURN_FIELDS = (
    "id",
    "run_id",
    "index",
    "model",
    "request_messages",
    "response_text",
    "response_tool_calls",
    "input_tokens",
    "output_tokens",
    "latency_ms",
    "started_at",
    "ended_at",
)
TOOL_CALL_FIELDS = (
    "id",
    "run_id",
    "turn_id",
    "session_id",
    "call_id",
    "index",
    "name",
    "arguments",
    "result",
    "error_kind",
    "error_message",
    "status",
    "requires_approval",
    "decision",
    "decision_reason",
    "decided_by_id",
    "decided_at",
    "attempt",
    "created_at",
    "started_at",
    "ended_at",
    "duration_ms",
)
MEMORY_FIELDS = (
    "id",
    "key",
    "value",
    "scope",
    "session_id",
    "user_id",
    "agent",
    "version",
    "written_by_kind",
    "written_by_user_id",
    "written_by_run_id",
    "written_by_tool_call_id",
    "expires_at",
    "created_at",
    "updated_at",
)


def _found(row: dict[str, Any] | None) -> dict[str, Any]:
    if row is None:
        raise NotFound()
    return row


class BareSessionDetail(APIView):
    """GET: the caller's session row."""

    def get(self, request: Request, session_id: str) -> Response:
        rows = Session.objects.filter(pk=session_id, owner=request.user).values(*SESSION_FIELDS)
        row = _found(rows.first())
        row["owner"] = {"id": row.pop("owner_id"), "username": row.pop("owner__username")}
        return Response(row)


class BareCursor(CursorPagination):
    """DRF's cursor pagination, 50 a page, the most recently active first."""

    page_size = 50
    ordering = "-last_activity_at"


class BareSessionList(APIView):
    """GET: a page of the caller's sessions, the most recently active first, each
    with what its runs add up to (one grouped queryset)."""

    def get(self, request: Request) -> Response:
        rows = (
            Session.objects.filter(owner=request.user)
            .values(*SESSION_FIELDS, "last_activity_at")
            .annotate(**{f"runs_{name}": Sum(f"runs__{name}") for name in RUN_TOTALS})
        )
        paginator = BareCursor()
        page = paginator.paginate_queryset(rows, request, view=self) or []
        for row in page:
            row["owner"] = {"id": row.pop("owner_id"), "username": row.pop("owner__username")}
            row["usage"] = {name: row.pop(f"runs_{name}") or 0 for name in RUN_TOTALS}
        return paginator.get_paginated_response(page)


class BareRunDetail(APIView):
    """GET: the caller's run row, its turns and tool calls, its child runs' ids."""

    def get(self, request: Request, run_id: str) -> Response:
        runs = Run.objects.filter(pk=run_id, session__owner=request.user).values(*RUN_FIELDS)
        run = _found(runs.first())
        turns = list(Turn.objects.filter(run_id=run_id).order_by("index").values(*TURN_FIELDS))
        calls = ToolCall.objects.filter(run_id=run_id).order_by("index").values(*TOOL_CALL_FIELDS)
        by_turn: dict[Any, list[dict[str, Any]]] = {turn["id"]: [] for turn in turns}
        for call in calls:
            by_turn[call["turn_id"]].append(call)
        for turn in turns:
            turn["tool_calls"] = by_turn[turn["id"]]
        children = Run.objects.filter(parent_run_id=run_id).values_list("id", flat=True)
        run["child_runs"] = list(children)
        run["turns"] = turns
        return Response(run)


class BareMemoryResolve(APIView):
    """GET ?key=&session=: the session's entry for the key, in one queryset that
    also checks the session is the caller's."""

    def get(self, request: Request) -> Response:
        key = request.query_params.get("key", "")
        session_id = request.query_params.get("session", "")
        rows = MemoryEntry.objects.filter(
            scope="session", session_id=session_id, session__owner=request.user, key=key
        ).values(*MEMORY_FIELDS)
        return Response(_found(rows.first()))


class BareRunCreate(APIView):
    """POST {"input": ...}: one Run row in the caller's session, 201."""

    def post(self, request: Request, session_id: str) -> Response:
        data = request.data if isinstance(request.data, dict) else {}
        text = data.get("input")
        if not isinstance(text, str) or not text.strip():
            raise ValidationError({"input": ["A message."]})
        sessions = Session.objects.filter(pk=session_id, owner=request.user, status="active")
        session = _found(sessions.values("agent").first())
        with transaction.atomic():
            run = Run.objects.create(
                session_id=session_id,
                agent=session["agent"],
                input=text,
                created_by=request.user,
            )
        body = {field: getattr(run, field) for field in RUN_FIELDS}
        return Response(body, status=status.HTTP_201_CREATED)


urlpatterns = [
    path("bare/sessions/", BareSessionList.as_view()),
    path("bare/sessions/<uuid:session_id>/", BareSessionDetail.as_view()),
    path("bare/sessions/<uuid:session_id>/runs/", BareRunCreate.as_view()),
    path("bare/runs/<uuid:run_id>/", BareRunDetail.as_view()),
    path("bare/memory/resolve/", BareMemoryResolve.as_view()),
    path("", include("goaai.urls")),
]

handler404 = "goaai.api.errors.api_not_found"
handler500 = "goaai.api.errors.api_server_error"
