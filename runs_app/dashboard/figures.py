"""The dashboard's figures for a :class:`~runs_app.dashboard.scope.Scope`, each with
the link to the list it sums.

Everything about ended runs is read from the rollups (:mod:`runs_app.rollups`): a
handful of aggregate queries, each added up in the database by what one part of
the page shows (periods, agents, models, users), so that what comes back grows
with the range's days and those groups, not with its runs nor with the rollup rows
behind them. A label filter is the exception: labels are not in the rollups, so
with one the same figures are counted from the runs themselves (the page says so). What
waits now (approvals, questions) and what runs now are read live, from the runs
that wait or run, which an index finds.
"""

from __future__ import annotations

import datetime as dt
from collections import Counter, defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any
from urllib.parse import urlencode
from uuid import UUID

from django.contrib.auth import get_user_model
from django.db import transaction
from django.db.models import Count, QuerySet, Sum
from django.db.models.fields.json import KeyTextTransform
from django.db.models.functions import TruncDay, TruncHour
from django.urls import reverse
from django.utils import timezone

from goaai import sql
from goaai.runtime.types import known_cost
from goaai.runtime.vocabulary import OPEN_RUN_STATUSES, RunStatus, ToolCallStatus
from runs_app import rollups
from runs_app.dashboard.scope import DAY, ENDED_ORDER, HOUR, Scope
from runs_app.models import LatencyRollup, Run, RunRollup, ToolRollup, UserLatencyRollup
from runs_app.scores import score_summary

# What a rollup row of runs holds, in this order.
KEY = ("span", "period", "agent", "model", "owner_id", "status")
SUMS = ("runs", *rollups.SUMMED, *rollups.TIMED)
# What the runs are added up by: the rollup's period (its hour or day) for the bars,
# the days and the totals; agent, model and user for the rankings.
GROUPINGS = ("period", "agent", "model", "owner_id")
PERCENTILES = (50, 95, 99)
FAILED = (RunStatus.FAILED, RunStatus.TIMED_OUT)
# How many rows a ranking shows.
TOP = 10


def runs_list(params: dict[str, str]) -> str:
    return reverse("admin:runs_app_run_changelist") + "?" + urlencode(params)


def tool_calls_list(params: dict[str, str]) -> str:
    return reverse("admin:runs_app_toolcall_changelist") + "?" + urlencode(params)


@dataclass
class Sums:
    """What some ended runs add up to."""

    runs: int = 0
    failed: int = 0
    by_status: Counter[str] = field(default_factory=Counter)
    input_tokens: int = 0
    output_tokens: int = 0
    total_tokens: int = 0
    cost: Decimal = Decimal(0)
    unpriced_turns: int = 0
    timed_runs: int = 0
    duration_ms: int = 0
    working_ms: int = 0

    def add(self, status: str, amounts: dict[str, Any]) -> None:
        self.runs += amounts["runs"]
        self.by_status[status] += amounts["runs"]
        if status in FAILED:
            self.failed += amounts["runs"]
        for name in (
            "input_tokens",
            "output_tokens",
            "total_tokens",
            "unpriced_turns",
            "timed_runs",
            "duration_ms",
            "working_ms",
        ):
            setattr(self, name, getattr(self, name) + amounts[name])
        self.cost += amounts["cost"]

    @property
    def error_rate(self) -> float | None:
        return self.failed / self.runs if self.runs else None

    @property
    def known_cost(self) -> Decimal | None:
        return known_cost(self.cost, self.unpriced_turns)

    @property
    def mean_duration_ms(self) -> float | None:
        return self.duration_ms / self.timed_runs if self.timed_runs else None


@dataclass
class Group:
    """One agent's, model's, user's or day's runs, and where to list them."""

    name: str
    sums: Sums
    url: str
    share: float = 0.0  # of the largest group's tokens, for its bar


@dataclass
class Segment:
    status: str
    runs: int
    url: str


