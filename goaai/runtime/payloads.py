"""What each event of a session's log says: one builder per event type.

Every writer of the log (the services, the demo seeder, the in-memory store) builds
its events here, so that an event of a type has the same keys wherever it comes
from; readers (the API, the live streams, the chat page, the timelines) rely on
them. Each builder returns ``(type, data)``; ids are strings, as JSON holds them.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from decimal import Decimal
from typing import Any
from uuid import UUID

from goaai.runtime.public_errors import public_error_message
from goaai.runtime.types import Usage
from goaai.runtime.vocabulary import (
    RUN_END_EVENTS,
    SESSION_DELETED,
    AwaitingKind,
    EventType,
    FinishReason,
    RunStatus,
    StopKind,
    ToolCallStatus,
    TurnInterruption,
    WriterKind,
)

Event = tuple[EventType, dict[str, Any]]


def _id(value: UUID | str | None) -> str | None:
    return None if value is None else str(value)


def logged(
    *, seq: int, type: str, run: UUID | None, data: Any, created_at: dt.datetime
) -> dict[str, Any]:
    """An event of the log as the API, the live streams and exports show it."""
    return {
        "seq": seq,
        "type": str(type),
        "run": _id(run),
        "data": data,
        "created_at": created_at.isoformat(),
    }


# Sessions


def session_created(*, agent: str, title: str, metadata: dict[str, Any]) -> Event:
    return EventType.SESSION_CREATED, {"agent": agent, "title": title, "metadata": metadata}


def session_updated(*, changes: dict[str, Any]) -> Event:
    return EventType.SESSION_UPDATED, dict(changes)


def session_ended(
    *,
    ended_at: str,
    runs_canceled: int,
    ended_by: int | None = None,
    ended_by_name: str | None = None,
) -> Event:
    """A session ended; by whom, when a person ended it (by name too: the log is
    read by people who do not know user ids)."""
    data: dict[str, Any] = {"ended_at": ended_at, "runs_canceled": runs_canceled}
    if ended_by is not None:
        data.update(ended_by=ended_by, ended_by_name=ended_by_name)
    return EventType.SESSION_ENDED, data


def session_deleted(*, session: UUID, at: str) -> dict[str, Any]:
    """The change a deleted session's owner is told of, shaped like a logged event
    (it is in no log: the log went with the session)."""
    return {
        "seq": None,
        "type": SESSION_DELETED,
        "run": None,
        "data": {},
        "created_at": at,
        "session": str(session),
    }


# Runs


def run_created(
    *,
    agent: str,
    input: str,
    labels: dict[str, str],
    parent_run: UUID | None,
    previous_run: UUID | None = None,
    retry_of: UUID | None = None,
    regenerates: UUID | None = None,
    edit_of: UUID | None = None,
) -> Event:
    """A new run; a top-level one continues from ``previous_run`` and may redo a
    run (``retry_of``, ``regenerates``, ``edit_of``)."""
    return EventType.RUN_CREATED, {
        "agent": agent,
        "input": input,
        "labels": labels,
        "parent_run": _id(parent_run),
        "previous_run": _id(previous_run),
        "retry_of": _id(retry_of),
        "regenerates": _id(regenerates),
        "edit_of": _id(edit_of),
    }


def run_queued(*, behind: UUID, ahead: int, multitask: str) -> Event:
    """A new run waits for the session's active run to end before it starts:
    ``behind`` is the open run just before it, ``ahead`` how many open runs come
    before it, ``multitask`` the policy that queued it (``enqueue``, or
    ``interrupt`` behind a run asked to stop)."""
    return EventType.RUN_QUEUED, {"behind": str(behind), "ahead": ahead, "multitask": multitask}


def policy_decision(*, rule: str, verdict: str, reason: str) -> Event:
    return EventType.POLICY_DECISION, {"rule": rule, "verdict": verdict, "reason": reason}


def run_child_linked(*, child_run: UUID, parent_tool_call: UUID | None) -> Event:
    return EventType.RUN_CHILD_LINKED, {
        "child_run": str(child_run),
        "parent_tool_call": _id(parent_tool_call),
    }


def run_started(*, agent: str, worker: str | None = None) -> Event:
    data: dict[str, Any] = {"agent": agent}
    if worker is not None:
        data["worker"] = worker
    return EventType.RUN_STARTED, data


def awaiting(
    *,
    kind: AwaitingKind,
    tool_call: UUID,
    question: str = "",
    choices: Sequence[str] = (),
    multiple: bool = False,
    child_run: UUID | None = None,
    tool_calls: Sequence[UUID] = (),
) -> dict[str, Any]:
    """What a waiting run waits for, as the run records it and its event says: a
    question says which ``choices`` it offers, if any, and whether ``multiple`` of
    them may be picked; a wait for the caller's tools lists every call it waits on
    (``tool_calls``, the first of them also as ``tool_call``)."""
    data: dict[str, Any] = {"kind": kind, "tool_call": str(tool_call)}
    if tool_calls:
        data["tool_calls"] = [str(call) for call in tool_calls]
    if question:
        data["question"] = question
    if choices:
        data.update(choices=list(choices), multiple=multiple)
    if child_run is not None:
        data["child_run"] = str(child_run)
    return data


def run_awaiting_input(*, awaiting: dict[str, Any]) -> Event:
    """``awaiting`` is what :func:`awaiting` built."""
    return EventType.RUN_AWAITING_INPUT, dict(awaiting)


def run_resumed_after_wait(*, waited_seconds: float, **answered: Any) -> Event:
    """The answer a waiting run needed arrived (``answered``: what it was)."""
    return EventType.RUN_RESUMED, {"waited_seconds": round(waited_seconds, 3), **answered}


def run_interrupted(*, cause: str, reason: str, worker: str) -> Event:
    """The worker executing a run is known to be lost (``cause``: ``process_ended``
    or ``lease_expired``, told in words as ``reason``); the run is taken up again."""
    return EventType.RUN_INTERRUPTED, {"cause": cause, "reason": reason, "worker": worker}


def run_resumed_by_worker(*, previous_worker: str, worker: str) -> Event:
    """A worker took over a run whose worker was lost."""
    return EventType.RUN_RESUMED, {
        "reason": "worker_lost",
        "previous_worker": previous_worker,
        "worker": worker,
    }


def usage_totals(
    used: Usage, cost: Decimal | None = None, unpriced_turns: int = 0
) -> dict[str, Any]:
    """Token counts of each kind and their total, with the cost in US dollars as a
    decimal string (``None`` when no turn had a price; ``unpriced_turns`` says how
    many turns of the sum had none)."""
    data: dict[str, Any] = used.as_dict()
    data["cost"] = cost_text(cost)
    if unpriced_turns:
        data["unpriced_turns"] = unpriced_turns
    return data


def cost_text(cost: Decimal | None) -> str | None:
    """A cost as JSON carries it: exact decimal text without trailing zeros."""
    if cost is None:
        return None
    text = format(cost.normalize(), "f")
    return "0" if text in ("-0", "") else text


def stopped_by(*, kind: str, user: str | None = None, rule: str = "") -> dict[str, Any] | None:
    """Who or what stopped a run (``kind``, a :class:`StopKind` value), as its end
    event carries it: the person who asked, by name, and for a policy the rule
    that fired; ``None`` when nothing is known of it."""
    if not kind:
        return None
    return {"kind": kind, "user": user, "rule": (rule or None) if kind == StopKind.POLICY else None}


def told_stop(status: str, stopped: dict[str, Any] | None) -> dict[str, Any] | None:
    """Who stopped a run (as :func:`stopped_by` built it), as a run that ended in
    ``status`` tells it: a canceled run always; a failed or timed-out one only when
    a policy rule ended it (not when it failed on its own while someone had asked
    it to stop); a completed one never."""
    if stopped is None or status == RunStatus.COMPLETED:
        return None
    if status == RunStatus.CANCELED or stopped["kind"] == StopKind.POLICY:
        return stopped
    return None


def run_ended(
    *,
    status: RunStatus,
    output: str = "",
    usage: dict[str, Any] | None = None,
    error_kind: str = "",
    error_message: str = "",
    retryable: bool = False,
    reason: str = "",
    stopped: dict[str, Any] | None = None,
) -> Event:
    """The event that announces a run's terminal ``status``. A canceled run's says
    who stopped it (``stopped_by``, built by :func:`stopped_by`; ``None`` when not
    known); so does a failed or timed-out run's when a policy rule stopped it."""
    data: dict[str, Any]
    if status == RunStatus.COMPLETED:
        data = {"output": output, "usage": usage or usage_totals(Usage())}
    elif status == RunStatus.CANCELED:
        data = {"reason": reason, "stopped_by": told_stop(status, stopped)}
    else:
        # The event is read by the run's owner: the provider's own words stay on the
        # run, for operators (goaai.runtime.public_errors).
        message = public_error_message(kind=error_kind, message=error_message, status=status)
        data = {"error": {"kind": error_kind, "message": message, "retryable": retryable}}
        if told_stop(status, stopped) is not None:
            data["stopped_by"] = stopped
    return RUN_END_EVENTS[status], data


