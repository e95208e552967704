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
from runs_app.models import Run, Score, ToolCall, Turn
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
    "last_activity_at",
)
USAGE = ("input_tokens", "output_tokens", "cached_input_tokens", "cache_write_tokens")
USAGE += ("reasoning_tokens", "total_tokens", "cost")
# A run's columns, by the names the API gives them (a link by its target's name).
RUN_FIELDS = {
    "id": "id",
    "session": "session_id",
    "agent": "agent",
    "agent_version": "agent_version_number",
    "model": "model",
    "status": "status",
    "input": "input",
    "output": "output",
    "labels": "labels",
    "metadata": "metadata",
    "policy": "policy",
    "parent_run": "parent_run_id",
    "parent_tool_call": "parent_tool_call_id",
    "previous_run": "previous_run_id",
    "retry_of": "retry_of_id",
    "regenerates": "regenerates_id",
    "edit_of": "edit_of_id",
    "multitask": "multitask",
    "cancel_reason": "cancel_reason",
    "cancel_requested_at": "cancel_requested_at",
    "created_at": "created_at",
    "started_at": "started_at",
    "ended_at": "ended_at",
}
RUN_READ = (
    *RUN_FIELDS.values(),
    *USAGE,
    "unpriced_turns",
    "error_kind",
    "error_message",
    "error_retryable",
    "awaiting",
    "cancel_kind",
    "cancel_requested_by__username",
)
TURN_FIELDS = {
    "id": "id",
    "run": "run_id",
    "index": "index",
    "model": "model",
    "response_model": "response_model",
    "request_messages": "request_messages",
    "finish_reason": "finish_reason",
    "reasoning": "reasoning",
    "usage_estimated": "usage_estimated",
    "interruption": "interruption",
    "retries": "retries",
    "latency_ms": "latency_ms",
    "started_at": "started_at",
    "ended_at": "ended_at",
}
TURN_READ = (*TURN_FIELDS.values(), "response_text", "response_tool_calls", *USAGE[:-2], "cost")
TOOL_CALL_FIELDS = {
    "id": "id",
    "run": "run_id",
    "turn": "turn_id",
    "session": "session_id",
    "call_id": "call_id",
    "index": "index",
    "name": "name",
    "arguments": "arguments",
    "result": "result",
    "status": "status",
    "requires_approval": "requires_approval",
    "decision": "decision",
    "decision_reason": "decision_reason",
    "decided_by": "decided_by_id",
    "decided_at": "decided_at",
    "attempt": "attempt",
    "created_at": "created_at",
    "started_at": "started_at",
    "ended_at": "ended_at",
    "duration_ms": "duration_ms",
}
TOOL_CALL_READ = (*TOOL_CALL_FIELDS.values(), "error_kind", "error_message")
MEMORY_FIELDS = {
    "id": "id",
    "key": "key",
    "value": "value",
    "scope": "scope",
    "session": "session_id",
    "user": "user_id",
    "agent": "agent",
    "version": "version",
    "expires_at": "expires_at",
    "created_at": "created_at",
    "updated_at": "updated_at",
}
MEMORY_READ = (
    *MEMORY_FIELDS.values(),
    "written_by_kind",
    "written_by_user_id",
    "written_by_run_id",
    "written_by_tool_call_id",
)


def _found(row: dict[str, Any] | None) -> dict[str, Any]:
    if row is None:
        raise NotFound()
    return row


def _named(row: dict[str, Any], fields: dict[str, str]) -> dict[str, Any]:
    return {name: row[column] for name, column in fields.items()}


def _session(row: dict[str, Any]) -> dict[str, Any]:
    """A session row (read with its runs' sums) as the API shows one."""
    row["owner"] = {"id": row.pop("owner_id"), "username": row.pop("owner__username")}
    row["usage"] = {name: row.pop(f"runs_{name}") or 0 for name in RUN_TOTALS}
    return row


def _sessions(user: Any) -> Any:
    """The caller's sessions as rows, each with what its runs add up to."""
    return (
        Session.objects.filter(owner=user)
        .values(*SESSION_FIELDS)
        .annotate(**{f"runs_{name}": Sum(f"runs__{name}") for name in RUN_TOTALS})
    )


