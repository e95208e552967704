"""Reads of runs, turns, tool calls and events."""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections import defaultdict
from typing import Any, NamedTuple
from uuid import UUID

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import DEFAULT_DB_ALIAS
from django.db.models import (
    Case,
    CharField,
    Count,
    DateTimeField,
    Exists,
    F,
    OuterRef,
    Prefetch,
    Q,
    QuerySet,
    Subquery,
    UUIDField,
    Value,
    When,
)
from django.utils import timezone

from goaai import sql
from goaai.runtime.context import MAX_HISTORY_RUNS
from goaai.runtime.errors import NotFound
from goaai.runtime.types import StreamedText, ToolCallState
from goaai.runtime.vocabulary import OPEN_RUN_STATUSES, RunStatus
from runs_app.models import AgentVersion, HistorySummary, Run, SessionFork, ToolCall, Turn
from sessions_app.models import Session


def run_get(*, run_id: UUID) -> Run:
    try:
        return Run.objects.get(pk=run_id)
    except Run.DoesNotExist:
        raise NotFound(f"No run {run_id}.") from None


def cancel_reason_of(
    cancel_requested_at: dt.datetime | None, cancel_reason: str, status: str
) -> str | None:
    """The reason a cancel was asked for a run with these columns, or ``None``."""
    if cancel_requested_at is not None or status == RunStatus.CANCELED:
        return cancel_reason or "cancel requested"
    return None


# The columns of a run that say whether it was asked to stop.
_CANCEL_READ = ("cancel_requested_at", "cancel_reason", "status")


def run_cancel_reason(*, run_id: UUID) -> str | None:
    """The reason a cancel was asked for the run (``"run deleted"`` when there is
    no such run any more), or ``None``: one indexed probe. (The turn loop's steps
    read the same columns with the statements that lock their session.)"""
    row = sql.read_row(Run, run_id, _CANCEL_READ)
    return "run deleted" if row is None else cancel_reason_of(*row)


class BranchRun(NamedTuple):
    """An earlier run as its history is read: the run's columns (``id``, ``input``,
    ``status``, ``error_message``) and its turns' in order, each turn's tool calls
    in order under ``"tool_calls"`` (with the columns of :class:`ToolCallState`)."""

    run: dict[str, Any]
    turns: list[dict[str, Any]]


class BranchHistory(NamedTuple):
    runs: list[BranchRun]
    summary: HistorySummary | None
    cut: bool


# What a run's history needs of each earlier turn and tool call. Read as values, not
# model instances: a long branch has thousands of rows, each read at every claim.
_BRANCH_RUN_COLUMNS = ("id", "input", "status", "error_message")
_BRANCH_TURN_COLUMNS = (
    "id",
    "run_id",
    "index",
    "ended_at",
    "response_text",
    "response_tool_calls",
    "finish_reason",
    "output_tokens",
    "reasoning_tokens",
    "interruption",
)
_BRANCH_CALL_COLUMNS = ("turn_id", *(field.name for field in dataclasses.fields(ToolCallState)))


def branch_history(*, previous_run_id: UUID | None) -> BranchHistory:
    """The runs a run continuing from ``previous_run_id`` sees, oldest first, each
    with its turns and their tool calls: its branch back to the latest summary,
    which stands for the rest (or to the branch's start, or MAX_HISTORY_RUNS)."""
    if previous_run_id is None:
        return BranchHistory([], None, cut=False)
    # One more than is read: a run past the walk means older runs are left out.
    walked = sql.branch_walk(Run, HistorySummary, start=previous_run_id, limit=MAX_HISTORY_RUNS + 1)
    summary = None
    if walked and walked[-1][1]:
        summary = (
            HistorySummary.objects.filter(through_run_id=walked[-1][0])
            .order_by("-created_at")
            .first()
        )
        walked = walked[:-1]
    cut = len(walked) > MAX_HISTORY_RUNS
    ids = [run_id for run_id, _ in walked[:MAX_HISTORY_RUNS]]
    runs = {row["id"]: row for row in Run.objects.filter(pk__in=ids).values(*_BRANCH_RUN_COLUMNS)}
    calls: dict[UUID, list[dict[str, Any]]] = defaultdict(list)
    for call in (
        ToolCall.objects.filter(run_id__in=ids).order_by("index").values(*_BRANCH_CALL_COLUMNS)
    ):
        calls[call.pop("turn_id")].append(call)
    turns: dict[UUID, list[dict[str, Any]]] = defaultdict(list)
    for turn in Turn.objects.filter(run_id__in=ids).order_by("index").values(*_BRANCH_TURN_COLUMNS):
        turn["tool_calls"] = calls[turn["id"]]
        turns[turn["run_id"]].append(turn)
    return BranchHistory(
        [BranchRun(runs[i], turns[i]) for i in reversed(ids) if i in runs], summary, cut
    )


