"""The tops of the timelines: a run with its child runs and waits, a session with its
runs and waits. Each is a few bounded queries, whatever the size of the log."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any
from uuid import UUID

from django.db.models import QuerySet
from django.urls import reverse
from django.utils import timezone

from goaai.runtime.types import known_cost
from goaai.runtime.vocabulary import FAILED_RUN_STATUSES, RunStatus
from runs_app.models import Run
from runs_app.timeline.values import (
    Value,
    format_cost,
    format_duration,
    make_value,
    one_line,
    payload_url,
    seconds_between,
)
from runs_app.timeline.waits import WaitPeriod, waits
from sessions_app.models import RunEvent, Session
from sessions_app.selectors import session_run_totals, sessions_with_usage

CHILD_RUNS_LIMIT = 50
SESSION_RUNS_LIMIT = 200
# "1000+ events": an upper-bounded count, never a COUNT(*) of the whole log.
COUNT_CAP = 1000


def _may_have_waited(status: str, paused_seconds: float, awaiting_since: object) -> bool:
    """Whether a run's row says it ever waited: only then are its waits looked up."""
    return paused_seconds > 0 or awaiting_since is not None or status == RunStatus.AWAITING_INPUT


# A run


@dataclass
class ChildRun:
    id: UUID
    agent: str
    status: str
    created_at: dt.datetime
    url: str


@dataclass
class RunHeader:
    run: Run
    input: Value
    output: Value
    children: list[ChildRun]
    children_cut: bool
    waits: list[WaitPeriod]
    waits_cut: bool
    event_count: int
    event_count_capped: bool
    users: dict[int, str]

    @property
    def origin(self) -> dt.datetime:
        return self.run.started_at or self.run.created_at

    @property
    def queued(self) -> str:
        return format_duration(seconds_between(self.run.created_at, self.run.started_at))

    @property
    def duration(self) -> str:
        return format_duration(seconds_between(self.run.started_at, self._end))

    @property
    def waited(self) -> str:
        seconds = self._waited_seconds
        return format_duration(seconds) if seconds else ""

    @property
    def working(self) -> str:
        total = seconds_between(self.run.started_at, self._end)
        if total is None:
            return ""
        return format_duration(max(total - self._waited_seconds, 0.0))

    @property
    def failed(self) -> bool:
        return self.run.status in FAILED_RUN_STATUSES or bool(self.run.error_kind)

    @property
    def cost(self) -> str:
        return format_cost(known_cost(self.run.cost, self.run.unpriced_turns))

    @property
    def canceled(self) -> bool:
        return self.run.status == RunStatus.CANCELED

    @property
    def can_cancel(self) -> bool:
        return not self.run.is_terminal

    @property
    def _end(self) -> dt.datetime | None:
        """When the run ended; now for a run still going."""
        return self.run.ended_at or (None if self.run.is_terminal else timezone.now())

    @property
    def _waited_seconds(self) -> float:
        seconds = self.run.paused_seconds
        if self.run.awaiting_since is not None:
            seconds += (timezone.now() - self.run.awaiting_since).total_seconds()
        return seconds


def run_for_timeline(run_id: UUID) -> Run | None:
    return (
        Run.objects.select_related("session", "session__owner", "parent_run", "created_by")
        .filter(pk=run_id)
        .first()
    )


def _child_runs(parent: Run) -> tuple[list[ChildRun], bool]:
    rows = list(
        Run.objects.filter(parent_run_id=parent.id)
        .order_by("created_at")
        .values("id", "agent", "status", "created_at")[: CHILD_RUNS_LIMIT + 1]
    )
    children = [
        ChildRun(
            id=r["id"],
            agent=r["agent"],
            status=r["status"],
            created_at=r["created_at"],
            url=reverse("admin:runs_app_run_timeline", args=[r["id"]]),
        )
        for r in rows[:CHILD_RUNS_LIMIT]
    ]
    return children, len(rows) > CHILD_RUNS_LIMIT


