"""Work on whole sessions that reaches into their runs and memory: ending a session
(its runs stop with it) and retention (old sessions go with everything under them).
"""

from __future__ import annotations

import datetime as dt
import functools
from typing import Any
from uuid import UUID

from django.db import transaction
from django.db.models import Q, QuerySet
from django.utils import timezone

from goaai import sql
from goaai.runtime.vocabulary import SessionStatus
from memory_app.models import MemoryEntry, MemoryRevision
from memory_app.services import memory_purge_expired
from runs_app import rollups
from runs_app.models import HistorySummary, Run, SessionFork, ToolCall, Turn
from runs_app.services import runs_cancel_in_session
from sessions_app.eventlog import recording
from sessions_app.models import RunEvent, Session
from sessions_app.publisher import publish_sessions_deleted
from sessions_app.services import session_mark_ended


def session_end(
    *, session_id: UUID, reason: str = "session_ended", ended_by: int | None = None
) -> Session:
    """End a session: runs in flight are canceled and later runs are refused;
    ``ended_by`` is the user who ended it, when a person did.

    Ending an ended session changes nothing.
    """
    with recording(session_id) as batch:
        if batch.session_status != SessionStatus.ENDED:
            canceled = runs_cancel_in_session(batch=batch, reason=reason, by=ended_by)
            session_mark_ended(batch=batch, runs_canceled=canceled, ended_by=ended_by)
    return Session.objects.get(pk=session_id)


# Retention

PURGE_COUNT_KINDS = (
    "sessions",
    "runs",
    "turns",
    "tool_calls",
    "events",
    "memory_entries",
    "memory_revisions",
    "history_summaries",
    "session_forks",
    "expired_memory_entries",
)


def _purge_targets(
    session_ids: list[UUID] | QuerySet[Session, Any],
) -> list[tuple[str, QuerySet[Any, Any]]]:
    """What goes with the sessions ``session_ids`` names, as (kind, rows) in the order
    they are deleted; a kind may appear twice (its rows reached two ways).

    Each queryset is one set-based statement: the sessions' rows are never loaded
    into Python, unlike ``Session.delete()``, whose collector fetches every row
    below a session to cascade it.
    """
    runs = Run.objects.filter(session_id__in=session_ids).values("id")
    return [
        ("events", RunEvent.objects.filter(session_id__in=session_ids)),
        # Events and tool calls point at their run as well as their session, and the
        # run cascades. Runs record into their own session, so this finds nothing in
        # practice; it keeps the purge as exact as the models' CASCADE if one did not.
        ("events", RunEvent.objects.filter(run_id__in=runs).exclude(session_id__in=session_ids)),
        ("memory_revisions", MemoryRevision.objects.filter(session_id__in=session_ids)),
        ("memory_entries", MemoryEntry.objects.filter(session_id__in=session_ids)),
        ("tool_calls", ToolCall.objects.filter(session_id__in=session_ids)),
        (
            "tool_calls",
            ToolCall.objects.filter(run_id__in=runs).exclude(session_id__in=session_ids),
        ),
        ("turns", Turn.objects.filter(run_id__in=runs)),
        # A summary goes with its session, and with the runs it was written by or
        # covers (a fork's summary may cover runs of the session it came from).
        (
            "history_summaries",
            HistorySummary.objects.filter(
                Q(session_id__in=session_ids) | Q(run_id__in=runs) | Q(through_run_id__in=runs)
            ),
        ),
        ("session_forks", SessionFork.objects.filter(session_id__in=session_ids)),
        ("runs", Run.objects.filter(session_id__in=session_ids)),
        ("sessions", Session.objects.filter(pk__in=session_ids)),
    ]