@dataclass
class Bar:
    """The runs created in one hour or day, by how they ended."""

    start: dt.datetime
    end: dt.datetime
    segments: list[Segment]
    open_runs: int = 0

    @property
    def total(self) -> int:
        return sum(segment.runs for segment in self.segments) + self.open_runs


@dataclass
class Percentile:
    rank: int
    ms: float  # the middle of the bucket it falls in
    low: float
    high: float
    url: str


@dataclass
class Latency:
    measure: str
    label: str
    runs: int
    percentiles: list[Percentile]


@dataclass
class ToolFailures:
    tool: str
    calls: int
    failed: int
    url: str
    error_kinds: list[tuple[str, int, str]]

    @property
    def rate(self) -> float:
        return self.failed / self.calls if self.calls else 0.0


@dataclass
class Waiting:
    run_id: UUID
    agent: str
    owner: str
    kind: str
    since: dt.datetime | None
    age: dt.timedelta | None
    url: str


@dataclass
class Pending:
    by_kind: list[tuple[str, int, str]]
    oldest: list[Waiting]

    @property
    def total(self) -> int:
        return sum(n for _, n, _ in self.by_kind)


@dataclass
class Figures:
    scope: Scope
    counted_from_runs: bool
    totals: Sums
    open_runs: int
    open_url: str
    status_urls: dict[str, str]
    bars: list[Bar]
    latency: list[Latency]
    by_agent: list[Group]
    by_model: list[Group]
    by_user: list[Group]
    by_day: list[Group]
    tools: list[ToolFailures] | None
    pending: Pending


# Reading the rows


Row = tuple[tuple[Any, ...], dict[str, Any]]
# What the runs of each (value, status) of one grouping add up to; per grouping.
ByValue = dict[tuple[Any, str], dict[str, Any]]
Grouped = dict[str, ByValue]


def _rollup_groups(scope: Scope) -> Grouped:
    """The rollup rows in scope, added up in the database once per grouping."""
    rows = RunRollup.objects.filter(scope.rollup_q())
    grouped: Grouped = {}
    for by in GROUPINGS:
        found = rows.values_list(by, "status").annotate(*(Sum(name) for name in SUMS)).order_by()
        grouped[by] = {
            (value, status): dict(zip(SUMS, amounts, strict=True))
            for value, status, *amounts in found
        }
    return grouped


def _grouped(rows: Iterable[Row]) -> Grouped:
    """The same, added up here (rows counted from the runs)."""
    grouped: Grouped = {by: {} for by in GROUPINGS}
    for key, amounts in rows:
        for by in GROUPINGS:
            sums = grouped[by].setdefault((key[KEY.index(by)], key[5]), dict.fromkeys(SUMS, 0))
            for name in SUMS:
                sums[name] += amounts[name]
    return grouped


def _latency_rows(scope: Scope) -> dict[tuple[str, int], int]:
    # Every user's histograms together, unless the page is one user's.
    rollup = LatencyRollup if scope.owner is None else UserLatencyRollup
    found = (
        rollup.objects.filter(scope.rollup_q())
        .values_list("measure", "bucket")
        .annotate(n=Sum("runs"))
        .order_by()
    )
    return {(measure, bucket): n for measure, bucket, n in found}


def _tool_rows(scope: Scope) -> list[tuple[str, str, str, int]]:
    found = (
        ToolRollup.objects.filter(scope.rollup_q())
        .values_list("tool", "status", "error_kind")
        .annotate(n=Sum("calls"))
        .order_by()
    )
    return list(found)


