"""The rows of the event table: an event with its outcome badge and the one line that
says what it was about (tool name, decision, error kind, rule…)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from typing import Any
from uuid import UUID

from django.utils import timezone

from goaai.runtime import payloads
from goaai.runtime.public_errors import ERROR_SENTENCES
from goaai.runtime.vocabulary import (
    FAILURE_EVENT_TYPES,
    STOPPED_EVENT_TYPES,
    SUCCESS_EVENT_TYPES,
    WAITING_EVENT_TYPES,
    EventType,
    FinishReason,
)
from runs_app.timeline.endings import run_status_of_call_end, stop_words, wait_ended
from runs_app.timeline.references import ToolCallInfo, TurnInfo, uuid_or_none
from runs_app.timeline.values import (
    Value,
    format_cost,
    format_duration,
    format_tokens,
    make_value,
    one_line,
)

# How the timeline says why a model stopped (nothing for an ordinary stop).
FINISH_REASONS: dict[str, str] = {
    FinishReason.LENGTH: "cut off by the length limit",
    FinishReason.CONTENT_FILTER: "stopped by the provider's content filter",
    FinishReason.OTHER: "stopped for another reason",
}


@dataclass
class EventRow:
    """One row of the table: an event, or in the compact view a started/finished pair
    folded into one."""

    id: int
    seq: int
    type: str
    run_id: UUID | None
    created_at: dt.datetime
    data: dict[str, Any]
    data_value: Value
    data_complete: bool
    elapsed: str = ""
    outcome: str = ""
    summary: str = ""
    permalink: str = ""
    turn: TurnInfo | None = None
    tool_call: ToolCallInfo | None = None
    decided_by: str = ""
    run_label: str = ""
    run_url: str = ""
    # Compact view: the events folded into this row, and how long the pair took.
    folded: list[EventRow] = field(default_factory=list)
    end_type: str = ""
    duration: str = ""

    @property
    def uid(self) -> str:
        """The seq as text, for element ids in templates."""
        return str(self.seq)

    @property
    def clock(self) -> str:
        """The time of day to the millisecond, in the viewer's time zone (the one
        activated for the request, as every time on the page)."""
        return timezone.localtime(self.created_at).strftime("%H:%M:%S.%f")[:-3]

    @property
    def is_policy(self) -> bool:
        return self.type == EventType.POLICY_DECISION

    @property
    def is_decision(self) -> bool:
        return self.type == EventType.TOOL_CALL_DECIDED

    @property
    def child_run_id(self) -> UUID | None:
        return uuid_or_none(self.data.get("child_run"))

    @property
    def raw(self) -> Value:
        """The event as the API shows it, for the raw JSON view."""
        document = payloads.logged(
            seq=self.seq,
            type=self.type,
            run=self.run_id,
            data=self.data if self.data_complete else "(too large: download it)",
            created_at=self.created_at,
        )
        return make_value(document, full_url=self.data_value.full_url.split("?")[0])


def outcome(event_type: str, data: Mapping[str, Any]) -> str:
    """The badge of an event: failed, canceled, succeeded, waiting, policy or none."""
    if event_type in STOPPED_EVENT_TYPES:
        return "canceled"
    if event_type in FAILURE_EVENT_TYPES:
        return "failed"
    if event_type in SUCCESS_EVENT_TYPES:
        return "succeeded"
    if event_type in WAITING_EVENT_TYPES:
        return "waiting"
    if event_type == EventType.TOOL_CALL_DECIDED:
        return "failed" if data.get("decision") == "denied" else "succeeded"
    if event_type == EventType.POLICY_DECISION:
        return "failed" if data.get("verdict") == "stop" else "policy"
    if event_type in (EventType.MODEL_RETRY, EventType.RUN_INTERRUPTED):
        return "retried"
    if event_type == EventType.TURN_COMPLETED and data.get("finish_reason") == FinishReason.LENGTH:
        return "retried"
    return ""


def summary(row: EventRow) -> str:
    """The key attribute of an event: tool name, decision, error kind, rule…"""
    if not row.data_complete and not row.data:
        return "(large event: expand to load)"
    return _SUMMARIES.get(row.type, _data)(row)


# One summary for each event type


def _run_created(row: EventRow) -> str:
    text = f"{row.data.get('agent', '')}: {one_line(row.data.get('input', ''))}"
    for link, label in (
        ("retry_of", "retry of"),
        ("regenerates", "regenerates"),
        ("edit_of", "edit of"),
    ):
        if row.data.get(link):
            text += f" · {label} {str(row.data[link])[:8]}"
    return text


def _run_queued(row: EventRow) -> str:
    behind = str(row.data.get("behind", ""))[:8]
    how = "after interrupting it" if row.data.get("multitask") == "interrupt" else "queued"
    return f"waits for run {behind} to end ({how}; {row.data.get('ahead', 1)} ahead)"


def _history_summarized(row: EventRow) -> str:
    data = row.data
    runs = _count(data.get("runs_covered"))
    return (
        f"Earlier conversation summarised: {runs} run{'s' if runs != 1 else ''} · "
        f"{data.get('model', '')} · {usage_line(data)}"
    )


def _run_started(row: EventRow) -> str:
    return str(row.data.get("agent", ""))


def _turn(row: EventRow) -> str:
    data = row.data
    parts = [f"turn {data.get('index', '?')}"]
    if data.get("model"):
        parts.append(str(data["model"]))
    if row.type == EventType.TURN_COMPLETED:
        parts.append(f"{data.get('tool_calls', 0)} tool call(s)")
        if data.get("latency_ms") is not None:
            parts.append(f"latency {format_duration(float(data['latency_ms']) / 1000)}")
        reason = FINISH_REASONS.get(str(data.get("finish_reason", "")))
        if reason:
            parts.append(reason)
    if data.get("restarted"):
        parts.append("restarted")
    return " · ".join(parts)


def _message(row: EventRow) -> str:
    return f"{row.data.get('role', '')}: {one_line(row.data.get('text', ''))}"


def _count(value: Any) -> int:
    try:
        return int(value or 0)
    except (TypeError, ValueError):
        return 0


def cost_of(value: Any) -> Decimal | None:
    """A cost as an event carries it (a decimal string, or null: no price)."""
    if value is None or value == "":
        return None
    try:
        return Decimal(str(value))
    except InvalidOperation:
        return None


def usage_line(data: Mapping[str, Any]) -> str:
    """Tokens of each kind and the cost, as a usage event or a run's usage has them:
    the kinds that are zero are left out."""
    parts = [f"{format_tokens(_count(data.get('input_tokens')))} in"]
    if _count(data.get("cached_input_tokens")):
        parts.append(f"{format_tokens(_count(data['cached_input_tokens']))} cached")
    if _count(data.get("cache_write_tokens")):
        parts.append(f"{format_tokens(_count(data['cache_write_tokens']))} written to the cache")
    out = f"{format_tokens(_count(data.get('output_tokens')))} out tokens"
    if _count(data.get("reasoning_tokens")):
        out += f" ({format_tokens(_count(data['reasoning_tokens']))} reasoning)"
    parts.append(out)
    if "cost" in data:
        cost = cost_of(data["cost"])
        parts.append("cost unknown" if cost is None else format_cost(cost))
    return " · ".join(parts)


def _usage(row: EventRow) -> str:
    return usage_line(row.data)


def _model_retry(row: EventRow) -> str:
    data = row.data
    try:
        seconds = float(data.get("delay_seconds") or 0)
    except (TypeError, ValueError):
        seconds = 0.0
    # Backoffs are seconds long: tenths say enough.
    delay = f"{seconds:.1f} s" if seconds < 60 else format_duration(seconds)
    kind = str(data.get("error_kind", ""))
    text = f"Retried after {delay}: {kind}"
    # The event says why in the words of its kind (goaai.runtime.public_errors), which
    # add nothing to the kind here; an event written before says it in its own.
    if data.get("message") and data["message"] != ERROR_SENTENCES.get(kind):
        text += f" — {one_line(data['message'], 100)}"
    return text + f" · attempt {data.get('attempt', '?')} failed"


def _tool_call(row: EventRow) -> str:
    data = row.data
    if data.get("duration_ms") is None:
        return str(data.get("name", ""))
    return f"{data.get('name', '')} · {format_duration(float(data['duration_ms']) / 1000)}"


def _tool_call_started(row: EventRow) -> str:
    return f"{row.data.get('name', '')} · attempt {row.data.get('attempt', 1)}"


def _tool_call_decided(row: EventRow) -> str:
    data = row.data
    who = row.decided_by or "unknown user"
    text = f"{data.get('name', '')} · {data.get('decision', '')} by {who}"
    if data.get("chosen"):
        # A question answered by picking choices: which, as offered.
        return text + f" · chose {one_line(', '.join(map(str, data['chosen'])), 80)}"
    if data.get("answer") is not None:
        return text + f" · {one_line(str(data['answer']), 80)}"
    return text + (f" · {one_line(data['reason'], 80)}" if data.get("reason") else "")


def _tool_call_failed(row: EventRow) -> str:
    error = row.data.get("error") or {}
    message = one_line(error.get("message", ""), 80)
    return f"{row.data.get('name', '')} · {error.get('kind', '')}: {message}"


def _tool_call_canceled(row: EventRow) -> str:
    # The reason says how the run ended ("the run canceled", "the run timed_out").
    reason = row.data.get("reason")
    name = str(row.data.get("name", ""))
    stopped = stop_words(row.data.get("stopped_by"))
    status = run_status_of_call_end(reason)
    call = row.tool_call
    if status and call is not None and call.started_at is None:
        # It never ran: it waited (for an approval, an answer, the caller's result)
        # until its run ended, which ended the wait.
        seconds = float(row.data.get("duration_ms") or 0) / 1000
        return f"{name} · wait ended: {wait_ended(status, seconds, stopped)}"
    text = f"{name} · {one_line(reason, 80)}" if reason else name
    return f"{text} — {stopped}" if stopped else text


def _awaiting_input(row: EventRow) -> str:
    what = str(row.data.get("kind", ""))
    if row.data.get("question"):
        offered = row.data.get("choices") or []
        choices = f" ({one_line(' / '.join(map(str, offered)), 60)})" if offered else ""
        return f"{what}: {one_line(row.data['question'], 80)}{choices}"
    return what


def _resumed(row: EventRow) -> str:
    data = row.data
    if "waited_seconds" in data:
        waited = format_duration(float(data["waited_seconds"]))
        return f"after waiting {waited} · {data.get('answered', '')}"
    # Resumed by another worker after the first one was lost, not after a wait.
    return f"{data.get('reason', '')} · worker {data.get('worker', '')}"


def _memory(row: EventRow) -> str:
    data = row.data
    action = f" · {data['action']}" if data.get("action") else ""
    return f"{data.get('key', '')} ({data.get('scope', '')}){action}"


def _policy(row: EventRow) -> str:
    data = row.data
    reason = one_line(data.get("reason", ""), 80)
    return f"{data.get('rule', '')} · {data.get('verdict', '')} · {reason}"


def _child_linked(row: EventRow) -> str:
    return f"child run {row.data.get('child_run', '')}"


def _run_completed(row: EventRow) -> str:
    return one_line(row.data.get("output", ""))


def _run_error(row: EventRow) -> str:
    error = row.data.get("error") or {}
    text = f"{error.get('kind', '')}: {one_line(error.get('message', ''), 100)}"
    stopped = stop_words(row.data.get("stopped_by"))
    return f"{stopped} · {text}" if stopped else text


def _run_canceled(row: EventRow) -> str:
    reason = one_line(row.data.get("reason", "") or "canceled")
    stopped = stop_words(row.data.get("stopped_by"))
    return f"{stopped} · {reason}" if stopped else reason


def _run_interrupted(row: EventRow) -> str:
    data = row.data
    return f"Interrupted — resuming: {data.get('reason', '')} · worker {data.get('worker', '')}"


def _data(row: EventRow) -> str:
    """Any other event (the session's own): its data on one line."""
    return one_line(row.data, 100) if row.data else ""


_SUMMARIES: dict[str, Callable[[EventRow], str]] = {
    EventType.RUN_CREATED: _run_created,
    EventType.RUN_QUEUED: _run_queued,
    EventType.HISTORY_SUMMARIZED: _history_summarized,
    EventType.RUN_STARTED: _run_started,
    EventType.TURN_STARTED: _turn,
    EventType.TURN_COMPLETED: _turn,
    EventType.MESSAGE_COMPLETED: _message,
    EventType.USAGE: _usage,
    EventType.MODEL_RETRY: _model_retry,
    EventType.TOOL_CALL_SCHEDULED: _tool_call,
    EventType.TOOL_CALL_STARTED: _tool_call_started,
    EventType.TOOL_CALL_SUCCEEDED: _tool_call,
    EventType.TOOL_CALL_FAILED: _tool_call_failed,
    EventType.TOOL_CALL_APPROVAL_REQUESTED: _tool_call,
    EventType.TOOL_CALL_DECIDED: _tool_call_decided,
    EventType.TOOL_CALL_CANCELED: _tool_call_canceled,
    EventType.RUN_AWAITING_INPUT: _awaiting_input,
    EventType.RUN_RESUMED: _resumed,
    EventType.MEMORY_STORED: _memory,
    EventType.MEMORY_DELETED: _memory,
    EventType.POLICY_DECISION: _policy,
    EventType.RUN_CHILD_LINKED: _child_linked,
    EventType.RUN_COMPLETED: _run_completed,
    EventType.RUN_FAILED: _run_error,
    EventType.RUN_TIMED_OUT: _run_error,
    EventType.RUN_CANCELED: _run_canceled,
    EventType.RUN_INTERRUPTED: _run_interrupted,
}