def _detach_from_purged(session_ids: list[UUID]) -> None:
    """Null what rows outside the purged sessions say about the runs and tool calls
    being deleted (``SET_NULL`` in the models): a child run started from another
    session, memory of a user or an agent that one of these runs wrote, and the
    revisions of that memory. The rows themselves stay."""
    runs = Run.objects.filter(session_id__in=session_ids).values("id")
    calls = ToolCall.objects.filter(session_id__in=session_ids).values("id")
    others = Run.objects.exclude(session_id__in=session_ids)
    others.filter(parent_run_id__in=runs).update(parent_run=None)
    others.filter(parent_tool_call_id__in=calls).update(parent_tool_call=None)
    entries = MemoryEntry.objects.exclude(session_id__in=session_ids)
    entries.filter(written_by_run_id__in=runs).update(written_by_run=None)
    entries.filter(written_by_tool_call_id__in=calls).update(written_by_tool_call=None)
    revisions = MemoryRevision.objects.exclude(session_id__in=session_ids)
    revisions.filter(actor_run_id__in=runs).update(actor_run=None)
    revisions.filter(actor_tool_call_id__in=calls).update(actor_tool_call=None)
    # Branch links into the purged runs (a fork's first run continues from one) and
    # the forks made from them; a summary that folded in a purged one.
    for link in ("previous_run", "retry_of", "regenerates", "edit_of"):
        others.filter(**{f"{link}_id__in": runs}).update(**{link: None})
    forks = SessionFork.objects.exclude(session_id__in=session_ids)
    forks.filter(source_session_id__in=session_ids).update(source_session=None)
    forks.filter(source_run_id__in=runs).update(source_run=None)
    gone = HistorySummary.objects.filter(
        Q(session_id__in=session_ids) | Q(run_id__in=runs) | Q(through_run_id__in=runs)
    ).values("id")
    HistorySummary.objects.exclude(id__in=gone).filter(previous_id__in=gone).update(previous=None)


def sessions_purge(
    *,
    older_than: dt.timedelta,
    batch_size: int = 500,
    dry_run: bool = False,
    now: dt.datetime | None = None,
) -> dict[str, int]:
    """Delete ended sessions whose ``ended_at`` is more than ``older_than`` ago, with
    everything recorded under them: runs, turns, tool calls, events, and the
    session's memory with its revisions. Active sessions and sessions that ended
    more recently are never touched. Expired memory entries of every scope are
    purged too (:func:`memory_app.services.memory_purge_expired`), after the sessions.

    Sessions go ``batch_size`` at a time, one transaction per batch that locks the
    batch's session rows, so a purge of millions of rows holds no lock for long and
    what it finished stays finished if it is interrupted. Rows elsewhere that refer
    to a deleted run or tool call (a child run in another session, user memory a
    run wrote, its revisions) are kept with the reference nulled, as the models'
    ``SET_NULL`` says. No event is logged (these conversations ended long ago), but
    the live streams still open on a purged session end.

    With ``dry_run`` nothing is deleted and the counts are what would go. Returns
    the number of rows per kind (:data:`PURGE_COUNT_KINDS`).
    """
    if older_than < dt.timedelta(0):
        raise ValueError("older_than cannot be negative.")
    if batch_size < 1:
        raise ValueError("batch_size must be at least 1.")
    moment = now or timezone.now()
    ended_long_ago = Session.objects.filter(
        status=SessionStatus.ENDED, ended_at__lt=moment - older_than
    )
    counts = dict.fromkeys(PURGE_COUNT_KINDS, 0)

    if dry_run:
        purgeable = ended_long_ago.values("id")
        for kind, rows in _purge_targets(purgeable):
            counts[kind] += rows.count()
        counts["expired_memory_entries"] = (
            MemoryEntry.objects.filter(expires_at__lte=moment)
            .exclude(session_id__in=purgeable)
            .count()
        )
        return counts

    while True:
        with transaction.atomic():
            batch = list(
                ended_long_ago.select_for_update()
                .order_by("ended_at", "id")
                .values_list("id", flat=True)[:batch_size]
            )
            if not batch:
                break
            _detach_from_purged(batch)
            rollups.runs_forgotten(Run.objects.filter(session_id__in=batch))
            for kind, rows in _purge_targets(batch):
                counts[kind] += sql.delete_rows(rows)
            # A client may still be watching one: its stream ends (4404).
            transaction.on_commit(functools.partial(publish_sessions_deleted, batch))
    counts["expired_memory_entries"] = memory_purge_expired(now=moment)
    return counts
