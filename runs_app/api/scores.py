"""``/runs/{id}/scores/``: the scores of a run, and integrations' own (an evaluation
pipeline's grades, a reviewer's labels) added, changed and deleted.

A run the caller may not read is a 404. Its owner may score it; anyone else needs
``runs_app.add_score`` (a 403 without it, for a run they may read). A score is its
author's to change or delete; anyone else needs ``runs_app.change_score`` or
``runs_app.delete_score``. A user's feedback (name ``feedback``) is listed with the
others but changes only through ``/runs/{id}/feedback/``.
"""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet
from django.shortcuts import get_object_or_404
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import (
    OpenApiExample,
    OpenApiParameter,
    extend_schema,
    extend_schema_field,
    extend_schema_view,
)
from rest_framework import serializers, status
from rest_framework.exceptions import PermissionDenied
from rest_framework.request import Request
from rest_framework.response import Response

from goaai.access import ADDITION, CHANGE, DELETION, log_actions
from goaai.api.exceptions import Conflict
from goaai.api.fields import StrictCharField
from goaai.api.pagination import Cursor
from goaai.api.views import ScopedViewSet
from goaai.runtime.vocabulary import (
    SCORE_KIND_CHOICES,
    ScoreKind,
    ScoreSource,
)
from runs_app import scores
from runs_app.access import may_edit_score, may_score, run_owner_id
from runs_app.models import Run, Score

VALUE_SCHEMA = {
    "oneOf": [{"type": "number"}, {"type": "boolean"}, {"type": "string"}],
    "description": "A number (kind `numeric`), true or false (`boolean`), or the "
    "category's text (`category`, the same as sending `category`).",
}
SCORE_ID = OpenApiParameter("score_id", OpenApiTypes.UUID, OpenApiParameter.PATH)


@extend_schema_field(VALUE_SCHEMA)
class ScoreValueField(serializers.JSONField):
    """Any JSON scalar: what it must be depends on the kind (runs_app.scores)."""


class ScoreSerializer(serializers.ModelSerializer):  # type: ignore[type-arg]
    value = serializers.SerializerMethodField(
        method_name="json_value",
        help_text="A number for a `numeric` score, true or false for a `boolean` one "
        "(feedback: true is up), null for a `category` one.",
    )
    category = serializers.SerializerMethodField(
        method_name="category_or_none", help_text="A `category` score's; else null."
    )
    author = serializers.SerializerMethodField(
        method_name="author_name",
        help_text="Who gave it, by username (null once their account is gone).",
    )

    class Meta:
        model = Score
        fields = [
            "id",
            "run",
            "name",
            "kind",
            "value",
            "category",
            "source",
            "author",
            "comment",
            "created_at",
            "updated_at",
        ]
        read_only_fields = fields
        extra_kwargs = {
            "source": {
                "help_text": "`feedback`: the run's user (thumbs up or down); `staff`: a "
                "reviewer in the operators' console; `api`: given through this API."
            }
        }

    @extend_schema_field({"oneOf": [{"type": "number"}, {"type": "boolean"}], "nullable": True})
    def json_value(self, score: Score) -> float | bool | None:
        return scores.score_json_value(score.kind, score.value)

    @extend_schema_field(serializers.CharField(allow_null=True))
    def category_or_none(self, score: Score) -> str | None:
        return score.category if score.kind == ScoreKind.CATEGORY else None

    @extend_schema_field(serializers.CharField(allow_null=True))
    def author_name(self, score: Score) -> str | None:
        return score.author.get_username() if score.author is not None else None


def _fields() -> dict[str, serializers.Field[Any, Any, Any, Any]]:
    return {
        "name": StrictCharField(
            max_length=scores.MAX_NAME_LENGTH,
            help_text="What is scored (`helpfulness`, `tone`): 1 to 100 characters, "
            "without =, < or >; not `feedback` (users' thumbs).",
        ),
        "kind": serializers.ChoiceField(
            choices=SCORE_KIND_CHOICES,
            help_text="`numeric`, `boolean` or `category`; when left out, the value "
            "says: true or false is boolean, a number numeric, text a category.",
        ),
        "value": ScoreValueField(allow_null=True),
        "category": StrictCharField(
            max_length=scores.MAX_CATEGORY_LENGTH,
            help_text="A category score's category, 1 to 100 characters (or send it as `value`).",
        ),
        "comment": StrictCharField(
            max_length=scores.MAX_COMMENT_LENGTH,
            allow_blank=True,
            trim_whitespace=False,
            help_text="Why (at most 2000 characters).",
        ),
    }


