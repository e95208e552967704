"""Reads of token usage and cost, added up by agent, model, user or day (what
``GET /api/v1/usage/`` answers).

Every sum is of what was stored as the work happened: by agent, user and day the
runs' own totals (each run's usage and cost are the sums of its turns'), by model
the turns' (a run may ask more than one model). Each grouping is three aggregate
queries at most, whatever the number of runs: the sums, the turns counted, and the
users' feedback (thumbs up and down) on the runs counted.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, replace
from decimal import Decimal
from typing import Any

from django.db.models import Count, F, Q, QuerySet, Sum
from django.db.models.functions import TruncDate

from goaai.runtime.types import USAGE_KINDS, known_cost
from goaai.runtime.vocabulary import ScoreSource
from runs_app.models import Run, Score, Turn
from runs_app.scores import FEEDBACK

GROUPINGS = ("agent", "model", "user", "day")


@dataclass(frozen=True)
class UsageGroup:
    """What the runs (or, by model, the turns) of one group add up to. ``group`` is
    the agent's id, the model (``<profile>:<model>``), the owner's username or the
    day (``YYYY-MM-DD``, in UTC); ``user`` the owner's id when grouped by user."""

    group: str
    runs: int
    turns: int
    input_tokens: int
    output_tokens: int
    cached_input_tokens: int
    cache_write_tokens: int
    reasoning_tokens: int
    total_tokens: int
    # The sum of the priced turns' costs; unpriced_turns had no price.
    cost: Decimal
    unpriced_turns: int
    user: int | None = None
    # The users' thumbs on the group's runs (by model: on runs with a turn of it).
    feedback_up: int = 0
    feedback_down: int = 0

    @property
    def known_cost(self) -> Decimal | None:
        return known_cost(self.cost, self.unpriced_turns)


def _key(group_by: str, prefix: str = "") -> Any:
    """The expression a run (``prefix=""``) or a turn (``prefix="run__"``) is
    grouped by."""
    if group_by == "agent":
        return F(f"{prefix}agent")
    if group_by == "user":
        return F(f"{prefix}session__owner_id")
    if group_by == "day":
        return TruncDate(f"{prefix}created_at", tzinfo=dt.UTC)
    raise ValueError(f"Runs are not grouped by {group_by!r}.")


def _group_text(value: Any) -> str:
    return value.isoformat() if isinstance(value, dt.date) else str(value)


def usage_groups(*, runs: QuerySet[Run], group_by: str) -> list[UsageGroup]:
    """What ``runs`` add up to for each value of ``group_by`` (one of
    :data:`GROUPINGS`): by day in date order; otherwise the costliest first (groups
    whose cost is unknown last), then the most tokens, then by name."""
    if group_by not in GROUPINGS:
        raise ValueError(f"Usage is not grouped by {group_by!r}.")
    groups = _by_model(runs) if group_by == "model" else _by_runs(runs, group_by)
    groups = _with_feedback(groups, _feedback_counts(runs, group_by))
    if group_by == "day":
        return sorted(groups, key=lambda g: g.group)
    return sorted(
        groups,
        key=lambda g: (
            g.known_cost is None,
            -(g.known_cost or 0),
            -g.total_tokens,
            g.group,
        ),
    )


def _by_runs(runs: QuerySet[Run], group_by: str) -> list[UsageGroup]:
    names = ["_group", "session__owner__username"] if group_by == "user" else ["_group"]
    rows = (
        runs.order_by()
        .annotate(_group=_key(group_by))
        .values(*names)
        .annotate(
            _runs=Count("id"),
            **{f"_{kind}": Sum(kind) for kind in USAGE_KINDS},
            _total_tokens=Sum("total_tokens"),
            _cost=Sum("cost"),
            _unpriced_turns=Sum("unpriced_turns"),
        )
    )
    turns = dict(
        Turn.objects.filter(run__in=runs.order_by().values("id"))
        .order_by()
        .annotate(_group=_key(group_by, "run__"))
        .values("_group")
        .annotate(_turns=Count("id"))
        .values_list("_group", "_turns")
    )
    return [
        UsageGroup(
            group=str(row["session__owner__username"])
            if group_by == "user"
            else _group_text(row["_group"]),
            user=int(row["_group"]) if group_by == "user" else None,
            runs=row["_runs"],
            turns=turns.get(row["_group"], 0),
            **{kind: int(row[f"_{kind}"] or 0) for kind in USAGE_KINDS},
            total_tokens=int(row["_total_tokens"] or 0),
            cost=Decimal(row["_cost"] or 0),
            unpriced_turns=int(row["_unpriced_turns"] or 0),
        )
        for row in rows
    ]


def _by_model(runs: QuerySet[Run]) -> list[UsageGroup]:
    rows = (
        Turn.objects.filter(run__in=runs.order_by().values("id"))
        .order_by()
        .values("model")
        .annotate(
            _runs=Count("run_id", distinct=True),
            _turns=Count("id"),
            **{f"_{kind}": Sum(kind) for kind in USAGE_KINDS},
            _cost=Sum("cost"),
            # A turn still waiting for its reply has no cost yet, and is not
            # unpriced either (its run has not counted it).
            _unpriced_turns=Count("id", filter=Q(cost__isnull=True, ended_at__isnull=False)),
        )
    )
    groups = []
    for row in rows:
        kinds = {kind: int(row[f"_{kind}"] or 0) for kind in USAGE_KINDS}
        groups.append(
            UsageGroup(
                group=str(row["model"]),
                runs=row["_runs"],
                turns=row["_turns"],
                **kinds,
                total_tokens=kinds["input_tokens"]
                + kinds["cached_input_tokens"]
                + kinds["cache_write_tokens"]
                + kinds["output_tokens"],
                cost=Decimal(row["_cost"] or 0),
                unpriced_turns=row["_unpriced_turns"],
            )
        )
    return groups


def _feedback_counts(runs: QuerySet[Run], group_by: str) -> dict[str, tuple[int, int]]:
    """The thumbs up and down users gave the runs, by group (the day or agent, the
    model, or, by user, the owner's id as text)."""
    scores = Score.objects.filter(
        run__in=runs.order_by().values("id"), name=FEEDBACK, source=ScoreSource.FEEDBACK
    ).order_by()
    key = F("run__turns__model") if group_by == "model" else _key(group_by, "run__")
    rows = (
        scores.annotate(_group=key)
        .values("_group")
        .annotate(
            # By model a run's turns repeat its scores: each is counted once.
            _up=Count("id", distinct=True, filter=Q(value__gte=0.5)),
            _down=Count("id", distinct=True, filter=Q(value__lt=0.5)),
        )
    )
    return {_group_text(row["_group"]): (row["_up"], row["_down"]) for row in rows}


def _with_feedback(
    groups: list[UsageGroup], counts: dict[str, tuple[int, int]]
) -> list[UsageGroup]:
    counted = []
    for group in groups:
        up, down = counts.get(group.group if group.user is None else str(group.user), (0, 0))
        counted.append(replace(group, feedback_up=up, feedback_down=down))
    return counted