def bounded_count(events: QuerySet[RunEvent]) -> tuple[int, bool]:
    """How many events, counted up to ``COUNT_CAP`` and no further."""
    count = events.values("id")[: COUNT_CAP + 1].count()
    return min(count, COUNT_CAP), count > COUNT_CAP


def run_header(run: Run) -> RunHeader:
    """What the top of a run's timeline shows; three bounded queries at most."""
    children, children_cut = _child_runs(run)
    periods, waits_cut, users = waits(
        run=run,
        may_have_waited=_may_have_waited(run.status, run.paused_seconds, run.awaiting_since),
    )
    count, capped = bounded_count(RunEvent.objects.filter(run_id=run.id).order_by("seq"))
    return RunHeader(
        run=run,
        input=make_value(run.input, full_url=payload_url("run", run.id, "input")),
        output=make_value(run.output, full_url=payload_url("run", run.id, "output")),
        children=children,
        children_cut=children_cut,
        waits=periods,
        waits_cut=waits_cut,
        event_count=count,
        event_count_capped=capped,
        users=users,
    )


# A session


@dataclass
class SessionRun:
    id: UUID
    agent: str
    status: str
    input: str
    parent_run_id: UUID | None
    created_at: dt.datetime
    ended_at: dt.datetime | None
    total_tokens: int
    cost: str
    url: str

    @property
    def label(self) -> str:
        return f"{str(self.id)[:8]} · {self.agent}"


@dataclass
class SessionHeader:
    session: Session
    runs: list[SessionRun]
    runs_cut: bool
    waits: list[WaitPeriod]
    waits_cut: bool
    users: dict[int, str]

    @property
    def run_labels(self) -> dict[UUID, str]:
        return {r.id: r.label for r in self.runs}

    @property
    def event_count(self) -> int:
        # The session keeps the number of its newest event: the count, for free.
        return self.session.last_event_seq

    @property
    def totals(self) -> dict[str, Any]:
        """What all of the session's runs add up to (not only those listed)."""
        return session_run_totals(self.session, fields=SESSION_TOTALS)

    @property
    def cost(self) -> str:
        totals = self.totals
        return format_cost(known_cost(totals["cost"], totals["unpriced_turns"]))


# What the session's header adds up over its runs.
SESSION_TOTALS = ("total_tokens", "cost", "unpriced_turns")


def session_for_timeline(session_id: UUID) -> Session | None:
    sessions = Session.objects.select_related("owner").filter(pk=session_id)
    return sessions_with_usage(sessions, fields=SESSION_TOTALS).first()


def session_header(session: Session) -> SessionHeader:
    """What the top of a session's timeline shows: its runs (the first
    ``SESSION_RUNS_LIMIT``) and their waits."""
    rows = list(
        Run.objects.filter(session_id=session.id)
        .order_by("created_at")
        .values(
            "id",
            "agent",
            "status",
            "input",
            "parent_run_id",
            "created_at",
            "ended_at",
            "total_tokens",
            "cost",
            "unpriced_turns",
            "paused_seconds",
            "awaiting_since",
        )[: SESSION_RUNS_LIMIT + 1]
    )
    runs = [
        SessionRun(
            id=r["id"],
            agent=r["agent"],
            status=r["status"],
            input=one_line(r["input"], 100),
            parent_run_id=r["parent_run_id"],
            created_at=r["created_at"],
            ended_at=r["ended_at"],
            total_tokens=r["total_tokens"],
            cost=format_cost(known_cost(r["cost"], r["unpriced_turns"])),
            url=reverse("admin:runs_app_run_timeline", args=[r["id"]]),
        )
        for r in rows[:SESSION_RUNS_LIMIT]
    ]
    runs_cut = len(rows) > SESSION_RUNS_LIMIT
    # Runs past the limit are not read: they may have waited.
    may_have_waited = runs_cut or any(
        _may_have_waited(r["status"], r["paused_seconds"], r["awaiting_since"]) for r in rows
    )
    periods, waits_cut, users = waits(session=session, may_have_waited=may_have_waited)
    return SessionHeader(
        session=session,
        runs=runs,
        runs_cut=runs_cut,
        waits=periods,
        waits_cut=waits_cut,
        users=users,
    )
