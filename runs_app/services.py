"""Every write to runs, turns, tool calls and the event log.

Each service is atomic, takes keyword-only arguments, and records the events that
describe its change in the same transaction (see ``runs_app.events``). Status
changes are compare-and-set updates: a run moves only from a status that leads to
the target, so two writers racing (a cancel and a completion, say) cannot both win.
"""

from __future__ import annotations

import datetime as dt
import functools
import uuid
from dataclasses import dataclass
from typing import Any, NamedTuple
from uuid import UUID

from django.contrib.auth import get_user_model
from django.db import IntegrityError, connection
from django.db.models import F, Q
from django.utils import timezone

from goaai.runtime.errors import IllegalTransition, NotFound, SessionEnded
from goaai.runtime.policy import Decision
from goaai.runtime.vocabulary import (
    RUN_END_EVENTS,
    ErrorKind,
    EventType,
    RunStatus,
    ToolCallStatus,
    sources_of,
)
from runs_app import lean
from runs_app.events import EventBatch, recording
from runs_app.models import Run, RunEvent, ToolCall, Turn
from sessions_app.models import SessionStatus

_RUNS = Run._meta.db_table
_TURNS = Turn._meta.db_table
_CALLS = ToolCall._meta.db_table
_INDEX = '"index"'  # a reserved word on both databases
_RUN_FIELDS = {f.name: f for f in Run._meta.concrete_fields}


def _session_of_run(run_id: UUID) -> UUID:
    with lean.cursor() as cursor:
        row = lean.execute(
            cursor, f"SELECT session_id FROM {_RUNS} WHERE id = %s", [run_id]
        ).fetchone()
    if row is None:
        raise NotFound(f"No run {run_id}.")
    return lean.uuid_of(row[0])


def event_append(
    *, session_id: UUID, type: str, data: dict[str, Any], run_id: UUID | None = None
) -> RunEvent:
    """Append one event to a session's log with the next sequence number."""
    with recording(session_id, expect=1) as batch:
        batch.add(type, data, run_id=run_id)
        (event,) = batch.flush()
    return RunEvent.objects.get(session_id=event.session_id, seq=event.seq)


# Runs


def run_create(
    *,
    session_id: UUID,
    agent: str,
    input: str,
    labels: dict[str, str] | None = None,
    metadata: dict[str, Any] | None = None,
    policy: dict[str, Any] | None = None,
    created_by_id: int | None = None,
    parent_run_id: UUID | None = None,
    parent_tool_call_id: UUID | None = None,
    idempotency_key: str | None = None,
    fingerprint: str = "",
    policy_decisions: list[Decision] | None = None,
) -> Run:
    """Create a pending run in an active session (:class:`SessionEnded` otherwise).

    ``policy_decisions`` are the label rules that shaped ``policy``; each is recorded
    as a ``policy.decision`` event of the new run.
    """
    with recording(session_id, expect=1 + len(policy_decisions or []), fast=True) as batch:
        if batch.session_status != SessionStatus.ACTIVE:
            raise SessionEnded(f"Session {session_id} has ended; it accepts no new runs.")
        now = batch.now
        run = lean.create(
            batch.cursor,
            Run,
            id=uuid.uuid4(),
            session_id=session_id,
            agent=agent,
            input=input,
            labels=dict(labels or {}),
            metadata=dict(metadata or {}),
            policy=dict(policy or {}),
            created_by_id=created_by_id,
            parent_run_id=parent_run_id,
            parent_tool_call_id=parent_tool_call_id,
            idempotency_key=idempotency_key,
            request_fingerprint=fingerprint,
            created_at=now,
            updated_at=now,
        )
        batch.add(
            EventType.RUN_CREATED,
            {
                "agent": agent,
                "input": input,
                "labels": run.labels,
                "parent_run": _str(parent_run_id),
            },
            run_id=run.id,
        )
        for decision in policy_decisions or []:
            batch.add(
                EventType.POLICY_DECISION,
                {"rule": decision.rule, "verdict": decision.verdict, "reason": decision.reason},
                run_id=run.id,
            )
        if parent_run_id is not None:
            batch.add(
                EventType.RUN_CHILD_LINKED,
                {"child_run": str(run.id), "parent_tool_call": _str(parent_tool_call_id)},
                run_id=parent_run_id,
            )
    return run


