"""Runs, turns, tool calls and a session's events."""

from __future__ import annotations

from typing import Any
from uuid import UUID

from django.db.models import QuerySet
from django.http import Http404, StreamingHttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import (
    OpenApiExample,
    OpenApiParameter,
    OpenApiResponse,
    extend_schema,
    extend_schema_view,
)
from drf_standardized_errors.openapi_validation_errors import extend_validation_errors
from rest_framework import mixins, status
from rest_framework.decorators import action
from rest_framework.exceptions import ValidationError
from rest_framework.request import Request
from rest_framework.response import Response

from goaai.access import ADDITION, CHANGE, allowed
from goaai.api.exceptions import Conflict
from goaai.api.pagination import Cursor, SeqPage
from goaai.api.views import ScopedViewSet
from goaai.runtime import rt
from goaai.runtime.errors import DuplicateIdempotencyKey
from runs_app.access import SESSION_EXPORT, canceled_by, run_owner_id
from runs_app.api.filters import RunFilter, ToolCallFilter, TurnFilter
from runs_app.api.serializers import (
    RunCancelSerializer,
    RunCreateSerializer,
    RunDetailSerializer,
    RunEventSerializer,
    RunRespondSerializer,
    RunSerializer,
    ToolCallSerializer,
    TurnSerializer,
)
from runs_app.api.throttles import (
    RunCreateTokenThrottle,
    RunCreateUserThrottle,
    check_run_throttles,
)
from runs_app.api.unavailable import ServiceUnavailable
from runs_app.export import session_document_stream
from runs_app.idempotency import (
    KEY_RULE,
    InvalidIdempotencyKey,
    idempotency_key_checked,
    request_fingerprint,
)
from runs_app.models import Run, ToolCall, Turn
from runs_app.scores import with_caller_feedback, without_caller_feedback
from runs_app.selectors import (
    run_add_steps,
    run_for_idempotency_key,
    run_row,
    run_with_stopper,
    with_queue,
    with_queue_known,
)
from runs_app.tasks import QueueUnavailable
from sessions_app.access import session_readable
from sessions_app.models import RunEvent, Session
from sessions_app.selectors import sessions_with_usage

# How the admin log words a decision on a waiting run's tool call.
DECIDED = {
    "approve": "Approved the tool call it waited on",
    "deny": "Denied the tool call it waited on",
}

IDEMPOTENCY_KEY = OpenApiParameter(
    "Idempotency-Key",
    OpenApiTypes.STR,
    OpenApiParameter.HEADER,
    description="Makes retries safe: the same key with the same body returns the run "
    "it created (200); the same key with another body is a 409. Keys are per session: "
    f"{KEY_RULE}.",
)


def _idempotency_key(request: Request) -> str | None:
    try:
        return idempotency_key_checked(request.headers.get("Idempotency-Key"))
    except InvalidIdempotencyKey:
        raise ValidationError({"Idempotency-Key": [f"{KEY_RULE}."]}, code="invalid") from None


def _replay(run: Run, fingerprint: str) -> Response:
    if run.request_fingerprint != fingerprint:
        raise Conflict(
            "This Idempotency-Key was used for a different request in this session.",
            code="idempotency_key_reused",
        )
    return Response(RunSerializer(run).data, status=status.HTTP_200_OK)


class TurnCursor(Cursor):
    """Turns read oldest first, as they happened."""

    ordering = "started_at"


class SessionScopedMixin:
    """Views under ``/sessions/{session_id}/``: the caller must be able to read the
    session (their own, or with the permission)."""

    kwargs: dict[str, Any]

    def session(self) -> Session:
        request: Request = self.request  # type: ignore[attr-defined]
        session = session_readable(request.user, self.kwargs["session_id"])
        if session is None:
            raise Http404(f"No {Session._meta.object_name} matches the given query.")
        return session