class Exchange(NamedTuple):
    input: str
    output: str
    status: str


# The most inherited exchanges a fork's page shows.
FORK_EXCHANGES_SHOWN = 30


def fork_origin(*, session_id: UUID) -> tuple[SessionFork, list[Exchange], bool] | None:
    """Where a forked session came from, and the exchanges it inherited (oldest
    first, the last :data:`FORK_EXCHANGES_SHOWN` of them; ``True`` when there were
    more), or ``None`` for a session that is no fork."""
    fork = (
        SessionFork.objects.filter(session_id=session_id).select_related("source_session").first()
    )
    if fork is None:
        return None
    if fork.source_run_id is None:
        return fork, [], False
    walked = sql.branch_walk(
        Run,
        HistorySummary,
        start=fork.source_run_id,
        limit=FORK_EXCHANGES_SHOWN + 1,
        past_summaries=True,
    )
    ids = [run_id for run_id, _ in walked]
    rows = {
        pk: Exchange(text, output, status)
        for pk, text, output, status in Run.objects.filter(pk__in=ids).values_list(
            "id", "input", "output", "status"
        )
    }
    shown = [rows[i] for i in reversed(ids[:FORK_EXCHANGES_SHOWN]) if i in rows]
    return fork, shown, len(walked) > FORK_EXCHANGES_SHOWN


_RUN_DETAIL = sql.Prepared(
    lambda: (
        Run.objects.filter(pk=sql.Slot("run", UUIDField()))
        .order_by()
        .values_list(*sql.attnames(Run), f"cancel_requested_by__{get_user_model().USERNAME_FIELD}")
    )
)
_RUN_TURNS = sql.Prepared(
    lambda: (
        Turn.objects.filter(run_id=sql.Slot("run", UUIDField()))
        .order_by("index")
        .values_list(*sql.attnames(Turn))
    )
)
_RUN_TOOL_CALLS = sql.Prepared(
    lambda: (
        ToolCall.objects.filter(run_id=sql.Slot("run", UUIDField()))
        .order_by("index")
        .values_list(*sql.attnames(ToolCall))
    )
)
_CHILD_RUNS = sql.Prepared(
    lambda: (
        Run.objects.filter(parent_run_id=sql.Slot("run", UUIDField()))
        .order_by("created_at")
        .values_list("id", "parent_run_id")
    )
)


def run_with_stopper(*, run_id: UUID) -> Run | None:
    """The run, with who asked it to stop (``run.cancel_requested_by``, their id and
    name), or ``None`` if there is none: one statement built once
    (:class:`goaai.sql.Prepared`)."""
    found = _RUN_DETAIL.first(run=run_id)
    if found is None:
        return None
    columns = sql.attnames(Run)
    run = Run.from_db(DEFAULT_DB_ALIAS, columns, found[: len(columns)])
    if run.cancel_requested_by_id is not None:
        by = sql.user_named(run.cancel_requested_by_id, found[len(columns)])
        Run.cancel_requested_by.field.set_cached_value(run, by)
    return run