def _str(value: object) -> str | None:
    return None if value is None else str(value)


def _transition(
    batch: EventBatch,
    run_id: UUID,
    target: RunStatus,
    *,
    only_from: RunStatus | None = None,
    **changes: Any,
) -> Run:
    """Move a run to ``target`` if its current status allows it, in ``batch``'s
    transaction, and return it as it is then; :class:`IllegalTransition` otherwise.

    One compare-and-set statement that returns the updated row: whichever of two
    racing writers comes second finds the status changed and fails cleanly."""
    # Starting and resuming both lead to running, each from one status only.
    allowed = [only_from] if only_from else sorted(sources_of(target))
    assignments = ["status = %s", "updated_at = %s"]
    values: list[Any] = [target, batch.now]
    for name, value in changes.items():
        column, mark = _run_column(name)
        if isinstance(value, Increment):
            assignments.append(f"{column} = {column} + %s")
            values.append(value.amount)
        else:
            assignments.append(f"{column} = {mark}")
            values.append(value)
    marks = ", ".join(["%s"] * len(allowed))
    row = lean.execute(
        batch.cursor,
        f"UPDATE {_RUNS} SET {', '.join(assignments)} WHERE id = %s AND status IN ({marks}) "
        f"RETURNING {lean.columns(Run)}",
        [*values, run_id, *allowed],
    ).fetchone()
    if row is None:
        current = Run.objects.filter(pk=run_id).values_list("status", flat=True).first()
        if current is None:
            raise NotFound(f"No run {run_id}.")
        raise IllegalTransition(run_id, current, target)
    return lean.load(Run, row)


@functools.cache
def _run_column(name: str) -> tuple[str, str]:
    """A Run field's quoted column and the placeholder its values take."""
    field = _RUN_FIELDS[name]
    is_json = field.get_internal_type() == "JSONField"
    return connection.ops.quote_name(field.column), "%j" if is_json else "%s"


@dataclass(frozen=True)
class Increment:
    """A change that adds to a column's current value instead of replacing it."""

    amount: float


def run_start(*, run_id: UUID) -> Run:
    """``pending`` → ``running``."""
    with recording(_session_of_run(run_id)) as batch:
        run = _transition(
            batch,
            run_id,
            RunStatus.RUNNING,
            only_from=RunStatus.PENDING,
            started_at=timezone.now(),
        )
        batch.add(EventType.RUN_STARTED, {"agent": run.agent}, run_id=run_id)
    return run


def _run_end(batch: EventBatch, run_id: UUID, status: RunStatus, **changes: Any) -> Run:
    now = batch.now
    run = _transition(batch, run_id, status, ended_at=now, **changes)
    if status != RunStatus.COMPLETED:
        # Agents this run called, and that still wait or work, stop with it.
        for child_id in Run.objects.filter(
            parent_run_id=run_id,
            status__in=[RunStatus.PENDING, RunStatus.RUNNING, RunStatus.AWAITING_INPUT],
        ).values_list("id", flat=True):
            _cancel_or_flag(batch, child_id, f"its parent run {run_id} ended {status}")
    # Steps still open when a run ends were cut short with it, and the log says so.
    cut_short = lean.execute(
        batch.cursor,
        f"UPDATE {_CALLS} SET status = %s, ended_at = %s WHERE run_id = %s AND status IN (%s, %s) "
        "RETURNING id, name",
        [ToolCallStatus.CANCELED, now, run_id, ToolCallStatus.SCHEDULED, ToolCallStatus.RUNNING],
    ).fetchall()
    for call_id, name in cut_short:
        batch.add(
            EventType.TOOL_CALL_CANCELED,
            {"tool_call": str(call_id), "name": name, "reason": f"the run {status}"},
            run_id=run_id,
        )
    return run


def _usage(run: Run) -> dict[str, int]:
    return {
        "input_tokens": run.input_tokens,
        "output_tokens": run.output_tokens,
        "total_tokens": run.total_tokens,
    }