# Turns


def turn_started(*, turn: UUID, index: int, model: str) -> Event:
    # (Logs written before crashed turns were asked again in a new turn also hold
    # ``restarted: true`` turn.started events: the same turn asked again.)
    return EventType.TURN_STARTED, {"turn": str(turn), "index": index, "model": model}


def turn_completed(
    *,
    turn: UUID,
    index: int,
    tool_calls: int,
    latency_ms: int,
    finish_reason: str = "stop",
    interruption: str = "",
    usage_estimated: bool = False,
) -> Event:
    """A turn ended: ``interruption`` says how, when its model did not finish
    (stopped, failed or crashed mid-answer; the turn keeps what it said), and
    ``usage_estimated`` whether its usage is (in part) an estimate."""
    data: dict[str, Any] = {
        "turn": str(turn),
        "index": index,
        "tool_calls": tool_calls,
        "latency_ms": latency_ms,
        "finish_reason": finish_reason,
    }
    if finish_reason == FinishReason.LENGTH:
        data["truncated"] = True
    if interruption:
        data["interruption"] = interruption
    if usage_estimated:
        data["usage_estimated"] = True
    return EventType.TURN_COMPLETED, data


def model_retry(
    *, turn: UUID, attempt: int, error_kind: str, message: str, delay_seconds: float
) -> Event:
    """A turn's model call failed in a way worth retrying; it is asked again. The
    event says why in the words of its kind (goaai.runtime.public_errors), not the
    provider's: those are logged, and the run keeps them if it fails."""
    return EventType.MODEL_RETRY, {
        "turn": str(turn),
        "attempt": attempt,
        "error_kind": error_kind,
        "message": public_error_message(kind=error_kind, message=message),
        "delay_seconds": round(delay_seconds, 3),
    }