def run_add_steps(run: Run) -> None:
    """Give ``run`` what its detail shows besides its own row: its turns in order,
    each with its tool calls in order (``run.turns.all()``,
    ``turn.tool_calls.all()``), and its child runs' ids (``run.child_runs.all()``).
    Three statements however many steps the run has, each built once."""
    turns = [
        Turn.from_db(DEFAULT_DB_ALIAS, sql.attnames(Turn), row)
        for row in _RUN_TURNS.rows(run=run.pk)
    ]
    calls: dict[UUID, list[ToolCall]] = {turn.pk: [] for turn in turns}
    for row in _RUN_TOOL_CALLS.rows(run=run.pk):
        call = ToolCall.from_db(DEFAULT_DB_ALIAS, sql.attnames(ToolCall), row)
        calls.setdefault(call.turn_id, []).append(call)
    for turn in turns:
        sql.prefetched(turn, "tool_calls", calls[turn.pk])
    sql.prefetched(run, "turns", turns)
    children = [
        Run.from_db(DEFAULT_DB_ALIAS, ["id", "parent_run_id"], row)
        for row in _CHILD_RUNS.rows(run=run.pk)
    ]
    sql.prefetched(run, "child_runs", children)


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
    """Runs that no live worker holds and that are not on the queue (see
    :func:`not_on_queue`; ``lease_seconds`` defaults to the run lease): running
    whose lease expired (or was released after an answer, or told interrupted),
    and pending ones nobody claimed within the grace period (their hand-off to an
    executor was lost). A run called as a tool counts only while its parent is not
    running: a running parent takes its child up itself."""
    now = timezone.now()
    stale = now - dt.timedelta(seconds=grace_seconds)
    lease = settings.GOAAI_RUN_LEASE_SECONDS if lease_seconds is None else lease_seconds
    rows = (
        # A run called as a tool by a running parent is taken up by that parent.
        Run.objects.filter(
            Q(parent_run__isnull=True) | Q(parent_run__status__in=_NOT_RUNNING_STATUSES)
        )
        .filter(
            Q(status=RunStatus.RUNNING, lease_expires_at__isnull=True, updated_at__lt=stale)
            | Q(status=RunStatus.RUNNING, lease_expires_at__lt=now)
            | Q(status=RunStatus.PENDING, created_at__lt=stale)
        )
        .filter(not_on_queue(now=now, lease_seconds=lease))
        # A run waiting for its turn is handed over when the run before it ends.
        .exclude(Q(status=RunStatus.PENDING, parent_run__isnull=True) & Q(Exists(_open_ahead())))
        .order_by("created_at")
        .values_list("id", flat=True)[:limit]
    )
    return list(rows)


_NOT_RUNNING_STATUSES = [status.value for status in RunStatus if status != RunStatus.RUNNING]


def runs_held_on(*, host: str, limit: int = 100) -> list[tuple[UUID, str]]:
    """Running runs whose lease a worker of ``host`` holds, as (id, lease owner)."""
    rows = (
        Run.objects.filter(
            status=RunStatus.RUNNING,
            lease_owner__startswith=f"{host}:",
            # Without an expiry: told interrupted already (services.run_interrupt).
            lease_expires_at__isnull=False,
        )
        .order_by("created_at")
        .values_list("id", "lease_owner")[:limit]
    )
    return list(rows)


def tool_call_child(*, tool_call_id: UUID) -> Run | None:
    """The run an agent called as a tool by this call became (the first)."""
    return Run.objects.filter(parent_tool_call_id=tool_call_id).order_by("created_at").first()


# One run at a time in a session: a top-level run starts only once every top-level
# run of its session created before it has ended. Creation order is the order the
# runs took the session's lock in (``run_create``), so it is the order messages
# arrived in.


def _open_ahead() -> QuerySet[Run]:
    """The open top-level runs of the outer run's session created before it."""
    return Run.objects.filter(
        session_id=OuterRef("session_id"),
        parent_run__isnull=True,
        status__in=OPEN_RUN_STATUSES,
        created_at__lt=OuterRef("created_at"),
    )


def with_queue(runs: QuerySet[Run]) -> QuerySet[Run]:
    """``runs`` with ``queued_behind_id``: for a top-level run that has not started,
    the open run of its session just before it, which it waits for (``None`` when
    its turn has come, and for every other run). One subquery, answered by the
    (session, created_at) index."""
    ahead = _open_ahead().order_by("-created_at").values("id")[:1]
    return runs.annotate(
        queued_behind_id=Case(
            When(status=RunStatus.PENDING, parent_run__isnull=True, then=Subquery(ahead)),
            default=Value(None),
            output_field=UUIDField(),
        )
    )


def with_queue_known(run: Run, queued_behind: UUID | None) -> Run:
    """``run`` as :func:`with_queue` reads it, where the run it waits for is known
    already (the one its creation found, in the same transaction): the subquery
    costs more to build than the rest of the read."""
    run.__dict__["queued_behind_id"] = queued_behind
    return run