@extend_validation_errors(["invalid"], field_name="label", actions=["list"])
@extend_validation_errors(["invalid"], field_name="created_after", actions=["list"])
@extend_validation_errors(["invalid"], field_name="created_before", actions=["list"])
@extend_validation_errors(
    ["invalid", "too_many", "null_characters_not_allowed"], field_name="labels", actions=["create"]
)
@extend_validation_errors(
    ["invalid", "too_large", "null_characters_not_allowed"],
    field_name="metadata",
    actions=["create"],
)
@extend_validation_errors(["invalid"], field_name="Idempotency-Key", actions=["create"])
@extend_schema_view(
    list=extend_schema(summary="List a session's runs", description="Newest first."),
)
class SessionRunViewSet(SessionScopedMixin, mixins.ListModelMixin, ScopedViewSet):
    owner_lookup = "session__owner"
    conflict_actions = ("create",)
    serializer_class = RunSerializer
    pagination_class = Cursor
    filterset_class = RunFilter
    ordering_fields = ["created_at"]

    def base_queryset(self) -> QuerySet[Run]:
        if getattr(self, "swagger_fake_view", False):  # building the OpenAPI schema
            return Run.objects.none()
        runs = with_queue(Run.objects.filter(session=self.session()))
        # Who stopped a run is named with it (stopped_by), read in the same query.
        runs = runs.select_related("cancel_requested_by")
        return with_caller_feedback(runs, self.request.user)

    def get_throttles(self) -> list[Any]:
        if self.action == "create":
            return [RunCreateUserThrottle(), RunCreateTokenThrottle()]
        return super().get_throttles()

    def check_throttles(self, request: Request) -> None:
        # Starting a run is counted in create(), once the request is known to start
        # one: a refused body or a replayed Idempotency-Key costs no allowance.
        if self.action != "create":
            super().check_throttles(request)

    @extend_schema(
        summary="Start a run: post a message to the session",
        description="Creates a `pending` run of the session's agent and hands it to an "
        "executor; follow it with GET /runs/{id}/ or the session's event stream. A "
        "session runs one message at a time: while another of its runs is active, "
        "`multitask` (or the agent's `conversation.multitask`, `enqueue` by default) "
        "decides. `enqueue`: the run is created `pending` with `queued_behind` naming "
        "the run it waits for (a `run.queued` event), and starts once that run has "
        "ended. `interrupt`: the active run is canceled (its partial answer kept as "
        "its output) and the new run starts once it has stopped. `reject`: a 409 "
        "`run_active` whose `active_run` is the active run's id; nothing is created.",
        parameters=[IDEMPOTENCY_KEY],
        request=RunCreateSerializer,
        examples=[
            OpenApiExample(
                "A message",
                value={"input": "remember my favourite colour is green"},
                request_only=True,
            ),
            OpenApiExample(
                "Refused if a run is still answering",
                value={"input": "and in Paris?", "multitask": "reject"},
                request_only=True,
            ),
            OpenApiExample(
                "With labels and metadata",
                value={
                    "input": "what is 12 * 7?",
                    "labels": {"tier": "free"},
                    "metadata": {"ticket": "T-1042"},
                },
                request_only=True,
            ),
        ],
        responses={
            201: RunSerializer,
            200: OpenApiResponse(RunSerializer, description="A replay of an Idempotency-Key."),
            503: OpenApiResponse(
                description="Redis (the rate limit counters or the run queue) is unavailable "
                "for a moment: retry after `Retry-After` seconds. When the queue was, the "
                "run is recorded and starts once it is back; a retry with the same "
                "Idempotency-Key returns it."
            ),
        },
    )
    def create(self, request: Request, session_id: str) -> Response:
        session = self.session()
        # Reading someone's chat does not let one speak in it.
        self.require(Run, "add", session.owner_id)
        body = RunCreateSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        key = _idempotency_key(request)
        fingerprint = request_fingerprint(data) if key else ""
        if key is not None:
            earlier = run_for_idempotency_key(session_id=session.pk, key=key)
            if earlier is not None:
                return _replay(earlier, fingerprint)
        check_run_throttles(self, request)
        try:
            handle = rt.start(
                session.agent,
                data["input"],
                session=session.pk,
                labels=data["labels"],
                metadata=data["metadata"],
                created_by=request.user,
                idempotency_key=key,
                fingerprint=fingerprint,
                multitask=data.get("multitask"),
            )
        except DuplicateIdempotencyKey:
            # Two requests with the same key raced; the other one created the run.
            earlier = run_for_idempotency_key(session_id=session.pk, key=key) if key else None
            if earlier is None:
                raise
            return _replay(earlier, fingerprint)
        except QueueUnavailable as lost:
            # The run is recorded, pending: the reaper queues it once Redis is back.
            # Taking it back instead would turn a retry with the same key into a
            # replay of a canceled run.
            self.log_for_others(
                Run.objects.get(pk=lost.run_id), session.owner_id, ADDITION, "Started a run"
            )
            raise ServiceUnavailable(
                f"The run queue is unavailable for a moment. Run {lost.run_id} is recorded "
                "and starts once the queue is back; a retry with the same Idempotency-Key "
                "returns it.",
                code="queue_unavailable",
            ) from lost
        # As its creation left it (read back if the runtime did not give it), with
        # its place in the queue as its creation found it.
        created = handle.record if isinstance(handle.record, Run) else None
        run = without_caller_feedback(
            with_queue_known(created or run_row(run_id=handle.run_id), handle.queued_behind)
        )
        self.log_for_others(run, session.owner_id, ADDITION, "Started a run")
        response = Response(RunSerializer(run).data, status=status.HTTP_201_CREATED)
        response["Location"] = request.build_absolute_uri(f"/api/v1/runs/{run.pk}/")
        return response