def run_complete(*, run_id: UUID, output: str, session_id: UUID | None = None) -> Run:
    """``running`` → ``completed`` with the final answer."""
    with recording(session_id or _session_of_run(run_id), expect=1, fast=True) as batch:
        run = _run_end(batch, run_id, RunStatus.COMPLETED, output=output)
        batch.add(
            RUN_END_EVENTS[RunStatus.COMPLETED],
            {"output": output, "usage": _usage(run)},
            run_id=run_id,
        )
    return run


def run_fail(*, run_id: UUID, kind: str, message: str, retryable: bool = False) -> Run:
    """The run failed: it records why (kind, message) and whether a retry may help."""
    with recording(_session_of_run(run_id)) as batch:
        run = _run_end(
            batch,
            run_id,
            RunStatus.FAILED,
            error_kind=kind,
            error_message=message,
            error_retryable=retryable,
        )
        batch.add(
            RUN_END_EVENTS[RunStatus.FAILED],
            {"error": {"kind": kind, "message": message, "retryable": retryable}},
            run_id=run_id,
        )
    return run


def run_time_out(*, run_id: UUID, message: str) -> Run:
    """The run spent its time budget."""
    with recording(_session_of_run(run_id)) as batch:
        run = _run_end(
            batch, run_id, RunStatus.TIMED_OUT, error_kind="timeout", error_message=message
        )
        batch.add(
            RUN_END_EVENTS[RunStatus.TIMED_OUT],
            {"error": {"kind": "timeout", "message": message, "retryable": False}},
            run_id=run_id,
        )
    return run


def run_cancel(*, run_id: UUID, reason: str = "") -> Run:
    """Cancel a run now (from pending, running or awaiting input)."""
    with recording(_session_of_run(run_id)) as batch:
        run = _cancel(batch, run_id, reason)
    return run


def _cancel(batch: EventBatch, run_id: UUID, reason: str) -> Run:
    run = _run_end(batch, run_id, RunStatus.CANCELED, cancel_reason=reason[:200])
    batch.add(RUN_END_EVENTS[RunStatus.CANCELED], {"reason": reason}, run_id=run_id)
    return run


def run_request_cancel(*, run_id: UUID, reason: str = "") -> Run:
    """Ask a run to stop.

    A pending or waiting run has no loop stepping through it, so it is canceled at
    once; a running run is flagged and its loop cancels it at the next step.
    Asking again, or asking a finished run, changes nothing.
    """
    with recording(_session_of_run(run_id)) as batch:
        run = _cancel_or_flag(batch, run_id, reason)
    return run


def _cancel_or_flag(batch: EventBatch, run_id: UUID, reason: str) -> Run:
    run = Run.objects.get(pk=run_id)
    if run.is_terminal:
        return run
    if run.status in (RunStatus.PENDING, RunStatus.AWAITING_INPUT) or not _lease_live(run):
        # No loop is stepping through this run to see a flag: cancel it now.
        return _cancel(batch, run_id, reason)
    Run.objects.filter(pk=run_id, cancel_requested_at__isnull=True).update(
        cancel_requested_at=timezone.now(), cancel_reason=reason[:200]
    )
    return Run.objects.get(pk=run_id)


def _lease_live(run: Run) -> bool:
    return run.lease_expires_at is not None and run.lease_expires_at > timezone.now()


def runs_cancel_in_session(*, batch: EventBatch, reason: str) -> int:
    """Stop every unfinished run of the session ``batch`` holds locked."""
    open_ids = list(
        Run.objects.filter(
            session_id=batch.session_id,
            status__in=[RunStatus.PENDING, RunStatus.RUNNING, RunStatus.AWAITING_INPUT],
        ).values_list("id", flat=True)
    )
    for run_id in open_ids:
        _cancel_or_flag(batch, run_id, reason)
    return len(open_ids)