def run_queued_behind(run: Run) -> UUID | None:
    """The run ``run`` (as read) waits for (see :func:`with_queue`), or ``None``:
    only a top-level run that has not started waits; for one, one query, unless the
    run was read with it (``queued_behind_id``, :func:`with_queue`)."""
    if run.status != RunStatus.PENDING or run.parent_run_id is not None:
        return None
    if hasattr(run, "queued_behind_id"):
        known: UUID | None = run.queued_behind_id
        return known
    found = _OPEN_BEFORE.first(session=run.session_id, before=run.created_at)
    return None if found is None else found[0]


# The newest open top-level run of a session created before a given time.
_OPEN_BEFORE = sql.Prepared(
    lambda: (
        Run.objects.filter(
            session_id=sql.Slot("session", UUIDField()),
            parent_run__isnull=True,
            status__in=sorted(OPEN_RUN_STATUSES),
            created_at__lt=sql.Slot("before", DateTimeField()),
        )
        .order_by("-created_at")
        .values_list("id")[:1]
    )
)


_RUN = sql.Prepared(
    lambda: (
        Run.objects.filter(pk=sql.Slot("run", UUIDField()))
        .order_by()
        .values_list(*sql.attnames(Run))
    )
)


def run_row(*, run_id: UUID) -> Run:
    """The run, as ``Run.objects.get`` reads it (:class:`NotFound` if there is none),
    in one statement built once: what a run start answers with."""
    found = _RUN.first(run=run_id)
    if found is None:
        raise NotFound(f"No run {run_id}.")
    return Run.from_db(DEFAULT_DB_ALIAS, sql.attnames(Run), found)


_OLDEST_OPEN_RUN = sql.Prepared(
    lambda: (
        Run.objects.filter(
            session_id=sql.Slot("session", UUIDField()),
            parent_run__isnull=True,
            status__in=sorted(OPEN_RUN_STATUSES),
        )
        .order_by("created_at")
        .values_list("id", "status")[:1]
    )
)


def _top_level_newest_first(session: Any) -> QuerySet[Run]:
    return Run.objects.filter(session_id=session, parent_run__isnull=True).order_by(
        "-created_at", "-id"
    )


_NEWEST_TOP_LEVEL_RUN = sql.Prepared(
    lambda: _top_level_newest_first(sql.Slot("session", UUIDField())).values_list("id")[:1]
)
_FORKED_AT = sql.Prepared(
    lambda: (
        SessionFork.objects.filter(session_id=sql.Slot("session", UUIDField()))
        .order_by()
        .values_list("source_run_id")[:1]
    )
)


def agent_versions_like(agent: Any, fingerprint: Any) -> QuerySet[AgentVersion]:
    """The versions of ``agent`` whose definition has this fingerprint, newest first."""
    return AgentVersion.objects.filter(agent=agent, fingerprint=fingerprint).order_by("-number")


def _open_top_level(session: Any) -> QuerySet[Run]:
    return Run.objects.filter(
        session_id=session, parent_run__isnull=True, status__in=sorted(OPEN_RUN_STATUSES)
    )


def _new_message_reads() -> QuerySet[Any, Any]:
    """The session (locked: it exists) with how many top-level runs it has open,
    the newest of them (id and status), its newest top-level run and the agent's
    latest version of the fingerprint, if any: one row, however long its queue."""
    session = sql.Slot("session", UUIDField())
    open_runs = _open_top_level(OuterRef("pk"))
    newest_open = open_runs.order_by("-created_at", "-id")
    versions = agent_versions_like(
        sql.Slot("agent", CharField()), sql.Slot("fingerprint", CharField())
    )
    return (
        Session.objects.filter(pk=session)
        .order_by()
        .values_list(
            Subquery(open_runs.order_by().values("session_id").annotate(n=Count("*")).values("n")),
            Subquery(newest_open.values("id")[:1]),
            Subquery(newest_open.values("status")[:1]),
            Subquery(_top_level_newest_first(OuterRef("pk")).values("id")[:1]),
            Subquery(versions.values("id")[:1]),
            Subquery(versions.values("number")[:1]),
        )
    )


_NEW_MESSAGE_READS = sql.Prepared(_new_message_reads)
_OPEN_RUNS = sql.Prepared(
    lambda: (
        _open_top_level(sql.Slot("session", UUIDField()))
        .order_by("created_at", "id")
        .values_list("id")
    )
)


