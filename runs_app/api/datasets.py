"""``/datasets/scored-runs.jsonl``: the caller's scored runs as a dataset of JSON
lines (see runs_app.datasets), written out as they are read.

Every user's runs for a caller who may read every user's runs, turns, tool calls
and scores (``view`` permissions on all four); the caller's own runs otherwise.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from django.http import StreamingHttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiResponse, extend_schema, extend_schema_field
from drf_standardized_errors.openapi_validation_errors import extend_validation_errors
from rest_framework import serializers
from rest_framework.fields import empty
from rest_framework.permissions import IsAuthenticated
from rest_framework.renderers import JSONRenderer
from rest_framework.request import Request
from rest_framework.views import APIView

from goaai.api.streaming import JSON_LINES, JsonLinesRenderer, streamed
from runs_app.access import DATASET_RECORD, may_read_every_record
from runs_app.datasets import DatasetFilter, dataset_lines
from runs_app.models import Run
from runs_app.score_filters import InvalidScoreFilter, score_condition


def _utc(value: dt.datetime) -> dt.datetime:
    """A moment in UTC, inside the years both databases hold."""
    try:
        moment = value.astimezone(dt.UTC)
        if not dt.MINYEAR < moment.year < dt.MAXYEAR:
            raise OverflowError
    except (OverflowError, ValueError):
        raise serializers.ValidationError("This moment is out of range.") from None
    return moment


@extend_schema_field({"type": "array", "items": {"type": "string"}})
class ScoreFiltersField(serializers.Field):  # type: ignore[type-arg]
    """Every ``score`` parameter of the query, each a score filter
    (runs_app.score_filters); one that is none is an error of ``score`` itself."""

    def get_value(self, dictionary: Any) -> Any:
        if hasattr(dictionary, "getlist"):
            return dictionary.getlist(self.field_name) or empty
        return dictionary.get(self.field_name, empty)

    def to_internal_value(self, data: Any) -> list[str]:
        texts = data if isinstance(data, list) else [data]
        for text in texts:
            if not isinstance(text, str):
                raise serializers.ValidationError("A score filter is text.", code="invalid")
            try:
                score_condition(text)
            except InvalidScoreFilter as invalid:
                raise serializers.ValidationError(str(invalid), code="invalid") from None
        return list(texts)

    def to_representation(self, value: Any) -> Any:
        return value


class DatasetQuerySerializer(serializers.Serializer):  # type: ignore[type-arg]
    score = ScoreFiltersField(
        required=False,
        default=list,
        help_text="Only runs with a score meeting this filter: `name` (any score of "
        "that name), `name=value` (`feedback=down`, `tone=rude`, `grounded=true`), "
        "`name>=4`, `name<2.5` (also `>` and `<=`). Repeat it to require several.",
    )
    agent = serializers.CharField(
        max_length=100, required=False, allow_blank=True, help_text="Only this agent's runs."
    )
    since = serializers.DateTimeField(
        required=False, help_text="Runs created at or after this moment (ISO 8601)."
    )
    until = serializers.DateTimeField(
        required=False, help_text="Runs created before this moment (ISO 8601)."
    )

    def validate_since(self, value: dt.datetime) -> dt.datetime:
        return _utc(value)

    def validate_until(self, value: dt.datetime) -> dt.datetime:
        return _utc(value)


@extend_validation_errors(["invalid"], field_name="score", methods=["get"])
@extend_validation_errors(
    ["invalid", "max_length", "null_characters_not_allowed", "surrogate_characters_not_allowed"],
    field_name="agent",
    methods=["get"],
)
@extend_validation_errors(
    ["invalid", "date", "make_aware", "overflow"], field_name="since", methods=["get"]
)
@extend_validation_errors(
    ["invalid", "date", "make_aware", "overflow"], field_name="until", methods=["get"]
)
class ScoredRunsDatasetView(APIView):
    permission_classes = [IsAuthenticated]
    # JSON lines on success; an error is JSON (or one JSON line to a client asking
    # for JSON lines only).
    renderer_classes = [JSONRenderer, JsonLinesRenderer]

    @extend_schema(
        summary="Download scored runs as a dataset (JSON lines)",
        description="One JSON line per run that has at least one score, oldest first: "
        "`{run_id, session_id, agent, model, created_at, input, output, status, "
        "tool_calls: [{name, arguments, result, status, error_kind}], scores: [{name, "
        "kind, value, category, source, author, comment}], labels}`. Your own runs; "
        "every user's with the view permissions on runs, turns, tool calls and scores. "
        "Written out as it is read, so a dataset of any size streams in constant memory.",
        parameters=[DatasetQuerySerializer],
        responses={
            (200, JSON_LINES): OpenApiResponse(
                OpenApiTypes.STR, description="One JSON object per line (JSON Lines)."
            )
        },
    )
    def get(self, request: Request) -> StreamingHttpResponse:
        query = DatasetQuerySerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        wanted: dict[str, Any] = query.validated_data
        runs = Run.objects.all()
        if not may_read_every_record(request.user, DATASET_RECORD):
            runs = runs.filter(session__owner=request.user.pk)
        chosen = DatasetFilter(
            scores=wanted["score"],
            agent=wanted.get("agent", ""),
            since=wanted.get("since"),
            until=wanted.get("until"),
        ).apply(runs)
        return streamed(
            request._request,
            dataset_lines(chosen),
            content_type=JSON_LINES,
            filename="scored-runs.jsonl",
        )
