"""Redoing a run, and forking a session from one.

A retry, a regenerated answer and an edited message are new runs, linked to the run
they redo, that continue from the point before it: the run after them sees the new
branch, and the old runs stay recorded. A fork is a new session whose history is the
original's branch up to the run it was forked at.
"""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet
from drf_spectacular.utils import OpenApiResponse, extend_schema, inline_serializer
from rest_framework import serializers, status
from rest_framework.exceptions import PermissionDenied
from rest_framework.request import Request
from rest_framework.response import Response

from goaai.access import ADDITION
from goaai.api.fields import StrictCharField
from goaai.api.views import ScopedViewSet
from goaai.runtime import rt
from goaai.runtime.vocabulary import Redo
from runs_app.access import run_owner_id
from runs_app.api.serializers import MAX_INPUT_LENGTH, RunSerializer
from runs_app.api.throttles import (
    RunCreateTokenThrottle,
    RunCreateUserThrottle,
    check_run_throttles,
)
from runs_app.models import Run, SessionFork
from sessions_app.api.serializers import SessionSerializer
from sessions_app.models import Session
from sessions_app.selectors import sessions_with_usage


class RunEditSerializer(serializers.Serializer):  # type: ignore[type-arg]
    input = StrictCharField(
        max_length=MAX_INPUT_LENGTH, trim_whitespace=False, help_text="The message's new text."
    )

    def validate_input(self, value: str) -> str:
        if not value.strip():
            raise serializers.ValidationError("The message is empty.", code="blank")
        return value


class SessionForkSerializer(serializers.Serializer):  # type: ignore[type-arg]
    title = StrictCharField(
        max_length=200,
        required=False,
        allow_blank=True,
        default="",
        help_text="The new session's title; by default the original's, marked (fork).",
    )


ForkedSessionSerializer = inline_serializer(
    "ForkedSession",
    fields={
        "session": SessionSerializer(),
        "forked_from": inline_serializer(
            "ForkPoint",
            fields={
                "session": serializers.UUIDField(),
                "run": serializers.UUIDField(),
            },
        ),
    },
)

_CONFLICT = OpenApiResponse(
    description="`not_redoable`: the run cannot be redone that way (it is still under way, "
    "was called as a tool, or, for a retry, did not fail or stop), or `session_ended`."
)


_CREATED = {201: RunSerializer, 409: _CONFLICT}


class RunRedoViewSet(ScopedViewSet):
    """``/runs/{id}/retry/``, ``regenerate/``, ``edit/`` and ``fork/``: speaking in a
    conversation, so the caller must be allowed to start runs in it."""

    owner_lookup = "session__owner"
    conflict_actions = ("retry", "regenerate", "edit", "fork")
    # Refused to those who may read the conversation and not speak in it, and a
    # fork to anyone but its owner.
    forbidden_actions = ("retry", "regenerate", "edit", "fork")
    serializer_class = RunSerializer
    filterset_class = None
    pagination_class = None

    def base_queryset(self) -> QuerySet[Run]:
        return Run.objects.all()

    def get_throttles(self) -> list[Any]:
        if self.action in ("retry", "regenerate", "edit"):
            return [RunCreateUserThrottle(), RunCreateTokenThrottle()]
        return super().get_throttles()

    def check_throttles(self, request: Request) -> None:
        # A redo starts a run: counted in the action, once the body is valid, as
        # starting a run is.
        if self.action not in ("retry", "regenerate", "edit"):
            super().check_throttles(request)

    def _redo(self, request: Request, how: Redo, text: str | None = None) -> Response:
        run = self.get_object()
        owner_id = run_owner_id(run)
        self.require(Run, "add", owner_id)
        check_run_throttles(self, request)
        handle = rt.redo(run.pk, how, input=text, created_by=request.user)
        created = Run.objects.get(pk=handle.run_id)
        self.log_for_others(created, owner_id, ADDITION, f"Started a run ({how.value})")
        response = Response(RunSerializer(created).data, status=status.HTTP_201_CREATED)
        response["Location"] = request.build_absolute_uri(f"/api/v1/runs/{created.pk}/")
        return response

    @extend_schema(
        summary="Retry a failed or stopped run",
        request=None,
        responses=_CREATED,
        description="A new run with the same message, continuing from the point before the run it "
        "retries (whose message is not repeated in the conversation); linked by "
        "`retry_of`. For a run that `failed`, `timed_out` or was `canceled`.",
    )
    def retry(self, request: Request, pk: str) -> Response:
        return self._redo(request, Redo.RETRY)

    @extend_schema(
        summary="Regenerate an answer",
        request=None,
        responses=_CREATED,
        description="A new run with the same message, continuing from the point before the run "
        "whose answer it replaces; linked by `regenerates`. For a `completed` or "
        "`canceled` run.",
    )
    def regenerate(self, request: Request, pk: str) -> Response:
        return self._redo(request, Redo.REGENERATE)

    @extend_schema(
        summary="Edit a message and continue from it",
        request=RunEditSerializer,
        responses=_CREATED,
        description="A new run with the new text, continuing from the point before the run whose "
        "message it changes; linked by `edit_of`. Runs after the edited one stay "
        "recorded, on their own branch. For a run that has ended.",
    )
    def edit(self, request: Request, pk: str) -> Response:
        body = RunEditSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        return self._redo(request, Redo.EDIT, body.validated_data["input"])

    @extend_schema(
        summary="Fork the session from a run",
        description="A new session of yours, of the same agent, whose history is this "
        "run's branch up to and including it; the original session goes on as it was. "
        "For a top-level run of yours that has ended (another user's run, even one you "
        "may read, is a 403).",
        request=SessionForkSerializer,
        responses={201: ForkedSessionSerializer, 409: _CONFLICT},
    )
    def fork(self, request: Request, pk: str) -> Response:
        run = self.get_object()
        if run_owner_id(run) != request.user.pk:
            # A fork is a session of the caller's that carries the whole history up
            # to the run: another user's conversation is not theirs to copy.
            raise PermissionDenied(
                "You may fork only your own conversations.", code="permission_denied"
            )
        body = SessionForkSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        forked = rt.fork(run.pk, owner=request.user, title=body.validated_data["title"])
        session = sessions_with_usage(Session.objects.filter(pk=forked.id)).get()
        link = SessionFork.objects.get(session_id=forked.id)
        response = Response(
            {
                "session": SessionSerializer(session).data,
                "forked_from": {"session": link.source_session_id, "run": link.source_run_id},
            },
            status=status.HTTP_201_CREATED,
        )
        response["Location"] = request.build_absolute_uri(f"/api/v1/sessions/{forked.id}/")
        return response