def run_await_input(*, run_id: UUID, kind: str, data: dict[str, Any]) -> Run:
    """``running`` → ``awaiting_input``: a tool needs approval or the agent asks a
    question. The worker's lease is released: nobody executes a waiting run."""
    with recording(_session_of_run(run_id)) as batch:
        awaiting = {"kind": kind, **data}
        run = _transition(
            batch,
            run_id,
            RunStatus.AWAITING_INPUT,
            awaiting=awaiting,
            awaiting_since=timezone.now(),
            lease_owner="",
            lease_expires_at=None,
        )
        batch.add(EventType.RUN_AWAITING_INPUT, awaiting, run_id=run_id)
    return run


def _resume(batch: EventBatch, run_id: UUID, **data: Any) -> Run:
    run = Run.objects.get(pk=run_id)
    paused = (timezone.now() - run.awaiting_since).total_seconds() if run.awaiting_since else 0.0
    run = _transition(
        batch,
        run_id,
        RunStatus.RUNNING,
        only_from=RunStatus.AWAITING_INPUT,
        awaiting=None,
        awaiting_since=None,
        paused_seconds=Increment(paused),
        lease_owner="",
        lease_expires_at=None,
    )
    batch.add(EventType.RUN_RESUMED, {"waited_seconds": round(paused, 3), **data}, run_id=run_id)
    return run


def run_resume(*, run_id: UUID) -> Run:
    """``awaiting_input`` → ``running``: the answer arrived. The run has no worker
    until an executor claims it again."""
    with recording(_session_of_run(run_id)) as batch:
        run = _resume(batch, run_id)
    return run


def run_respond(
    *,
    run_id: UUID,
    tool_call_id: UUID | None = None,
    decision: str = "",
    reason: str = "",
    answer: str | None = None,
    decided_by_id: int | None = None,
) -> Run:
    """Answer what a waiting run asks: approve or deny a tool call, or answer a
    question. The run becomes ``running`` again, ready to be claimed.

    Raises :class:`IllegalTransition` when the run is not waiting, or waits for
    something other than what the answer addresses (an answer that came too late).
    """
    with recording(_session_of_run(run_id)) as batch:
        run = Run.objects.get(pk=run_id)
        awaiting = run.awaiting or {}
        if run.status != RunStatus.AWAITING_INPUT:
            raise IllegalTransition(run_id, run.status, "answered")
        if awaiting.get("kind") == "delegated":
            raise IllegalTransition(
                run_id,
                f"waiting for its child run {awaiting.get('child_run')}",
                "answered here; answer the child run",
            )
        waited_call = UUID(str(awaiting.get("tool_call")))
        if tool_call_id is not None and tool_call_id != waited_call:
            raise IllegalTransition(
                run_id, f"waiting on tool call {waited_call}", f"an answer for {tool_call_id}"
            )
        now = timezone.now()
        call = ToolCall.objects.get(pk=waited_call)
        # Who decided, by name too: the log is read by people who do not know user ids.
        decider = (
            get_user_model()
            .objects.filter(pk=decided_by_id)
            .values_list("username", flat=True)
            .first()
            if decided_by_id is not None
            else None
        )
        if awaiting.get("kind") == "question":
            if answer is None:
                raise IllegalTransition(run_id, "waiting for an answer", "a decision")
            ToolCall.objects.filter(pk=call.pk).update(
                status=ToolCallStatus.SUCCEEDED,
                result={"answer": answer},
                decision="answered",
                decided_by_id=decided_by_id,
                decided_at=now,
                attempt=F("attempt") + 1,
                started_at=call.created_at,
                ended_at=now,
                duration_ms=int((now - call.created_at).total_seconds() * 1000),
            )
            batch.add(
                EventType.TOOL_CALL_DECIDED,
                {
                    "tool_call": str(call.pk),
                    "name": call.name,
                    "decision": "answered",
                    "decided_by": decided_by_id,
                    "decided_by_name": decider,
                },
                run_id=run_id,
            )
            batch.add(
                EventType.TOOL_CALL_SUCCEEDED,
                {"tool_call": str(call.pk), "name": call.name, "result": {"answer": answer}},
                run_id=run_id,
            )
        else:
            if decision not in ("approve", "deny"):
                raise IllegalTransition(run_id, "waiting for approval", f"decision {decision!r}")
            approved = decision == "approve"
            changes: dict[str, Any] = {
                "decision": "approved" if approved else "denied",
                "decision_reason": reason,
                "decided_by_id": decided_by_id,
                "decided_at": now,
            }
            if not approved:
                changes.update(
                    status=ToolCallStatus.DENIED,
                    error_kind="domain_rejection",
                    error_message="Denied" + (f": {reason}" if reason else "."),
                    ended_at=now,
                )
            ToolCall.objects.filter(pk=call.pk).update(**changes)
            batch.add(
                EventType.TOOL_CALL_DECIDED,
                {
                    "tool_call": str(call.pk),
                    "name": call.name,
                    "decision": changes["decision"],
                    "reason": reason,
                    "decided_by": decided_by_id,
                    "decided_by_name": decider,
                },
                run_id=run_id,
            )
        return _resume(batch, run_id, answered=awaiting.get("kind"))


