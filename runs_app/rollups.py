"""The rollups behind the operators' dashboard: what ended runs add up to, per hour
and per UTC day, owner, agent, answering model and status, with histograms of
their durations (of every user's runs together, and of each user's) and counts of
how their tool calls ended.

They are kept current in the transaction that ends each run (:func:`run_ended`)
and by whatever deletes runs in bulk (:func:`runs_forgotten`, before the rows go),
so that they always equal a count over the runs that exist; :func:`recount` rebuilds
them from the runs for a time range, and :func:`differences` compares the two
(``manage.py rollups``). A run is counted in the period it was created in, the same
period its row is found in by the runs list's ``created_at`` filters, so every figure
of the dashboard links to the list it sums.

Everything a run adds is worked out in one place (:class:`Tally`), for a run that
ends, for runs about to be deleted and for a recount alike, and written in a few
statements per rollup whatever the number of rows (:func:`goaai.sql.add_to_rows`).
"""

from __future__ import annotations

import datetime as dt
import math
from collections import defaultdict
from collections.abc import Iterable, Iterator
from decimal import Decimal
from typing import Any, NamedTuple

from django.db import transaction
from django.db.models import Count, Max, Min, Model, QuerySet, Sum
from django.db.models.functions import TruncDay, TruncHour

from goaai import sql
from goaai.runtime.types import USAGE_KINDS
from goaai.runtime.vocabulary import TERMINAL_RUN_STATUSES
from runs_app.models import (
    LatencyRollup,
    RollupSpan,
    Run,
    RunRollup,
    ToolCall,
    ToolRollup,
    UserLatencyRollup,
)
from sessions_app.models import Session

# Latency bucket ``b`` holds times t (ms) with BASE**b <= t < BASE**(b+1): a
# percentile read from the histogram is within 10% of the exact one.
BASE = 1.1
ENDED = sorted(TERMINAL_RUN_STATUSES)
# The columns a run adds to its RunRollup row, beyond the count of runs.
SUMMED = (*USAGE_KINDS, "total_tokens", "cost", "unpriced_turns")
TIMED = ("timed_runs", "duration_ms", "working_ms")


def latency_bucket(ms: float) -> int:
    """The histogram bucket of a time of ``ms`` milliseconds."""
    if ms < BASE:
        return 0
    bucket = int(math.log(ms) / math.log(BASE))
    # log() rounds: keep the bucket's definition exact at its edges.
    while BASE ** (bucket + 1) <= ms:
        bucket += 1
    while bucket > 0 and BASE**bucket > ms:
        bucket -= 1
    return bucket


def bucket_bounds(bucket: int) -> tuple[float, float]:
    """The times (ms) bucket ``bucket`` holds: from the first, up to the second."""
    return (0.0 if bucket == 0 else BASE**bucket), BASE ** (bucket + 1)


def periods_of(moment: dt.datetime) -> tuple[tuple[str, dt.datetime], ...]:
    """The hour and the UTC day ``moment`` falls in."""
    hour = moment.astimezone(dt.UTC).replace(minute=0, second=0, microsecond=0)
    return ((RollupSpan.HOUR, hour), (RollupSpan.DAY, hour.replace(hour=0)))


class RunKey(NamedTuple):
    span: str
    period: dt.datetime
    agent: str
    model: str
    owner_id: int


class RunRow(NamedTuple):
    """What a run adds to the rollups, read from the run (:data:`RUN_FIELDS`)."""

    created_at: dt.datetime
    agent: str
    model: str
    owner_id: int
    status: str
    started_at: dt.datetime | None
    ended_at: dt.datetime | None
    paused_seconds: float
    input_tokens: int
    output_tokens: int
    cached_input_tokens: int
    cache_write_tokens: int
    reasoning_tokens: int
    total_tokens: int
    cost: Decimal
    unpriced_turns: int

    @classmethod
    def of(cls, run: Run, owner_id: int) -> RunRow:
        values = {name: getattr(run, name) for name in cls._fields if name != "owner_id"}
        return cls(owner_id=owner_id, **values)

    def durations(self) -> tuple[int, int] | None:
        """From start to end, and the same less its waits for people (ms)."""
        if self.started_at is None or self.ended_at is None:
            return None
        duration = max(0, int((self.ended_at - self.started_at).total_seconds() * 1000))
        return duration, max(0, duration - int(self.paused_seconds * 1000))


