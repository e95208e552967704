"""Reads of runs, turns, tool calls and events."""

from __future__ import annotations

import datetime as dt
from uuid import UUID

from django.conf import settings
from django.db.models import F, Prefetch, Q, QuerySet
from django.utils import timezone

from goaai.runtime.errors import NotFound
from goaai.runtime.vocabulary import RunStatus
from runs_app.models import Run, ToolCall, Turn


def run_get(*, run_id: UUID) -> Run:
    try:
        return Run.objects.get(pk=run_id)
    except Run.DoesNotExist:
        raise NotFound(f"No run {run_id}.") from None


def session_history(*, session_id: UUID, before: Run) -> list[tuple[str, str]]:
    """The (user input, final answer) pairs of the session's earlier top-level runs
    that produced an answer, oldest first: the context a new run continues from."""
    rows = (
        Run.objects.filter(
            session_id=session_id,
            parent_run__isnull=True,
            status=RunStatus.COMPLETED,
            created_at__lt=before.created_at,
        )
        .exclude(pk=before.pk)
        .order_by("created_at")
        .values_list("input", "output")
    )
    return list(rows)


def runs_with_steps(runs: QuerySet[Run]) -> QuerySet[Run]:
    """``runs`` with their turns in order, each with its tool calls in order, and
    their child runs' ids: what a run's detail shows, in three more queries however
    many steps the runs have."""
    return runs.prefetch_related(
        Prefetch(
            "turns",
            queryset=Turn.objects.order_by("index").prefetch_related(
                Prefetch("tool_calls", queryset=ToolCall.objects.order_by("index"))
            ),
        ),
        Prefetch(
            "child_runs",
            queryset=Run.objects.order_by("created_at").only("id", "parent_run_id"),
        ),
    )


def run_turns(*, run_id: UUID) -> QuerySet[Turn]:
    """A run's turns in order, with their tool calls in order."""
    return (
        Turn.objects.filter(run_id=run_id)
        .order_by("index")
        .prefetch_related(Prefetch("tool_calls", queryset=ToolCall.objects.order_by("index")))
    )


def run_depth(*, run: Run) -> int:
    """How many parent runs stand above ``run`` (0 for a run a person started)."""
    depth, parent_id = 0, run.parent_run_id
    while parent_id is not None and depth < 10:
        depth += 1
        parent_id = Run.objects.filter(pk=parent_id).values_list("parent_run_id", flat=True).first()
    return depth


def without_live_worker(*, now: dt.datetime) -> Q:
    """Runs that should be executing and that no live worker holds: pending, or
    running with their worker's lease released (an answer arrived) or expired."""
    return (
        Q(status=RunStatus.PENDING)
        | Q(status=RunStatus.RUNNING, lease_expires_at__isnull=True)
        | Q(status=RunStatus.RUNNING, lease_expires_at__lt=now)
    )


def not_on_queue(*, now: dt.datetime, lease_seconds: float) -> Q:
    """Runs not known to be on the distributed queue: never put there, changed since
    they last were (a worker took them, an answer arrived), or put there longer
    than a lease ago. A message queued that long ago either waits behind other runs
    for a free worker or was lost (a Redis that came back empty); one more copy
    per lease period keeps the second case bounded without piling up the first."""
    return (
        Q(queued_at__isnull=True)
        | Q(queued_at__lt=F("updated_at"))
        | Q(queued_at__lt=now - dt.timedelta(seconds=lease_seconds))
    )


def runs_without_worker(
    *, limit: int = 100, grace_seconds: float = 30.0, lease_seconds: float | None = None
) -> list[UUID]:
    """Top-level runs that no live worker holds and that are not on the queue (see
    :func:`not_on_queue`; ``lease_seconds`` defaults to the run lease): running
    whose lease expired (or was released after an answer), and pending ones nobody
    claimed within the grace period (their hand-off to an executor was lost)."""
    now = timezone.now()
    stale = now - dt.timedelta(seconds=grace_seconds)
    lease = settings.GOAAI_RUN_LEASE_SECONDS if lease_seconds is None else lease_seconds
    rows = (
        Run.objects.filter(parent_run__isnull=True)
        .filter(
            Q(status=RunStatus.RUNNING, lease_expires_at__isnull=True, updated_at__lt=stale)
            | Q(status=RunStatus.RUNNING, lease_expires_at__lt=now)
            | Q(status=RunStatus.PENDING, created_at__lt=stale)
        )
        .filter(not_on_queue(now=now, lease_seconds=lease))
        .order_by("created_at")
        .values_list("id", flat=True)[:limit]
    )
    return list(rows)


def run_for_idempotency_key(*, session_id: UUID, key: str) -> Run | None:
    """The run created in the session with this ``Idempotency-Key``, if any."""
    return Run.objects.filter(session_id=session_id, idempotency_key=key).first()
