"""Reads of runs, turns, tool calls and events."""

from __future__ import annotations

from uuid import UUID

from django.db.models import QuerySet

from goaai.runtime.errors import NotFound
from goaai.runtime.vocabulary import RunStatus
from runs_app.models import Run, RunEvent


def run_get(*, run_id: UUID) -> Run:
    try:
        return Run.objects.get(pk=run_id)
    except Run.DoesNotExist:
        raise NotFound(f"No run {run_id}.") from None


def run_with_steps(*, run_id: UUID) -> Run:
    """A run with its turns and their tool calls loaded in three queries."""
    try:
        return Run.objects.prefetch_related("turns__tool_calls").get(pk=run_id)
    except Run.DoesNotExist:
        raise NotFound(f"No run {run_id}.") from None


def session_history(*, session_id: UUID, before: Run) -> list[tuple[str, str]]:
    """The (user input, final answer) pairs of the session's earlier top-level runs
    that produced an answer, oldest first: the context a new run continues from."""
    rows = (
        Run.objects.filter(
            session_id=session_id,
            parent_run__isnull=True,
            created_at__lt=before.created_at,
            status=RunStatus.COMPLETED,
        )
        .exclude(pk=before.pk)
        .order_by("created_at")
        .values_list("input", "output")
    )
    return list(rows)


def events_after(*, session_id: UUID, after: int = 0, limit: int = 1000) -> QuerySet[RunEvent]:
    """The session's events with ``seq > after``, oldest first."""
    return RunEvent.objects.filter(session_id=session_id, seq__gt=after).order_by("seq")[:limit]