def is_message(text: str, interruption: str = "") -> bool:
    """Whether a turn's reply is a message of the conversation (``message.completed``
    tells it): it said something, and was not lost with its worker (such text gives
    way to the answer the model is asked for again)."""
    return bool(text) and interruption != TurnInterruption.CRASHED


def message_completed(*, turn: UUID, text: str) -> Event:
    return EventType.MESSAGE_COMPLETED, {"turn": str(turn), "role": "assistant", "text": text}


def usage(*, turn: UUID, used: Usage, cost: Decimal | None, estimated: bool = False) -> Event:
    """What a turn used; ``estimated``: the provider did not report it all (the
    reply ended early), and the rest is an estimate."""
    data: dict[str, Any] = {"turn": str(turn), **usage_totals(used, cost)}
    if estimated:
        data["estimated"] = True
    return EventType.USAGE, data


def history_summarized(
    *,
    summary: UUID,
    through_run: UUID,
    runs_covered: int,
    model: str,
    used: Usage,
    cost: Decimal | None,
    latency_ms: int,
) -> Event:
    """Earlier runs were summarised to keep the run's context within budget."""
    return EventType.HISTORY_SUMMARIZED, {
        "summary": str(summary),
        "through_run": str(through_run),
        "runs_covered": runs_covered,
        "model": model,
        "latency_ms": latency_ms,
        **usage_totals(used, cost),
    }


# Tool calls


def tool_call_scheduled(
    *, tool_call: UUID, name: str, arguments: dict[str, Any], requires_approval: bool
) -> Event:
    return EventType.TOOL_CALL_SCHEDULED, {
        "tool_call": str(tool_call),
        "name": name,
        "arguments": arguments,
        "requires_approval": requires_approval,
    }