class BareSessionDetail(APIView):
    """GET: the caller's session row, with what its runs add up to."""

    def get(self, request: Request, session_id: str) -> Response:
        return Response(_session(_found(_sessions(request.user).filter(pk=session_id).first())))


class BareCursor(CursorPagination):
    """DRF's cursor pagination, 50 a page, the most recently active first."""

    page_size = 50
    ordering = "-last_activity_at"


class BareSessionList(APIView):
    """GET: a page of the caller's sessions, the most recently active first, each
    with what its runs add up to (one grouped queryset)."""

    def get(self, request: Request) -> Response:
        paginator = BareCursor()
        page = paginator.paginate_queryset(_sessions(request.user), request, view=self) or []
        return paginator.get_paginated_response([_session(row) for row in page])


def _run(row: dict[str, Any], user: Any) -> dict[str, Any]:
    """A run row as the API shows one: its links by name, its usage, error, wait,
    stop and duration, and the caller's feedback (one query)."""
    run = _named(row, RUN_FIELDS)
    run["usage"] = {name: row[name] for name in (*USAGE, "unpriced_turns")}
    run["error"] = (
        {
            "kind": row["error_kind"],
            "message": row["error_message"],
            "retryable": row["error_retryable"],
        }
        if row["error_kind"]
        else None
    )
    run["awaiting"] = row["awaiting"] if row["status"] == "awaiting_input" else None
    run["queued_behind"] = None
    run["stopped_by"] = (
        {"kind": row["cancel_kind"], "user": row["cancel_requested_by__username"]}
        if row["cancel_kind"]
        else None
    )
    started, ended = row["started_at"], row["ended_at"]
    run["duration_ms"] = (
        int((ended - started).total_seconds() * 1000) if started and ended else None
    )
    feedback = (
        Score.objects.filter(run_id=row["id"], author=user, name="feedback")
        .values("value", "comment")
        .first()
    )
    run["feedback"] = feedback
    return run


def _turn(row: dict[str, Any]) -> dict[str, Any]:
    turn = _named(row, TURN_FIELDS)
    turn["response"] = {"text": row["response_text"], "tool_calls": row["response_tool_calls"]}
    turn["truncated"] = row["finish_reason"] == "length"
    usage = {name: row[name] for name in USAGE if name != "total_tokens"}
    usage["total_tokens"] = sum(row[name] for name in USAGE[:4])
    turn["usage"] = usage
    turn["tool_calls"] = []
    return turn


def _tool_call(row: dict[str, Any]) -> dict[str, Any]:
    call = _named(row, TOOL_CALL_FIELDS)
    call["error"] = (
        {"kind": row["error_kind"], "message": row["error_message"]} if row["error_kind"] else None
    )
    return call


class BareRunDetail(APIView):
    """GET: the caller's run row, its turns and tool calls, its child runs' ids."""

    def get(self, request: Request, run_id: str) -> Response:
        runs = Run.objects.filter(pk=run_id, session__owner=request.user).values(*RUN_READ)
        run = _run(_found(runs.first()), request.user)
        turns = [
            _turn(row)
            for row in Turn.objects.filter(run_id=run_id).order_by("index").values(*TURN_READ)
        ]
        calls = ToolCall.objects.filter(run_id=run_id).order_by("index").values(*TOOL_CALL_READ)
        by_turn = {turn["id"]: turn["tool_calls"] for turn in turns}
        for call in calls:
            by_turn[call["turn_id"]].append(_tool_call(call))
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
        ).values(*MEMORY_READ)
        row = _found(rows.first())
        entry = _named(row, MEMORY_FIELDS)
        entry["written_by"] = {
            "kind": row["written_by_kind"],
            "user": row["written_by_user_id"],
            "run": row["written_by_run_id"],
            "tool_call": row["written_by_tool_call_id"],
        }
        return Response(entry)


class BareRunCreate(APIView):
    """POST {"input": ...}: one Run row in the caller's session, 201, answered as
    the API answers a run."""

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
        row = {column: getattr(run, column) for column in RUN_READ if "__" not in column}
        row["cancel_requested_by__username"] = None
        body = _run(row, request.user)
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