def run_settle_child(*, child_run_id: UUID) -> UUID | None:
    """A child run ended after waiting for a person. If its parent waits for it,
    the child's answer (or why it has none) becomes the result of the parent's tool
    call and the parent is ready to continue; returns the parent's id, or ``None``.
    """
    child = Run.objects.filter(pk=child_run_id).first()
    if child is None or child.parent_run_id is None or not child.is_terminal:
        return None
    with recording(child.session_id) as batch:
        parent = Run.objects.filter(pk=child.parent_run_id).first()
        awaiting = (parent.awaiting or {}) if parent else {}
        if (
            parent is None
            or parent.status != RunStatus.AWAITING_INPUT
            or awaiting.get("kind") != "delegated"
            or awaiting.get("child_run") != str(child.pk)
        ):
            return None
        call_id = UUID(str(awaiting["tool_call"]))
        call = ToolCall.objects.get(pk=call_id)
        now = timezone.now()
        if child.status == RunStatus.COMPLETED:
            result = {"agent": child.agent, "run": str(child.pk), "answer": child.output}
            changes: dict[str, Any] = {"status": ToolCallStatus.SUCCEEDED, "result": result}
            event = EventType.TOOL_CALL_SUCCEEDED
            data: dict[str, Any] = {"result": result}
        else:
            detail = child.error_message or child.cancel_reason or child.status
            message = f"The {child.agent} agent did not answer: {detail}"
            changes = {
                "status": ToolCallStatus.FAILED,
                "error_kind": ErrorKind.DOMAIN_REJECTION,
                "error_message": message,
            }
            event = EventType.TOOL_CALL_FAILED
            data = {"error": {"kind": ErrorKind.DOMAIN_REJECTION, "message": message}}
        started = call.started_at or call.created_at
        duration = int((now - started).total_seconds() * 1000)
        ToolCall.objects.filter(pk=call_id, status=ToolCallStatus.RUNNING).update(
            ended_at=now, duration_ms=duration, **changes
        )
        batch.add(
            event,
            {"tool_call": str(call_id), "name": call.name, "duration_ms": duration, **data},
            run_id=parent.pk,
        )
        _resume(batch, parent.pk, answered="delegated", child_run=str(child.pk))
    return parent.pk


