"""``/runs/{id}/feedback/``: the run's owner gives a thumb up or down (with an
optional comment) on its answer, or takes it back."""

from __future__ import annotations

from django.db.models import QuerySet
from drf_spectacular.utils import OpenApiExample, OpenApiResponse, extend_schema
from rest_framework import serializers, status
from rest_framework.exceptions import PermissionDenied
from rest_framework.request import Request
from rest_framework.response import Response

from goaai.api.exceptions import Conflict
from goaai.api.fields import StrictCharField
from goaai.api.views import ScopedViewSet
from runs_app import scores
from runs_app.access import run_owner_id
from runs_app.models import Run, Score


class FeedbackSerializer(serializers.ModelSerializer):  # type: ignore[type-arg]
    value = serializers.SerializerMethodField(method_name="thumb", help_text="`up` or `down`.")

    class Meta:
        model = Score
        fields = ["id", "run", "name", "value", "comment", "created_at", "updated_at"]
        read_only_fields = fields

    def thumb(self, score: Score) -> str:
        return scores.thumb_of(score.value) or scores.Thumb.DOWN.value


class FeedbackGiveSerializer(serializers.Serializer):  # type: ignore[type-arg]
    value = serializers.ChoiceField(
        choices=[thumb.value for thumb in scores.Thumb], help_text="`up` or `down`."
    )
    comment = StrictCharField(
        max_length=scores.MAX_COMMENT_LENGTH,
        required=False,
        allow_blank=True,
        default="",
        help_text="What was good or wrong about the answer (optional).",
    )


class RunFeedbackViewSet(ScopedViewSet):
    """Feedback is the run's owner's own: another user's run is a 404, and one the
    caller may read but does not own (staff) a 403."""

    owner_lookup = "session__owner"
    conflict_actions = ("give",)
    forbidden_actions = ("give", "take_back")
    serializer_class = FeedbackSerializer
    filterset_class = None
    pagination_class = None

    def base_queryset(self) -> QuerySet[Run]:
        return Run.objects.select_related("session")

    def _own_run(self, request: Request) -> Run:
        run: Run = self.get_object()
        if run_owner_id(run) != request.user.pk:
            raise PermissionDenied(
                "Feedback on a run is its owner's to give.", code="permission_denied"
            )
        return run

    @extend_schema(
        summary="Give feedback on a run's answer",
        description="A thumb up or down on the answer of a run of yours that has ended, "
        "with an optional comment. You keep one per run: giving another (or the same "
        "again) replaces it, comment and all. Stored as a score named `feedback` (kind "
        "`boolean`, value 1 for up, 0 for down, source `feedback`); GET /runs/{id}/ "
        "shows yours as `feedback`, and GET /usage/ counts them. A run still under "
        "way is a 409 `run_not_ended`.",
        request=FeedbackGiveSerializer,
        responses={
            201: OpenApiResponse(FeedbackSerializer, description="Your first feedback on it."),
            200: OpenApiResponse(FeedbackSerializer, description="It replaced your earlier one."),
        },
        examples=[
            OpenApiExample("Thumbs up", value={"value": "up"}, request_only=True),
            OpenApiExample(
                "Thumbs down, saying why",
                value={"value": "down", "comment": "It used last year's prices."},
                request_only=True,
            ),
        ],
    )
    def give(self, request: Request, pk: str) -> Response:
        run = self._own_run(request)
        body = FeedbackGiveSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        try:
            score, first = scores.feedback_give(
                run_id=run.pk,
                user_id=request.user.pk,  # type: ignore[arg-type]
                thumb=scores.Thumb(body.validated_data["value"]),
                comment=body.validated_data["comment"],
            )
        except scores.RunNotEnded as exc:
            raise Conflict(str(exc), code=exc.code) from None
        return Response(
            FeedbackSerializer(score).data,
            status=status.HTTP_201_CREATED if first else status.HTTP_200_OK,
        )

    @extend_schema(
        summary="Take back your feedback on a run",
        description="Deletes your feedback on the run; none there is fine too.",
        request=None,
        responses={204: None},
    )
    def take_back(self, request: Request, pk: str) -> Response:
        run = self._own_run(request)
        scores.feedback_remove(run_id=run.pk, user_id=request.user.pk)  # type: ignore[arg-type]
        return Response(status=status.HTTP_204_NO_CONTENT)