RUN_FIELDS = tuple("session__owner_id" if name == "owner_id" else name for name in RunRow._fields)


class CallGroup(NamedTuple):
    """Tool calls of a run by how they ended, with their time."""

    name: str
    status: str
    error_kind: str
    calls: int
    duration_ms: int | None


def call_groups(run_id: Any) -> list[CallGroup]:
    """The tool calls of run ``run_id``, grouped in the database by name, status and
    error kind."""
    groups = (
        ToolCall.objects.filter(run_id=run_id)
        .values_list("name", "status", "error_kind")
        .annotate(calls=Count("*"), ms=Sum("duration_ms"))
        .order_by()
    )
    return [CallGroup(*group) for group in groups]


class Tally:
    """What some runs add to (or, ``sign=-1``, take from) each rollup row."""

    def __init__(self, sign: int = 1) -> None:
        self.sign = sign
        self.runs: dict[tuple[Any, ...], dict[str, Any]] = defaultdict(
            lambda: dict.fromkeys(("runs", *SUMMED, *TIMED), 0)
        )
        self.latency: dict[tuple[Any, ...], int] = defaultdict(int)
        self.tools: dict[tuple[Any, ...], dict[str, int]] = defaultdict(
            lambda: {"calls": 0, "duration_ms": 0}
        )

    def add_run(self, row: RunRow) -> None:
        durations = row.durations()
        for span, period in periods_of(row.created_at):
            key = RunKey(span, period, row.agent, row.model, row.owner_id)
            sums = self.runs[(*key, row.status)]
            sums["runs"] += self.sign
            for name in SUMMED:
                sums[name] += self.sign * getattr(row, name)
            if durations is None:
                continue
            sums["timed_runs"] += self.sign
            sums["duration_ms"] += self.sign * durations[0]
            sums["working_ms"] += self.sign * durations[1]
            for measure, ms in zip(LatencyRollup.Measure.values, durations, strict=True):
                self.latency[(*key, measure, latency_bucket(ms))] += self.sign

    def add_tools(self, runs: QuerySet[Run]) -> None:
        """The tool calls of ``runs`` (ended runs), grouped in the database."""
        for span, trunc in ((RollupSpan.HOUR, TruncHour), (RollupSpan.DAY, TruncDay)):
            groups = (
                ToolCall.objects.filter(run__in=runs)
                .values_list(
                    trunc("run__created_at", tzinfo=dt.UTC),
                    "run__agent",
                    "run__model",
                    "run__session__owner_id",
                    "name",
                    "status",
                    "error_kind",
                )
                .annotate(calls=Count("*"), ms=Sum("duration_ms"))
                .order_by()
            )
            for *key, calls, ms in groups:
                self._add_calls((span, *key), calls, ms)

    def add_tools_of(self, row: RunRow, groups: Iterable[CallGroup]) -> None:
        """The tool calls of one ended run, ``row``, as :func:`call_groups` found
        them; the run's periods and keys are known already."""
        for span, period in periods_of(row.created_at):
            for *ended, calls, ms in groups:
                self._add_calls(
                    (span, period, row.agent, row.model, row.owner_id, *ended), calls, ms
                )

    def _add_calls(self, key: tuple[Any, ...], calls: int, ms: int | None) -> None:
        sums = self.tools[key]
        sums["calls"] += self.sign * calls
        sums["duration_ms"] += self.sign * (ms or 0)

    def everyone(self) -> dict[tuple[Any, ...], int]:
        """The latency histograms without the owner (every user's runs together)."""
        found: dict[tuple[Any, ...], int] = defaultdict(int)
        for (span, period, agent, model, _owner, *rest), runs in self.latency.items():
            found[(span, period, agent, model, *rest)] += runs
        return found

    def rows(self) -> Iterator[tuple[type[Model], tuple[Any, ...], dict[str, Any]]]:
        """Each rollup row this tally touches, as (model, key, amounts): the key's
        values are those of the fields :data:`KEYS` names, and the rows of a model
        come in one order (so that two transactions lock them in the same order)."""
        for key, sums in sorted(self.runs.items()):
            yield RunRollup, key, sums
        for key, runs in sorted(self.latency.items()):
            yield UserLatencyRollup, key, {"runs": runs}
        for key, runs in sorted(self.everyone().items()):
            yield LatencyRollup, key, {"runs": runs}
        for key, sums in sorted(self.tools.items()):
            yield ToolRollup, key, sums