def tool_call_approval_requested(*, tool_call: UUID, name: str, arguments: dict[str, Any]) -> Event:
    return EventType.TOOL_CALL_APPROVAL_REQUESTED, {
        "tool_call": str(tool_call),
        "name": name,
        "arguments": arguments,
    }


def tool_call_started(*, tool_call: UUID, name: str, attempt: int) -> Event:
    return EventType.TOOL_CALL_STARTED, {
        "tool_call": str(tool_call),
        "name": name,
        "attempt": attempt,
    }


def tool_call_decided(
    *,
    tool_call: UUID,
    name: str,
    decision: str,
    reason: str | None,
    decided_by: int | None,
    decided_by_name: str | None,
    answer: Mapping[str, Any] | None = None,
) -> Event:
    """A person decided about a tool call: approved or denied it (``reason``), or
    answered its question (``answer``: the call's result, the answer in words and
    the choices picked, if any)."""
    data: dict[str, Any] = {"tool_call": str(tool_call), "name": name, "decision": decision}
    if reason is not None:
        data["reason"] = reason
    if answer is not None:
        data.update(answer)
    data.update(decided_by=decided_by, decided_by_name=decided_by_name)
    return EventType.TOOL_CALL_DECIDED, data


def tool_call_duration_ms(
    *, created_at: dt.datetime, started_at: dt.datetime | None, ended_at: dt.datetime
) -> int:
    """How long a tool call took: from its start, or (never started: denied, or
    answered by a person) from its creation, to its end."""
    return max(0, int((ended_at - (started_at or created_at)).total_seconds() * 1000))


# The event that says how a tool call ended, by its final status. A denied call
# has none of its own: its ``tool_call.decided`` says so.
_TOOL_CALL_END_EVENTS = {
    ToolCallStatus.SUCCEEDED: EventType.TOOL_CALL_SUCCEEDED,
    ToolCallStatus.FAILED: EventType.TOOL_CALL_FAILED,
    ToolCallStatus.CANCELED: EventType.TOOL_CALL_CANCELED,
}


def tool_call_ended(
    *,
    status: ToolCallStatus,
    tool_call: UUID,
    name: str,
    duration_ms: int | None,
    result: Any = None,
    error_kind: str = "",
    error_message: str = "",
    reason: str = "",
    stopped: dict[str, Any] | None = None,
) -> Event | None:
    """The event for a tool call that reached ``status``, or ``None`` for a denied
    call (its decision is the event). A call canceled with its run says who
    stopped the run (``stopped``, as :func:`stopped_by` builds it), when known."""
    event_type = _TOOL_CALL_END_EVENTS.get(status)
    if event_type is None:
        return None
    data: dict[str, Any] = {"tool_call": str(tool_call), "name": name, "duration_ms": duration_ms}
    if status == ToolCallStatus.SUCCEEDED:
        data["result"] = result
    elif status == ToolCallStatus.FAILED:
        data["error"] = {"kind": error_kind, "message": error_message}
    else:
        data["reason"] = reason
        if stopped is not None:
            data["stopped_by"] = stopped
    return event_type, data


# Memory


def memory_writer(
    *, user_id: int | None, run_id: UUID | None, tool_call_id: UUID | None
) -> dict[str, Any]:
    """Who changed a memory entry: a run (and its tool call), else a user, else the
    system, as ``memory.stored`` says it."""
    kind = WriterKind.RUN if run_id else WriterKind.USER if user_id else WriterKind.SYSTEM
    return {"kind": kind, "user_id": user_id, "run_id": run_id, "tool_call_id": tool_call_id}


def memory_stored(
    *,
    entry: UUID,
    key: str,
    scope: str,
    version: int,
    action: str,
    written_by: dict[str, Any],
) -> Event:
    """``written_by`` is what :func:`memory_writer` built."""
    return EventType.MEMORY_STORED, {
        "entry": str(entry),
        "key": key,
        "scope": scope,
        "version": version,
        "action": action,
        "written_by": {k: str(v) if isinstance(v, UUID) else v for k, v in written_by.items()},
    }


def memory_deleted(*, entry: UUID, key: str, scope: str) -> Event:
    return EventType.MEMORY_DELETED, {"entry": str(entry), "key": key, "scope": scope}