def run_claim(
    *, run_id: UUID, owner: str, lease_seconds: float, session_id: UUID | None = None
) -> tuple[Run, bool] | None:
    """Take a run for execution under a lease: the run, and whether it has just
    started (``False``: it was taken over); ``None`` if it is not claimable.

    A pending run starts (``run.started``); a running run that no live worker holds
    (its lease expired, or it was released after an answer) is taken over, and
    taking over from a dead worker is recorded as ``run.resumed``.
    """
    with recording(session_id or _session_of_run(run_id), expect=1, fast=True) as batch:
        now = batch.now
        expires = now + dt.timedelta(seconds=lease_seconds)
        try:
            run = _transition(
                batch,
                run_id,
                RunStatus.RUNNING,
                only_from=RunStatus.PENDING,
                started_at=now,
                lease_owner=owner,
                lease_expires_at=expires,
            )
        except IllegalTransition:
            run = None
        if run is not None:
            # It was pending: the common case, settled in one statement.
            batch.add(EventType.RUN_STARTED, {"agent": run.agent, "worker": owner}, run_id=run_id)
            return run, True
        run = Run.objects.filter(pk=run_id).first()
        if run is None or run.status != RunStatus.RUNNING or _lease_live(run):
            return None
        # Compare-and-set on the lease as it was seen expired: if its holder renewed
        # it in the meantime, the takeover fails instead of two workers running it.
        taken = (
            Run.objects.filter(pk=run_id, status=RunStatus.RUNNING, lease_owner=run.lease_owner)
            .filter(Q(lease_expires_at__isnull=True) | Q(lease_expires_at__lte=now))
            .update(lease_owner=owner, lease_expires_at=expires)
        )
        if not taken:
            return None
        if run.lease_owner:
            batch.add(
                EventType.RUN_RESUMED,
                {"reason": "worker_lost", "previous_worker": run.lease_owner, "worker": owner},
                run_id=run_id,
            )
    return Run.objects.get(pk=run_id), False


def run_renew_lease(*, run_id: UUID, owner: str, lease_seconds: float) -> bool:
    """Extend the lease ``owner`` holds; ``False`` if it holds it no more."""
    expires = timezone.now() + dt.timedelta(seconds=lease_seconds)
    return bool(
        Run.objects.filter(pk=run_id, lease_owner=owner, status=RunStatus.RUNNING).update(
            lease_expires_at=expires
        )
    )


def policy_decision_record(*, run_id: UUID, rule: str, verdict: str, reason: str) -> RunEvent:
    """Record that a policy rule decided something about a run."""
    return event_append(
        session_id=_session_of_run(run_id),
        run_id=run_id,
        type=EventType.POLICY_DECISION,
        data={"rule": rule, "verdict": verdict, "reason": reason},
    )


# Turns


def turn_start(
    *,
    run_id: UUID,
    index: int,
    model: str,
    request_messages: list[dict[str, Any]],
    session_id: UUID | None = None,
) -> Turn:
    """Record that a turn began with these messages sent to the model."""
    session_id = session_id or _session_of_run(run_id)
    with recording(session_id, expect=1, fast=True) as batch:
        try:
            turn = lean.create(
                batch.cursor,
                Turn,
                id=uuid.uuid4(),
                run_id=run_id,
                index=index,
                model=model,
                request_messages=request_messages,
                started_at=batch.now,
            )
        except IntegrityError as exc:
            raise IllegalTransition(run_id, f"already at turn {index}", f"turn {index}") from exc
        batch.add(
            EventType.TURN_STARTED,
            {"turn": str(turn.id), "index": index, "model": model},
            run_id=run_id,
        )
    return turn


def turn_restart(*, turn_id: UUID) -> Turn:
    """A turn whose reply was lost with its worker is asked again."""
    turn = Turn.objects.select_related("run").get(pk=turn_id)
    with recording(turn.run.session_id) as batch:
        batch.add(
            EventType.TURN_STARTED,
            {"turn": str(turn.id), "index": turn.index, "model": turn.model, "restarted": True},
            run_id=turn.run_id,
        )
    return turn


class TurnKeys(NamedTuple):
    """What the step services need to know about a turn; a caller that has them
    (the runtime's store) passes them and saves a read."""

    run_id: UUID
    session_id: UUID
    turn_index: int
    model: str


class CallKeys(NamedTuple):
    """What the step services need to know about a tool call (see :class:`TurnKeys`)."""

    run_id: UUID
    session_id: UUID
    name: str
    started_at: dt.datetime | None


def _turn_keys(turn_id: UUID) -> TurnKeys:
    """(run, session, index, model) of a turn, in one lean read."""
    with lean.cursor() as cursor:
        row = lean.execute(
            cursor,
            f"SELECT t.run_id, r.session_id, t.{_INDEX}, t.model FROM {_TURNS} t "
            f"JOIN {_RUNS} r ON r.id = t.run_id WHERE t.id = %s",
            [turn_id],
        ).fetchone()
    if row is None:
        raise NotFound(f"No turn {turn_id}.")
    return TurnKeys(lean.uuid_of(row[0]), lean.uuid_of(row[1]), row[2], row[3])