_LATENCY = ("measure", "bucket")
# Each rollup's key, and the column that says a row counts something.
KEYS: dict[type[Model], tuple[str, ...]] = {
    RunRollup: (*RunKey._fields, "status"),
    UserLatencyRollup: (*RunKey._fields, *_LATENCY),
    LatencyRollup: (*(name for name in RunKey._fields if name != "owner_id"), *_LATENCY),
    ToolRollup: (*RunKey._fields, "tool", "status", "error_kind"),
}
_COUNT = {RunRollup: "runs", UserLatencyRollup: "runs", LatencyRollup: "runs", ToolRollup: "calls"}


def _write(tally: Tally) -> None:
    """Add what ``tally`` counts to the rollups, a few statements per rollup
    whatever the number of rows; when it takes runs away, the rows that then count
    nothing are dropped."""
    by_model: dict[type[Model], list[tuple[tuple[Any, ...], dict[str, Any]]]] = defaultdict(list)
    for model, key, amounts in tally.rows():
        if any(amounts.values()):
            by_model[model].append((key, amounts))
    for model, rows in by_model.items():
        names = tuple(rows[0][1])
        sql.add_to_rows(
            model, KEYS[model], [(key, [sums[n] for n in names]) for key, sums in rows], names
        )
        if tally.sign < 0:
            periods = [key[1] for key, _ in rows]
            model._default_manager.filter(
                period__gte=min(periods), period__lte=max(periods), **{_COUNT[model]: 0}
            ).delete()


def run_ended(run: Run, *, owner_id: int, calls: Iterable[CallGroup]) -> None:
    """Count ``run``, which has just ended (in this transaction), with its tool
    calls, all of which have ended too (``calls``, as :func:`call_groups` reads
    them)."""
    tally = Tally()
    row = RunRow.of(run, owner_id)
    tally.add_run(row)
    tally.add_tools_of(row, calls)
    _write(tally)


def runs_forgotten(runs: QuerySet[Run]) -> None:
    """Take ``runs``, about to be deleted in this transaction, out of the rollups
    (those that had not ended were never counted)."""
    ended = runs.filter(status__in=ENDED)
    tally = Tally(sign=-1)
    # Unordered: iterator() is a server-side cursor on PostgreSQL, planned to return
    # its first rows fast, and in the runs' default order (newest first) that is a
    # walk down every run by created_at looking for those of the sessions going
    # (3 s for a purge batch of 500 sessions among a million runs, 0.4 s without).
    for row in ended.values_list(*RUN_FIELDS).order_by().iterator(chunk_size=2000):
        tally.add_run(RunRow(*row))
    tally.add_tools(ended)
    _write(tally)


def session_deleting(sender: Any, instance: Session, **kwargs: Any) -> None:
    """``pre_delete`` of a session: its runs go with it."""
    runs_forgotten(Run.objects.filter(session_id=instance.pk))


# Recounts


def day_range(since: dt.datetime, until: dt.datetime) -> tuple[dt.datetime, dt.datetime]:
    """The whole UTC days that hold ``since`` to ``until`` (a recount's reach: a
    day's rollups are counted from all of its runs)."""
    start = periods_of(since)[1][1]
    end = periods_of(until)[1][1]
    if end < until:
        end += dt.timedelta(days=1)
    return start, max(end, start + dt.timedelta(days=1))