def _invalid(invalid: scores.InvalidScore) -> serializers.ValidationError:
    return serializers.ValidationError({invalid.field: [str(invalid)]}, code=invalid.code)


class ScoreAddSerializer(serializers.Serializer):  # type: ignore[type-arg]
    """A new score: a name, and a value or a category (the kind inferred from the
    value when left out), with an optional comment."""

    def get_fields(self) -> dict[str, serializers.Field[Any, Any, Any, Any]]:
        fields = _fields()
        for name in ("kind", "value", "category", "comment"):
            fields[name].required = False
        return fields

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        try:
            entry = scores.score_input_checked(**attrs)
        except scores.InvalidScore as invalid:
            raise _invalid(invalid) from None
        return {"entry": entry}


class ScoreChangeSerializer(serializers.Serializer):  # type: ignore[type-arg]
    """What changes: any of name, kind, value (or category) and comment. A kind
    left out stays the score's own; a new kind comes with its value or category."""

    def get_fields(self) -> dict[str, serializers.Field[Any, Any, Any, Any]]:
        fields = _fields()
        for field in fields.values():
            field.required = False
        return fields

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        score: Score = self.context["score"]
        checked: dict[str, Any] = {}
        try:
            if "name" in attrs:
                checked["name"] = scores.score_name_checked(attrs["name"])
            if attrs.keys() & {"kind", "value", "category"}:
                checked["score"] = scores.score_value_checked(
                    kind=attrs.get("kind", score.kind),
                    value=attrs.get("value"),
                    category=attrs.get("category"),
                )
            if "comment" in attrs:
                checked["comment"] = scores.comment_checked(attrs["comment"])
        except scores.InvalidScore as invalid:
            raise _invalid(invalid) from None
        return checked


class ScoreCursor(Cursor):
    """A run's scores oldest first, as they were given."""

    ordering = "created_at"