class NewMessage(NamedTuple):
    """What a new message in a session finds there, under the session's lock."""

    # How many of its top-level runs have not ended (at work, waiting for a person,
    # or waiting their turn).
    open_runs: int
    # The newest of them, (id, status), if any.
    newest_open: tuple[UUID, str] | None
    # The run the message continues from (see session_head).
    head: UUID | None
    # The latest version of the agent with the definition it runs, (id, number).
    version: tuple[int, int] | None


def _forked_at(session_id: UUID) -> UUID | None:
    found = _FORKED_AT.first(session=session_id)
    return None if found is None else found[0]


def session_head(session_id: UUID) -> UUID | None:
    """The run a new message in the session continues from: its newest top-level
    run, or for a fork with none yet, the run it was forked at."""
    found = _NEWEST_TOP_LEVEL_RUN.first(session=session_id)
    return found[0] if found is not None else _forked_at(session_id)


def new_message_reads(*, session_id: UUID, agent: str, fingerprint: str) -> NewMessage:
    """What a new message in the session finds (:class:`NewMessage`): how many runs
    it has open and the newest of them, its head (as :func:`session_head`) and the
    latest version of ``agent`` whose definition has ``fingerprint``, read in one
    statement of one row, however many runs wait (and a second for a fork with no
    run yet). Read with the session locked, which is what makes it exist."""
    found = _NEW_MESSAGE_READS.first(session=session_id, agent=agent, fingerprint=fingerprint)
    if found is None:
        raise NotFound(f"No session {session_id}.")
    count, open_id, open_status, newest, version_id, number = found
    return NewMessage(
        open_runs=count or 0,
        newest_open=None if open_id is None else (open_id, open_status),
        head=newest if newest is not None else _forked_at(session_id),
        version=None if version_id is None else (version_id, number),
    )


def session_open_runs(*, session_id: UUID) -> list[UUID]:
    """The session's top-level runs that have not ended, oldest first."""
    return [row[0] for row in _OPEN_RUNS.rows(session=session_id)]


def session_next_queued(*, session_id: UUID) -> UUID | None:
    """The session's run whose turn has come: its oldest open top-level run, if it
    has not started yet."""
    first = _OLDEST_OPEN_RUN.first(session=session_id)
    return first[0] if first is not None and first[1] == RunStatus.PENDING else None


def run_for_idempotency_key(*, session_id: UUID, key: str) -> Run | None:
    """The run created in the session with this ``Idempotency-Key``, if any."""
    return Run.objects.filter(session_id=session_id, idempotency_key=key).first()


def run_trace_root(*, run: Run) -> UUID:
    """The top-level run above ``run`` (``run`` itself when a person started it): the
    run whose id names the trace that holds it and every run below it."""
    root, parent_id = run.pk, run.parent_run_id
    for _ in range(10):
        if parent_id is None:
            break
        root = parent_id
        parent_id = Run.objects.filter(pk=parent_id).values_list("parent_run_id", flat=True).first()
    return root


def run_trace_steps(*, run_id: UUID, with_content: bool = False) -> list[Turn]:
    """A run's turns in order with their tool calls in order, as telemetry reads them:
    without the messages, replies, arguments and results unless ``with_content``
    (they are the largest columns and telemetry leaves them out by default)."""
    calls = ToolCall.objects.order_by("index")
    turns = Turn.objects.filter(run_id=run_id).order_by("index")
    if not with_content:
        calls = calls.defer("arguments", "result")
        turns = turns.defer("request_messages", "response_text", "response_tool_calls")
    turns = turns.defer("reasoning", "reasoning_state")
    return list(turns.prefetch_related(Prefetch("tool_calls", queryset=calls)))


def turns_streaming(*, session_id: UUID) -> list[StreamedText]:
    """The session's turns still being answered (open, of runs that have not ended)
    whose text so far was checkpointed, oldest first, with that text: what a live
    stream sends a subscriber that joins mid-answer. One query, on the run's
    session index and the turn's run index."""
    rows = (
        Turn.objects.filter(
            run__session_id=session_id,
            run__status__in=OPEN_RUN_STATUSES,
            ended_at__isnull=True,
        )
        .exclude(response_text="")
        .order_by("started_at", "index")
        .values_list("run_id", "id", "response_text")
    )
    return [StreamedText(*row) for row in rows]