def _counted_rows(
    scope: Scope,
) -> tuple[Grouped, dict[tuple[str, int], int], list[tuple[str, str, str, int]]]:
    """The same rows, counted from the runs in scope (a label filter)."""
    runs = Run.objects.filter(scope.runs_q(), status__in=rollups.ENDED)
    tally = rollups.Tally()
    for row in runs.values_list(*rollups.RUN_FIELDS).iterator(chunk_size=2000):
        tally.add_run(rollups.RunRow(*row))
    tally.add_tools(runs)
    hour = "hour"
    rows = [(key, sums) for key, sums in tally.runs.items() if key[0] == hour]
    latency: Counter[tuple[str, int]] = Counter()
    for key, n in tally.latency.items():
        if key[0] == hour:
            latency[(key[5], key[6])] += n
    tools: Counter[tuple[str, str, str]] = Counter()
    for key, sums in tally.tools.items():
        if key[0] == hour:
            tools[(key[5], key[6], key[7])] += sums["calls"]
    return _grouped(rows), dict(latency), [(*key, n) for key, n in tools.items()]


# The figures


def figures(scope: Scope, *, with_tools: bool = True, now: dt.datetime | None = None) -> Figures:
    """Every figure of the dashboard for ``scope`` (the tools' only ``with_tools``:
    a viewer who may not read tool calls does not see how they failed), each query
    planned for the scope's values (:func:`goaai.sql.plan_with_values`)."""
    with transaction.atomic():
        sql.plan_with_values()
        return _figures(scope, with_tools=with_tools, now=now)


def _figures(scope: Scope, *, with_tools: bool, now: dt.datetime | None) -> Figures:
    counted = scope.label is not None
    if counted:
        grouped, latency, tools = _counted_rows(scope)
    else:
        grouped = _rollup_groups(scope)
        latency = _latency_rows(scope)
        tools = _tool_rows(scope) if with_tools else []
    by_period = grouped["period"]
    totals = Sums()
    for (_period, status), amounts in by_period.items():
        totals.add(status, amounts)
    open_by_bucket, open_runs = _open_runs(scope)
    return Figures(
        scope=scope,
        counted_from_runs=counted,
        totals=totals,
        open_runs=open_runs,
        open_url=runs_list({**scope.list_params(), "status": RunStatus.RUNNING}),
        status_urls={s: runs_list({**scope.list_params(), "status": s}) for s in ENDED_ORDER},
        bars=_bars(scope, by_period, open_by_bucket),
        latency=_latency(scope, latency),
        by_agent=_groups(scope, grouped["agent"], "agent"),
        by_model=_groups(scope, grouped["model"], "model"),
        by_user=_groups(scope, grouped["owner_id"], "owner_id"),
        by_day=_days(scope, by_period),
        tools=_tools(scope, tools) if with_tools else None,
        pending=_pending(scope, now or timezone.now()),
    )


def _bucket_of(scope: Scope, period: dt.datetime) -> dt.datetime:
    """The bar a rollup period is drawn in: its hour, or its UTC day."""
    return period if scope.hourly else period.replace(hour=0)


def _bar_starts(scope: Scope) -> Iterator[tuple[dt.datetime, dt.datetime]]:
    """Each bar's start and end, clipped to the scope."""
    step = HOUR if scope.hourly else DAY
    start = _bucket_of(scope, scope.since)
    while start < scope.until:
        yield start, start + step
        start += step


def _bars(scope: Scope, by_period: ByValue, open_by_bucket: Counter[dt.datetime]) -> list[Bar]:
    counts: dict[dt.datetime, Counter[str]] = defaultdict(Counter)
    for (period, status), amounts in by_period.items():
        counts[_bucket_of(scope, period)][status] += amounts["runs"]
    bars = []
    for start, end in _bar_starts(scope):
        since, until = max(start, scope.since), min(end, scope.until)
        params = scope.list_params(since=since, until=until)
        segments = [
            Segment(status, counts[start][status], runs_list({**params, "status": status}))
            for status in ENDED_ORDER
            if counts[start][status]
        ]
        bars.append(Bar(since, until, segments, open_by_bucket[start]))
    return bars