@extend_validation_errors(["invalid"], field_name="label", actions=["list"])
@extend_validation_errors(["invalid"], field_name="created_after", actions=["list"])
@extend_validation_errors(["invalid"], field_name="created_before", actions=["list"])
@extend_validation_errors(["invalid"], field_name="non_field_errors", actions=["respond"])
@extend_schema_view(
    list=extend_schema(
        summary="List runs",
        description="Runs across your sessions, newest first (child runs included).",
    ),
    retrieve=extend_schema(
        summary="Get a run",
        description="The run with its turns in order, each with its tool calls.",
    ),
)
class RunViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, ScopedViewSet):
    owner_lookup = "session__owner"
    conflict_actions = ("cancel", "respond")
    pagination_class = Cursor
    filterset_class = RunFilter
    ordering_fields = ["created_at"]

    def base_queryset(self) -> QuerySet[Run]:
        runs = Run.objects.select_related("cancel_requested_by")
        if self.detail:
            # One run: its place in the queue and the caller's feedback are read
            # by the serializer only when it has them (cheaper than building
            # their subqueries into the run's query).
            return runs
        return with_caller_feedback(with_queue(runs), self.request.user)

    def get_serializer_class(self) -> Any:
        return RunDetailSerializer if self.action == "retrieve" else RunSerializer

    def retrieve(self, request: Request, pk: str) -> Response:
        # The run as get_object() finds one (another user's only with the
        # permission to read it, else not found), read in statements built once:
        # the API's most read answer.
        try:
            run = run_with_stopper(run_id=UUID(pk))
        except ValueError:
            run = None
        owner_id = run_owner_id(run) if run is not None else None
        if run is None or not allowed(request.user, Run, "view", owner_id):
            raise Http404("No Run matches the given query.")
        self.check_object_permissions(request, run)
        # The run comes with its turns and tool calls: someone else's needs the
        # permission to read those too.
        self.require(Turn, "view", owner_id)
        self.require(ToolCall, "view", owner_id)
        run_add_steps(run)
        return Response(self.get_serializer(run).data)

    @extend_schema(
        summary="Cancel a run",
        description="A pending or waiting run is canceled at once; a running one stops "
        "at its next step (its status shows `canceled` then). The run records who "
        "stopped it (`stopped_by`): `user` when the run is the caller's own, "
        "`operator` when staff stop someone else's. A run that has ended is a 409.",
        request=RunCancelSerializer,
        responses={200: RunSerializer},
    )
    @action(detail=True, methods=["post"], filterset_class=None)
    def cancel(self, request: Request, pk: str) -> Response:
        run = self.get_object()
        owner_id = run_owner_id(run)
        self.require(Run, "cancel", owner_id)
        body = RunCancelSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        if run.is_terminal:
            raise Conflict(f"Run {run.pk} has ended ({run.status}).", code="run_ended")
        reason = body.validated_data["reason"]
        if owner_id != request.user.pk:
            # The run's record says who stopped it.
            reason = canceled_by(request.user, reason)
        # Who asked is recorded: the run's own user, or an operator (stopped_by).
        rt.cancel_run(run.pk, reason=reason or "user_requested", by=request.user)
        self.log_for_others(run, owner_id, CHANGE, f"Canceled: {reason}")
        return Response(RunSerializer(Run.objects.get(pk=run.pk)).data)

    @extend_schema(
        summary="Answer what a run awaits",
        description="For a run in `awaiting_input`: approve or deny the tool call it "
        "waits on (`{tool_call, decision, reason?}`), or answer its question: in words "
        "(`{answer}`), or, when it offers `choices`, with those picked (`{choices: "
        "[...]}`: exactly one unless `multiple`). An answer in words that names a "
        "choice picks it; other words are allowed too. The answer becomes the result "
        "of the question's tool call. The run continues in the background. A choice the "
        "question does not offer, or more than one where it takes one, is a 400 naming "
        "it; an answer that no longer fits (the run is not waiting, or waits for "
        "something else) is a 409.",
        request=RunRespondSerializer,
        responses={200: RunSerializer},
        examples=[
            OpenApiExample(
                "Approve a tool call",
                value={"tool_call": "6e7969c6-df6f-4e3c-8178-d023f40c633e", "decision": "approve"},
                request_only=True,
            ),
            OpenApiExample(
                "Deny it, saying why",
                value={
                    "tool_call": "6e7969c6-df6f-4e3c-8178-d023f40c633e",
                    "decision": "deny",
                    "reason": "keep my notes",
                },
                request_only=True,
            ),
            OpenApiExample("Answer a question", value={"answer": "Paris"}, request_only=True),
            OpenApiExample(
                "Pick one of the choices it offers",
                value={"choices": ["coffee"]},
                request_only=True,
            ),
            OpenApiExample(
                "Pick several (a question with multiple: true)",
                value={"choices": ["tea", "water"]},
                request_only=True,
            ),
        ],
    )
    @action(detail=True, methods=["post"], filterset_class=None)
    def respond(self, request: Request, pk: str) -> Response:
        run = self.get_object()
        owner_id = run_owner_id(run)
        self.require(Run, "respond", owner_id)
        body = RunRespondSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        # Who decided is recorded on the tool call and in its tool_call.decided event.
        rt.respond(
            run.pk,
            tool_call=data.get("tool_call"),
            decision=data.get("decision", ""),
            reason=data["reason"],
            answer=data.get("answer"),
            choices=data.get("choices"),
            user=request.user,
        )
        what = DECIDED.get(data.get("decision", ""), "Answered the question it asked")
        self.log_for_others(run, owner_id, CHANGE, what)
        return Response(RunSerializer(Run.objects.get(pk=run.pk)).data)


