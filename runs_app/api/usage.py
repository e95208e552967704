"""``GET /api/v1/usage/``: tokens of each kind and their cost, added up by agent,
model, user or day over the runs the caller may read."""

from __future__ import annotations

import datetime as dt
from typing import Any

from django.db.models import QuerySet
from django.utils.dateparse import parse_date, parse_datetime
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiExample, OpenApiParameter, extend_schema
from drf_standardized_errors.openapi_validation_errors import extend_validation_errors
from rest_framework import serializers
from rest_framework.exceptions import ValidationError
from rest_framework.request import Request
from rest_framework.response import Response

from goaai.api.usage import RunUsageSerializer, usage_document
from goaai.api.views import ScopedViewSet
from runs_app.models import Run
from runs_app.usage import GROUPINGS, usage_groups

DEFAULT_GROUPING = "day"
MOMENT_HELP = (
    "An ISO 8601 date (`2026-12-01`: its midnight in UTC) or date and time "
    "(`2026-12-01T09:30:00Z`; without an offset, UTC)."
)


class FeedbackCountSerializer(serializers.Serializer):  # type: ignore[type-arg]
    up = serializers.IntegerField(help_text="Thumbs up users gave the group's runs.")
    down = serializers.IntegerField(help_text="Thumbs down users gave the group's runs.")


class UsageGroupSerializer(RunUsageSerializer):
    group = serializers.CharField(
        help_text="The agent's id, the model (`<profile>:<model>`), the owner's username "
        "or the day (`YYYY-MM-DD`, UTC), by `group_by`."
    )
    user = serializers.IntegerField(
        required=False, help_text="With `group_by=user`: the owner's id (usernames may change)."
    )
    runs = serializers.IntegerField(
        help_text="Runs of the group (by model: runs with a turn of that model)."
    )
    turns = serializers.IntegerField(help_text="Turns of those runs (by model: of that model).")
    feedback = FeedbackCountSerializer(
        help_text="The users' feedback on those runs (POST /runs/{id}/feedback/), counted "
        "(by model: on runs with a turn of that model)."
    )


class UsageReportSerializer(serializers.Serializer):  # type: ignore[type-arg]
    group_by = serializers.ChoiceField(choices=[(g, g) for g in GROUPINGS])
    # "from" is a Python keyword: the field goes into the class namespace by name.
    vars()["from"] = serializers.DateTimeField(
        allow_null=True, help_text="The start of the range (inclusive), in UTC; null: none."
    )
    to = serializers.DateTimeField(
        allow_null=True, help_text="The end of the range (exclusive), in UTC; null: none."
    )
    results = UsageGroupSerializer(many=True)


def _moment(name: str, raw: str | None) -> dt.datetime | None:
    """The query parameter ``name`` as a moment in UTC (see :data:`MOMENT_HELP`);
    ``None`` when absent. What no calendar has, or a database cannot hold, is a 400."""
    if raw is None or raw == "":
        return None
    moment: dt.datetime | None = None
    try:
        day = parse_date(raw) if len(raw) == 10 else None
        if day is not None:
            moment = dt.datetime.combine(day, dt.time(), tzinfo=dt.UTC)
        elif "\x00" not in raw:
            moment = parse_datetime(raw)
    except ValueError:
        moment = None
    if moment is None:
        raise ValidationError({name: [MOMENT_HELP]}, code="invalid")
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=dt.UTC)
    try:
        moment = moment.astimezone(dt.UTC)
        if not dt.MINYEAR < moment.year < dt.MAXYEAR:
            raise OverflowError
    except (OverflowError, ValueError):
        raise ValidationError({name: ["This moment is out of range."]}, code="invalid") from None
    return moment


def _grouping(raw: str | None) -> str:
    group_by = raw or DEFAULT_GROUPING
    if group_by not in GROUPINGS:
        raise ValidationError(
            {"group_by": [f"Group by one of: {', '.join(GROUPINGS)}."]}, code="invalid"
        )
    return group_by


@extend_validation_errors(["invalid"], field_name="group_by")
@extend_validation_errors(["invalid"], field_name="from")
@extend_validation_errors(["invalid"], field_name="to")
class UsageViewSet(ScopedViewSet):
    """The caller's own runs; every user's for staff with ``runs_app.view_run``. One
    report, not a list of rows: its action is not ``list`` (which the schema would
    describe as an array)."""

    owner_lookup = "session__owner"
    filter_backends: list[Any] = []
    pagination_class = None

    def base_queryset(self) -> QuerySet[Run]:
        return Run.objects.all()

    @extend_schema(
        summary="Token usage and cost, added up",
        description="Tokens of each kind, cost, runs, turns and the users' feedback "
        "(thumbs up and down) for each agent, model, user or day, over your runs "
        "(staff with the permission to view runs: every user's), child runs included. "
        "By `agent`, `user` and `day` (the run's creation date in UTC) the runs' totals "
        "are added up; by `model` their turns' "
        "(a run may ask more than one model). `from` and `to` select runs by their "
        "creation time, `from` included and `to` not. Days come in date order; the "
        "other groups costliest first (unknown costs last), then by tokens. Not paged: "
        "one row per group.",
        parameters=[
            OpenApiParameter(
                "group_by",
                OpenApiTypes.STR,
                enum=list(GROUPINGS),
                default=DEFAULT_GROUPING,
                description="What to add up by.",
            ),
            OpenApiParameter(
                "from", OpenApiTypes.STR, description=f"Runs created from. {MOMENT_HELP}"
            ),
            OpenApiParameter(
                "to", OpenApiTypes.STR, description=f"Runs created before. {MOMENT_HELP}"
            ),
        ],
        responses={200: UsageReportSerializer},
        examples=[
            OpenApiExample(
                "By agent",
                response_only=True,
                value={
                    "group_by": "agent",
                    "from": "2026-12-01T00:00:00Z",
                    "to": None,
                    "results": [
                        {
                            "group": "assistant",
                            "runs": 12,
                            "turns": 25,
                            "input_tokens": 8200,
                            "output_tokens": 1450,
                            "cached_input_tokens": 30200,
                            "cache_write_tokens": 4100,
                            "reasoning_tokens": 600,
                            "total_tokens": 43950,
                            "cost": "0.0421",
                            "unpriced_turns": 0,
                            "feedback": {"up": 7, "down": 1},
                        }
                    ],
                },
            )
        ],
    )
    def report(self, request: Request) -> Response:
        params = request.query_params
        group_by = _grouping(params.get("group_by"))
        start = _moment("from", params.get("from"))
        end = _moment("to", params.get("to"))
        if start is not None and end is not None and end <= start:
            raise ValidationError({"to": ["Must be later than from."]}, code="invalid")
        runs = self.get_queryset()
        if start is not None:
            runs = runs.filter(created_at__gte=start)
        if end is not None:
            runs = runs.filter(created_at__lt=end)
        groups = usage_groups(runs=runs, group_by=group_by)
        results = []
        for group in groups:
            row: dict[str, Any] = {"group": group.group}
            if group.user is not None:
                row["user"] = group.user
            row.update(runs=group.runs, turns=group.turns, **usage_document(group))
            row["feedback"] = {"up": group.feedback_up, "down": group.feedback_down}
            results.append(row)
        return Response(
            {
                "group_by": group_by,
                "from": _iso(start),
                "to": _iso(end),
                "results": results,
            }
        )


def _iso(moment: dt.datetime | None) -> str | None:
    return None if moment is None else moment.isoformat().replace("+00:00", "Z")