def _open_runs(scope: Scope) -> tuple[Counter[dt.datetime], int]:
    """The runs in scope that have not ended, by the bar they are drawn in (read
    live: a run is counted in the rollups when it ends), counted in the database.

    Not one row per run through ``iterator()``: on PostgreSQL that is a server-side
    cursor, planned to return its first rows fast, which in the runs' default order
    walks every run of the range by ``created_at`` (seconds at a million runs when
    the filters leave few)."""
    trunc = TruncHour if scope.hourly else TruncDay
    found = (
        Run.objects.filter(scope.runs_q(), status__in=OPEN_RUN_STATUSES)
        .values_list(trunc("created_at", tzinfo=dt.UTC))
        .annotate(n=Count("*"))
        .order_by()
    )
    by_bucket: Counter[dt.datetime] = Counter(dict(found))
    return by_bucket, sum(by_bucket.values())


def _latency(scope: Scope, counts: dict[tuple[str, int], int]) -> list[Latency]:
    found = []
    for measure, label in LatencyRollup.Measure.choices:
        buckets = sorted((bucket, n) for (m, bucket), n in counts.items() if m == measure)
        total = sum(n for _, n in buckets)
        found.append(
            Latency(measure, str(label), total, list(_percentiles(scope, measure, buckets, total)))
        )
    return found