def turn_complete(
    *,
    turn_id: UUID,
    text: str,
    tool_calls: list[dict[str, Any]],
    input_tokens: int,
    output_tokens: int,
    latency_ms: int,
    model: str = "",
    keys: TurnKeys | None = None,
) -> None:
    """Record the model's reply to a turn and add its token usage to the run's."""
    run_id, session_id, index, current_model = keys or _turn_keys(turn_id)
    with recording(session_id, expect=3 if text else 2, fast=True) as batch:
        lean.execute(
            batch.cursor,
            f"UPDATE {_TURNS} SET response_text = %s, response_tool_calls = %j, "
            "input_tokens = %s, output_tokens = %s, latency_ms = %s, ended_at = %s, model = %s "
            "WHERE id = %s",
            [
                text,
                tool_calls,
                input_tokens,
                output_tokens,
                latency_ms,
                batch.now,
                model or current_model,
                turn_id,
            ],
        )
        lean.execute(
            batch.cursor,
            f"UPDATE {_RUNS} SET input_tokens = input_tokens + %s, "
            "output_tokens = output_tokens + %s, total_tokens = total_tokens + %s WHERE id = %s",
            [input_tokens, output_tokens, input_tokens + output_tokens, run_id],
        )
        batch.add(
            EventType.TURN_COMPLETED,
            {
                "turn": str(turn_id),
                "index": index,
                "tool_calls": len(tool_calls),
                "latency_ms": latency_ms,
            },
            run_id=run_id,
        )
        if text:
            batch.add(
                EventType.MESSAGE_COMPLETED,
                {"turn": str(turn_id), "role": "assistant", "text": text},
                run_id=run_id,
            )
        batch.add(
            EventType.USAGE,
            {
                "turn": str(turn_id),
                "input_tokens": input_tokens,
                "output_tokens": output_tokens,
                "total_tokens": input_tokens + output_tokens,
            },
            run_id=run_id,
        )


# Tool calls


def tool_call_schedule(
    *,
    turn_id: UUID,
    index: int,
    call_id: str,
    name: str,
    arguments: dict[str, Any],
    requires_approval: bool = False,
    run_id: UUID | None = None,
    session_id: UUID | None = None,
    start: bool = False,
) -> ToolCall:
    """Record a tool call the model asked for; one that needs approval asks for it.

    With ``start`` (a call that needs no approval), the call is recorded as running
    its first attempt in the same transaction: one step instead of two.
    """
    if requires_approval and start:
        raise IllegalTransition(call_id, "waiting for approval", "running", what="Tool call")
    if run_id is None or session_id is None:
        run_id, session_id, _, _ = _turn_keys(turn_id)
    with recording(session_id, expect=2 if requires_approval or start else 1, fast=True) as batch:
        now = batch.now
        call = lean.create(
            batch.cursor,
            ToolCall,
            id=uuid.uuid4(),
            run_id=run_id,
            turn_id=turn_id,
            session_id=session_id,
            call_id=call_id,
            index=index,
            name=name,
            arguments=arguments,
            requires_approval=requires_approval,
            status=ToolCallStatus.RUNNING if start else ToolCallStatus.SCHEDULED,
            attempt=1 if start else 0,
            created_at=now,
            started_at=now if start else None,
        )
        batch.add(
            EventType.TOOL_CALL_SCHEDULED,
            {
                "tool_call": str(call.id),
                "name": name,
                "arguments": arguments,
                "requires_approval": requires_approval,
            },
            run_id=run_id,
        )
        if requires_approval:
            batch.add(
                EventType.TOOL_CALL_APPROVAL_REQUESTED,
                {"tool_call": str(call.id), "name": name, "arguments": arguments},
                run_id=run_id,
            )
        if start:
            batch.add(
                EventType.TOOL_CALL_STARTED,
                {"tool_call": str(call.id), "name": name, "attempt": 1},
                run_id=run_id,
            )
    return call