@extend_schema_view(
    list=extend_schema(
        summary="List a run's scores",
        description="Every score of the run, oldest first: users' feedback, reviewers' "
        "scores from the operators' console and those given through the API.",
    ),
    retrieve=extend_schema(summary="Get a score of a run", parameters=[SCORE_ID]),
)
class RunScoreViewSet(ScopedViewSet):
    owner_lookup = "session__owner"
    serializer_class = ScoreSerializer
    pagination_class = ScoreCursor
    # A run's scores are few and listed whole, in the order they were given.
    filter_backends: list[Any] = []
    filterset_class = None
    conflict_actions = ("create",)
    forbidden_actions = ("create", "partial_update", "destroy")

    def base_queryset(self) -> QuerySet[Run]:
        return Run.objects.select_related("session")

    def _score(self, run: Run) -> Score:
        found: Score = get_object_or_404(
            Score.objects.select_related("author"), pk=self.kwargs["score_id"], run_id=run.pk
        )
        return found

    def _may_edit(self, score: Score, action: str) -> None:
        if score.source == ScoreSource.FEEDBACK:
            raise PermissionDenied(
                "A user's feedback is theirs: it changes through /runs/{id}/feedback/.",
                code="permission_denied",
            )
        if not may_edit_score(self.request.user, score, action):
            raise PermissionDenied(
                f"You may not {action} a score another user gave.", code="permission_denied"
            )

    def _log(self, run: Run, score: Score, flag: int, message: str) -> None:
        """Log a score on someone else's run, or a change to someone else's score:
        the admin log then says who judged whose run."""
        user = self.request.user
        if run_owner_id(run) != user.pk or score.author_id not in (None, user.pk):
            log_actions(user, [score], flag, f"{message} (through the API)")

    def list(self, request: Request, pk: str) -> Response:
        run = self.get_object()
        page = self.paginate_queryset(scores.scores_of(run.pk))
        return self.get_paginated_response(self.get_serializer(page, many=True).data)

    def retrieve(self, request: Request, pk: str, score_id: str) -> Response:
        return Response(self.get_serializer(self._score(self.get_object())).data)

    @extend_schema(
        summary="Score a run",
        description="Adds a score to a run that has ended (a run under way is a 409 "
        "`run_not_ended`): `{name, kind?, value? | category?, comment?}`. Without "
        "`kind`, the value says which: true or false is `boolean`, a number "
        "`numeric`, text (or `category`) a `category`. A numeric value is a finite "
        "number; a name is not `feedback`. Recorded with source `api` and you as its "
        "author; a run may have any number of scores of a name. Your own runs, or "
        "anyone's with `runs_app.add_score`.",
        request=ScoreAddSerializer,
        responses={201: ScoreSerializer},
        examples=[
            OpenApiExample("A grade", value={"name": "helpfulness", "value": 4}, request_only=True),
            OpenApiExample(
                "A label, saying why",
                value={"name": "tone", "category": "rude", "comment": "Called the user lazy."},
                request_only=True,
            ),
            OpenApiExample(
                "Pass or fail", value={"name": "grounded", "value": True}, request_only=True
            ),
        ],
    )
    def create(self, request: Request, pk: str) -> Response:
        run = self.get_object()
        if not may_score(request.user, run):
            raise PermissionDenied(
                "You may not score another user's run.", code="permission_denied"
            )
        body = ScoreAddSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        try:
            score = scores.score_add(
                run_id=run.pk,
                author_id=request.user.pk,
                source=ScoreSource.API,
                entry=body.validated_data["entry"],
            )
        except scores.RunNotEnded as exc:
            raise Conflict(str(exc), code=exc.code) from None
        shown = f"{score.name} = {scores.score_shown(score)}"
        self._log(run, score, ADDITION, f"Scored run {run.pk}: {shown}")
        score = Score.objects.select_related("author").get(pk=score.pk)
        return Response(ScoreSerializer(score).data, status=status.HTTP_201_CREATED)

    @extend_schema(
        summary="Change a score",
        description="Any of `name`, `kind`, `value` (or `category`) and `comment`; what "
        "is left out stays. Without `kind` the score keeps its own, and the value must "
        "fit it. Your own scores, or anyone's with `runs_app.change_score`; a user's "
        "feedback changes only through /runs/{id}/feedback/ (403).",
        parameters=[SCORE_ID],
        request=ScoreChangeSerializer,
        responses={200: ScoreSerializer},
    )
    def partial_update(self, request: Request, pk: str, score_id: str) -> Response:
        run = self.get_object()
        score = self._score(run)
        self._may_edit(score, "change")
        body = ScoreChangeSerializer(data=request.data, context={"score": score})
        body.is_valid(raise_exception=True)
        before = f"{score.name} = {scores.score_shown(score)}"
        changed = scores.score_change(score_id=score.pk, **body.validated_data)
        after = f"{changed.name} = {scores.score_shown(changed)}"
        self._log(run, score, CHANGE, f"Changed score {before} to {after} on run {run.pk}")
        return Response(ScoreSerializer(self._score(run)).data)

    @extend_schema(
        summary="Delete a score",
        description="Your own scores, or anyone's with `runs_app.delete_score`; a user's "
        "feedback is taken back by its user (DELETE /runs/{id}/feedback/).",
        parameters=[SCORE_ID],
        request=None,
        responses={204: None},
    )
    def destroy(self, request: Request, pk: str, score_id: str) -> Response:
        run = self.get_object()
        score = self._score(run)
        self._may_edit(score, "delete")
        shown = f"{score.name} = {scores.score_shown(score)}"
        # Logged first: the log names the score as it was.
        self._log(run, score, DELETION, f"Deleted score {shown} of run {run.pk}")
        scores.score_delete(score_id=score.pk)
        return Response(status=status.HTTP_204_NO_CONTENT)