def _ended_runs(start: dt.datetime, end: dt.datetime) -> QuerySet[Run]:
    return Run.objects.filter(created_at__gte=start, created_at__lt=end, status__in=ENDED)


def counted(start: dt.datetime, end: dt.datetime) -> Tally:
    """What the runs created from ``start`` to ``end`` (whole UTC days) add up to,
    counted from the runs themselves."""
    runs = _ended_runs(start, end)
    tally = Tally()
    for row in runs.values_list(*RUN_FIELDS).iterator(chunk_size=2000):
        tally.add_run(RunRow(*row))
    tally.add_tools(runs)
    return tally


def _stored(model: type[Model], start: dt.datetime, end: dt.datetime) -> QuerySet[Any]:
    return model._default_manager.filter(period__gte=start, period__lt=end)


def recount(since: dt.datetime, until: dt.datetime) -> int:
    """Rebuild the rollups of the UTC days from ``since`` to ``until`` from the runs
    (after rows were written behind the services' back, or to repair); returns the
    number of rollup rows written."""
    start, end = day_range(since, until)
    with transaction.atomic():
        tally = counted(start, end)
        for kind in _COUNT:
            _stored(kind, start, end).delete()
        batches: dict[type[Model], list[Model]] = defaultdict(list)
        for model, key, amounts in tally.rows():
            batches[model].append(model(**dict(zip(KEYS[model], key, strict=True)), **amounts))
        written = 0
        for model, rows in batches.items():
            model._default_manager.bulk_create(rows, batch_size=1000)
            written += len(rows)
    return written


Rows = dict[tuple[Any, ...], dict[str, Any]]


def _as_rows(rows: Iterable[tuple[tuple[Any, ...], dict[str, Any]]]) -> Rows:
    """Rows by their key, those that count nothing left out."""
    return {key: amounts for key, amounts in rows if any(amounts.values())}


def _stored_rows(
    model: type[Model], fields: tuple[str, ...], start: dt.datetime, end: dt.datetime
) -> Rows:
    amounts = [f.attname for f in model._meta.concrete_fields if f.attname not in {*fields, "id"}]
    found = _stored(model, start, end).values_list(*fields, *amounts)
    return _as_rows(
        (tuple(row[: len(fields)]), dict(zip(amounts, row[len(fields) :], strict=True)))
        for row in found
    )


def differences(since: dt.datetime, until: dt.datetime) -> list[str]:
    """Where the stored rollups of the UTC days from ``since`` to ``until`` differ
    from a recount (nothing: they are equal), one line per row."""
    start, end = day_range(since, until)
    expected: dict[type[Model], Rows] = defaultdict(dict)
    for model, key, amounts in counted(start, end).rows():
        expected[model].update(_as_rows([(key, amounts)]))
    found = []
    for model, fields in KEYS.items():
        stored = _stored_rows(model, fields, start, end)
        wanted = expected[model]
        for row in sorted(set(stored) | set(wanted), key=str):
            if stored.get(row) != wanted.get(row):
                found.append(
                    f"{model.__name__} {row}: stored {stored.get(row)}, counted {wanted.get(row)}"
                )
    return found


def count_if_missing(using: str = "default", **kwargs: Any) -> None:
    """``post_migrate``: rollups counted from the runs when there are ended runs
    but no rollups (a database from before them)."""
    if RunRollup.objects.using(using).exists():
        return
    if not Run.objects.using(using).filter(status__in=ENDED).exists():
        return
    bounds = everything()
    if bounds is not None:
        recount(*bounds)


def everything() -> tuple[dt.datetime, dt.datetime] | None:
    """From the first run to the last (None: there are none)."""
    bounds = Run.objects.aggregate(first=Min("created_at"), last=Max("created_at"))
    if bounds["first"] is None:
        return None
    return bounds["first"], bounds["last"] + dt.timedelta(microseconds=1)