@extend_validation_errors(["invalid"], field_name="created_after", actions=["list"])
@extend_validation_errors(["invalid"], field_name="created_before", actions=["list"])
@extend_schema_view(
    list=extend_schema(
        summary="List turns",
        description="Filter by run or session, and by whether the model showed its "
        "reasoning; oldest first.",
    ),
    retrieve=extend_schema(summary="Get a turn"),
)
class TurnViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, ScopedViewSet):
    owner_lookup = "run__session__owner"
    serializer_class = TurnSerializer
    filterset_class = TurnFilter

    pagination_class = TurnCursor
    ordering_fields = ["started_at"]

    def base_queryset(self) -> QuerySet[Turn]:
        return Turn.objects.all()


@extend_validation_errors(["invalid"], field_name="created_after", actions=["list"])
@extend_validation_errors(["invalid"], field_name="created_before", actions=["list"])
@extend_schema_view(
    list=extend_schema(
        summary="List tool calls",
        description="For audit: filter by run, session, tool name, status, error kind, "
        "agent and time; newest first.",
    ),
    retrieve=extend_schema(summary="Get a tool call"),
)
class ToolCallViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, ScopedViewSet):
    owner_lookup = "session__owner"
    serializer_class = ToolCallSerializer
    pagination_class = Cursor
    filterset_class = ToolCallFilter
    ordering_fields = ["created_at"]

    def base_queryset(self) -> QuerySet[ToolCall]:
        return ToolCall.objects.all()


@extend_validation_errors(["invalid"], field_name="after", actions=["list"])
@extend_validation_errors(["invalid"], field_name="limit", actions=["list"])
class SessionEventViewSet(SessionScopedMixin, ScopedViewSet):
    owner_lookup = "session__owner"
    serializer_class = RunEventSerializer
    pagination_class = SeqPage
    filterset_class = None

    def base_queryset(self) -> QuerySet[RunEvent]:
        if getattr(self, "swagger_fake_view", False):  # building the OpenAPI schema
            return RunEvent.objects.none()
        return RunEvent.objects.filter(session=self.session())

    @extend_schema(
        summary="A session's events after a sequence number",
        description="Events with `seq > after`, oldest first: how a client catches up "
        "on what it missed. `next` continues where this page ends; it is null once "
        "the client has caught up.",
    )
    def list(self, request: Request, session_id: str) -> Response:
        paginator: SeqPage = self.paginator  # type: ignore[assignment]
        after, limit = paginator.after_and_limit(request)
        rows = list(self.get_queryset().filter(seq__gt=after).order_by("seq")[:limit])
        paginator.paginate(rows, request, limit)
        return paginator.get_paginated_response(self.get_serializer(rows, many=True).data)


class SessionExportViewSet(ScopedViewSet):
    """A session's export: the session with what its runs recorded and its memory."""

    owner_lookup = "owner"
    filterset_class = None
    pagination_class = None

    def base_queryset(self) -> QuerySet[Session]:
        return sessions_with_usage(Session.objects.select_related("owner"))

    @extend_schema(
        summary="Export a session",
        description="One JSON document with the session, its runs, turns, tool calls, "
        "events and session memory, written out as it is read (a long session is "
        "never held whole in memory).",
        responses={200: OpenApiTypes.OBJECT},
    )
    def export(self, request: Request, pk: str) -> StreamingHttpResponse:
        session = self.get_object()
        # The export holds the session's whole record: someone else's needs the
        # permission to read each part.
        for model in SESSION_EXPORT:
            self.require(model, "view", session.owner_id)
        response = StreamingHttpResponse(
            session_document_stream(session), content_type="application/json"
        )
        response["Content-Disposition"] = f'attachment; filename="session-{session.pk}.json"'
        return response