def _tool_call_keys(tool_call_id: UUID) -> CallKeys:
    """(run, session, name, started_at) of a tool call, in one lean read."""
    with lean.cursor() as cursor:
        row = lean.execute(
            cursor,
            f"SELECT run_id, session_id, name, started_at FROM {_CALLS} WHERE id = %s",
            [tool_call_id],
        ).fetchone()
    if row is None:
        raise NotFound(f"No tool call {tool_call_id}.")
    return CallKeys(lean.uuid_of(row[0]), lean.uuid_of(row[1]), row[2], lean.datetime_of(row[3]))


def _tool_call_status(tool_call_id: UUID) -> str:
    status = ToolCall.objects.filter(pk=tool_call_id).values_list("status", flat=True).first()
    if status is None:
        raise NotFound(f"No tool call {tool_call_id}.")
    return status


def tool_call_begin(
    *, tool_call_id: UUID, keys: CallKeys | None = None, now: dt.datetime | None = None
) -> int:
    """A scheduled call starts executing (or an interrupted one starts again) at
    ``now``; returns its attempt number."""
    run_id, session_id, name, _ = keys or _tool_call_keys(tool_call_id)
    with recording(session_id, expect=1, fast=True) as batch:
        row = lean.execute(
            batch.cursor,
            f"UPDATE {_CALLS} SET status = %s, attempt = attempt + 1, started_at = %s "
            "WHERE id = %s AND status IN (%s, %s) RETURNING attempt",
            [
                ToolCallStatus.RUNNING,
                now or batch.now,
                tool_call_id,
                ToolCallStatus.SCHEDULED,
                ToolCallStatus.RUNNING,
            ],
        ).fetchone()
        if row is None:
            current = _tool_call_status(tool_call_id)
            raise IllegalTransition(tool_call_id, current, ToolCallStatus.RUNNING, what="Tool call")
        batch.add(
            EventType.TOOL_CALL_STARTED,
            {"tool_call": str(tool_call_id), "name": name, "attempt": row[0]},
            run_id=run_id,
        )
    return int(row[0])


def tool_call_start(
    *,
    turn_id: UUID,
    index: int,
    call_id: str,
    name: str,
    arguments: dict[str, Any],
    run_id: UUID | None = None,
    session_id: UUID | None = None,
) -> ToolCall:
    """Record a tool call that needs no approval as scheduled and started, in one step."""
    return tool_call_schedule(
        turn_id=turn_id,
        index=index,
        call_id=call_id,
        name=name,
        arguments=arguments,
        run_id=run_id,
        session_id=session_id,
        start=True,
    )


def tool_call_finish(
    *,
    tool_call_id: UUID,
    result: Any = None,
    error_kind: str = "",
    error_message: str = "",
    keys: CallKeys | None = None,
) -> None:
    """Record how a running tool call ended: its result, or its error."""
    run_id, session_id, name, started = keys or _tool_call_keys(tool_call_id)
    target = ToolCallStatus.FAILED if error_kind else ToolCallStatus.SUCCEEDED
    with recording(session_id, expect=1, fast=True) as batch:
        now = batch.now
        duration = int((now - started).total_seconds() * 1000) if started else None
        updated = lean.execute(
            batch.cursor,
            f"UPDATE {_CALLS} SET status = %s, result = %j, error_kind = %s, error_message = %s, "
            "ended_at = %s, duration_ms = %s WHERE id = %s AND status = %s",
            [
                target,
                None if error_kind else result,
                error_kind,
                error_message,
                now,
                duration,
                tool_call_id,
                ToolCallStatus.RUNNING,
            ],
        ).rowcount
        if not updated:
            raise IllegalTransition(
                tool_call_id, _tool_call_status(tool_call_id), target, what="Tool call"
            )
        data: dict[str, Any] = {
            "tool_call": str(tool_call_id),
            "name": name,
            "duration_ms": duration,
        }
        if error_kind:
            data["error"] = {"kind": error_kind, "message": error_message}
            batch.add(EventType.TOOL_CALL_FAILED, data, run_id=run_id)
        else:
            data["result"] = result
            batch.add(EventType.TOOL_CALL_SUCCEEDED, data, run_id=run_id)