def _percentiles(
    scope: Scope, measure: str, buckets: list[tuple[int, int]], total: int
) -> Iterator[Percentile]:
    """The nearest-rank percentiles of a histogram: each in the bucket holding the
    run of that rank, linked to the runs that took at least as long."""
    if not total:
        return
    for rank in PERCENTILES:
        wanted = max(1, -(-total * rank // 100))  # ceil(total * rank / 100)
        seen = 0
        for bucket, n in buckets:
            seen += n
            if seen >= wanted:
                low, high = rollups.bucket_bounds(bucket)
                middle = (low * high) ** 0.5 if low else high / 2
                params = {**scope.list_params(), f"{measure}_from_ms": str(int(low))}
                yield Percentile(rank, middle, low, high, runs_list(params))
                break


def _usernames(ids: Iterable[Any]) -> dict[Any, str]:
    users = get_user_model()._default_manager.filter(pk__in=set(ids))
    return dict(users.values_list("pk", "username"))


def _groups(scope: Scope, by_value: ByValue, by: str) -> list[Group]:
    """The runs by agent, model or user: the most tokens first."""
    sums: dict[Any, Sums] = defaultdict(Sums)
    for (value, status), amounts in by_value.items():
        sums[value].add(status, amounts)
    names = _usernames(sums) if by == "owner_id" else {}
    groups = []
    for value, group in sums.items():
        name = names.get(value, str(value)) if by == "owner_id" else str(value)
        param = {"agent": "agent", "model": "model", "owner_id": "owner"}[by]
        params = {**scope.list_params(), param: name}
        groups.append(Group(name or "(none)", group, runs_list(params)))
    groups.sort(key=lambda g: (-g.sums.total_tokens, -g.sums.runs, g.name))
    return _shared(groups)


def _shared(groups: list[Group]) -> list[Group]:
    largest = max((g.sums.total_tokens for g in groups), default=0)
    for group in groups:
        group.share = group.sums.total_tokens / largest if largest else 0.0
    return groups


def _days(scope: Scope, by_period: ByValue) -> list[Group]:
    """The runs by UTC day, in order (a range drawn hour by hour has a day or two)."""
    sums: dict[dt.datetime, Sums] = defaultdict(Sums)
    for (period, status), amounts in by_period.items():
        sums[period.replace(hour=0)].add(status, amounts)
    groups = []
    for day in sorted(sums):
        since, until = max(day, scope.since), min(day + DAY, scope.until)
        groups.append(
            Group(
                day.date().isoformat(),
                sums[day],
                runs_list(scope.list_params(since=since, until=until)),
            )
        )
    return _shared(groups)


def _tool_params(scope: Scope) -> dict[str, str]:
    params = {
        "run_created_at_from": scope.since.isoformat(),
        "run_created_at_until": scope.until.isoformat(),
    }
    params.update(scope.filter_params())
    params.pop("label", None)
    return params


def _tools(scope: Scope, rows: list[tuple[str, str, str, int]]) -> list[ToolFailures]:
    """The tools whose calls failed most, with how (error kinds, most first)."""
    calls: Counter[str] = Counter()
    failed: Counter[str] = Counter()
    kinds: dict[str, Counter[str]] = defaultdict(Counter)
    for tool, status, error_kind, n in rows:
        calls[tool] += n
        if status == ToolCallStatus.FAILED:
            failed[tool] += n
            kinds[tool][error_kind] += n
    base = _tool_params(scope)
    ranked = []
    for tool, n in failed.most_common(TOP):
        params = {**base, "name": tool, "status": ToolCallStatus.FAILED}
        by_kind = [
            (kind or "(none)", count, tool_calls_list({**params, "error_kind": kind}))
            for kind, count in kinds[tool].most_common()
        ]
        ranked.append(ToolFailures(tool, calls[tool], n, tool_calls_list(params), by_kind))
    return ranked


def _waiting_runs(scope: Scope) -> QuerySet[Run]:
    return Run.objects.filter(scope.live_q(), status=RunStatus.AWAITING_INPUT)


def _pending(scope: Scope, now: dt.datetime) -> Pending:
    """What waits for a person (or a caller) now, whenever it started: by kind, and
    the ones waiting longest."""
    waiting = _waiting_runs(scope).annotate(kind=KeyTextTransform("kind", "awaiting"))
    params = scope.filter_params()
    by_kind = [
        (
            kind or "",
            n,
            runs_list({**params, "status": RunStatus.AWAITING_INPUT, "waiting_for": kind or ""}),
        )
        for kind, n in waiting.values_list("kind").annotate(n=Count("*")).order_by("-n", "kind")
    ]
    # Only the columns shown: the runs waiting are sorted to find the oldest.
    oldest = (
        waiting.select_related("session__owner")
        .only("id", "agent", "awaiting_since", "session__owner__username")
        .order_by("awaiting_since")[:TOP]
    )
    return Pending(
        by_kind=by_kind,
        oldest=[
            Waiting(
                run_id=run.pk,
                agent=run.agent,
                owner=run.session.owner.get_username(),
                kind=run.kind or "",
                since=run.awaiting_since,
                age=now - run.awaiting_since if run.awaiting_since else None,
                url=reverse("admin:runs_app_run_timeline", args=[run.pk]),
            )
            for run in oldest
        ],
    )


@dataclass
class Scored:
    """One score name's figures on the runs in scope, with links to those runs."""

    name: str
    count: int
    average: float | None
    up: int
    down: int
    url: str
    up_url: str
    down_url: str
    categories: list[tuple[str, int, str]]

    @property
    def up_share(self) -> float | None:
        given = self.up + self.down
        return self.up / given if given else None


def scored(scope: Scope) -> list[Scored]:
    """The scores given on the runs in scope, per name (the runs list's ``score``
    filter lists the runs behind each figure)."""
    params = scope.list_params()
    found = []
    with transaction.atomic():
        sql.plan_with_values()
        summaries = score_summary(Run.objects.filter(scope.runs_q()))
    for summary in summaries:
        name = summary.name
        found.append(
            Scored(
                name=name,
                count=summary.count,
                average=summary.average,
                up=summary.up,
                down=summary.down,
                url=runs_list({**params, "score": name}),
                up_url=runs_list({**params, "score": f"{name}=up"}),
                down_url=runs_list({**params, "score": f"{name}=down"}),
                categories=[
                    (category, n, runs_list({**params, "score": f"{name}={category}"}))
                    for category, n in summary.categories
                ],
            )
        )
    return found
