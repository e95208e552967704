"""Time a run spent waiting for a person (or a child run) rather than working: each
wait with what it asked, who answered, and how long it took; or, for a wait its run's
end cut short (canceled, failed, timed out), when and why it ended."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any
from uuid import UUID

from django.utils import timezone

from goaai.runtime.vocabulary import RUN_END_EVENT_TYPES, RUN_END_EVENTS, EventType
from runs_app.models import Run
from runs_app.timeline.endings import end_words, wait_ended
from runs_app.timeline.references import decider_name, usernames_by_id, uuid_or_none
from runs_app.timeline.values import format_duration
from sessions_app.models import RunEvent, Session

WAITS_LIMIT = 50


@dataclass
class WaitPeriod:
    """Time a run spent waiting for a person (or a child run), not working."""

    run_id: UUID | None
    seq: int
    kind: str
    since: dt.datetime
    question: str = ""
    tool_call_id: UUID | None = None
    tool_name: str = ""
    answered_by: str = ""
    decision: str = ""
    reason: str = ""
    answered_at: dt.datetime | None = None
    resumed_seq: int | None = None
    waited_seconds: float | None = None
    child_run: UUID | None = None
    # Set when the run ended while it waited: its status, when, and how the wait
    # ended in words ("Canceled after 8 min 2 s: Stopped by an operator (maria)").
    ended_status: str = ""
    ended_at: dt.datetime | None = None
    ending: str = ""

    @property
    def open(self) -> bool:
        return self.resumed_seq is None and not self.ended_status

    @property
    def waited(self) -> str:
        if self.waited_seconds is not None:
            return format_duration(self.waited_seconds)
        if self.ended_at is not None:
            return format_duration((self.ended_at - self.since).total_seconds())
        return format_duration((timezone.now() - self.since).total_seconds()) + " so far"


class _Waits:
    """Reads the events of waiting in seq order: each wait opens, may be answered,
    and closes when its run resumes. A session's runs wait each on its own."""

    def __init__(self, users: dict[int, str]) -> None:
        self.users = users
        self.periods: list[WaitPeriod] = []
        self._open_by_run: dict[UUID | None, WaitPeriod] = {}

    def opened(self, event: Mapping[str, Any], data: dict[str, Any]) -> None:
        period = WaitPeriod(
            run_id=event["run_id"],
            seq=event["seq"],
            kind=str(data.get("kind", "")),
            since=event["created_at"],
            question=str(data.get("question", "") or ""),
            tool_call_id=uuid_or_none(data.get("tool_call")),
            child_run=uuid_or_none(data.get("child_run")),
        )
        self.periods.append(period)
        self._open_by_run[event["run_id"]] = period

    def decided(self, event: Mapping[str, Any], data: dict[str, Any]) -> None:
        current = self._open_by_run.get(event["run_id"])
        if current is None:
            return
        current.tool_name = str(data.get("name", ""))
        current.decision = str(data.get("decision", ""))
        current.reason = str(data.get("reason", "") or "")
        current.answered_at = event["created_at"]
        if data.get("decided_by") is not None:
            current.answered_by = decider_name(self.users, data["decided_by"])

    def resumed(self, event: Mapping[str, Any], data: dict[str, Any]) -> None:
        current = self._open_by_run.get(event["run_id"])
        # Without a wait behind it, a resume is another worker picking the run up.
        if current is None or "waited_seconds" not in data:
            return
        current.resumed_seq = event["seq"]
        current.waited_seconds = float(data["waited_seconds"])
        if current.answered_at is None:
            current.answered_at = event["created_at"]
        if data.get("answered") == "delegated" and data.get("child_run"):
            current.child_run = uuid_or_none(data.get("child_run"))
            current.answered_by = current.answered_by or "child run"
        del self._open_by_run[event["run_id"]]

    def ended(self, event: Mapping[str, Any], data: dict[str, Any]) -> None:
        """The run ended while it waited: nobody answered, and the wait is over."""
        current = self._open_by_run.pop(event["run_id"], None)
        if current is None:
            return
        status = _END_STATUSES[event["type"]]
        current.ended_status, current.ended_at = status, event["created_at"]
        seconds = (event["created_at"] - current.since).total_seconds()
        current.ending = wait_ended(status, seconds, end_words(status, data))


_END_STATUSES = {event: status.value for status, event in RUN_END_EVENTS.items()}

# The events a wait is made of, and what each does to it.
_STEPS: dict[str, Callable[[_Waits, Mapping[str, Any], dict[str, Any]], None]] = {
    EventType.RUN_AWAITING_INPUT: _Waits.opened,
    EventType.TOOL_CALL_DECIDED: _Waits.decided,
    EventType.RUN_RESUMED: _Waits.resumed,
    **dict.fromkeys(RUN_END_EVENT_TYPES, _Waits.ended),
}


def waits(
    *, run: Run | None = None, session: Session | None = None, may_have_waited: bool
) -> tuple[list[WaitPeriod], bool, dict[int, str]]:
    """Every period the run (or the session's runs) waited for input, with who answered
    and how long it took; whether the list was cut at ``WAITS_LIMIT``; and the names
    of the users who answered (the event page reuses them).

    ``may_have_waited`` comes from the run rows (paused time, awaiting now): a run
    that never waited costs no query.
    """
    if not may_have_waited:
        return [], False, {}
    events, cut = _wait_events(run=run, session=session)
    users = usernames_by_id(data["decided_by"] for _, data in events if data.get("decided_by"))
    reader = _Waits(users)
    for event, data in events:
        _STEPS[event["type"]](reader, event, data)
    return reader.periods, cut, users


def _wait_events(
    *, run: Run | None, session: Session | None
) -> tuple[list[tuple[Mapping[str, Any], dict[str, Any]]], bool]:
    """The first events of waiting (each with its data), up to three per wait and
    the runs' ends, and whether there were more."""
    if run is not None:
        events = RunEvent.objects.filter(run_id=run.id, type__in=list(_STEPS))
    elif session is not None:
        events = RunEvent.objects.filter(session_id=session.id, type__in=list(_STEPS))
    else:
        raise ValueError("waits needs a run or a session")
    limit = WAITS_LIMIT * 4
    rows = list(
        events.order_by("seq").values("seq", "type", "run_id", "data", "created_at")[: limit + 1]
    )
    cut = len(rows) > limit
    return [(r, r["data"] if isinstance(r["data"], dict) else {}) for r in rows[:limit]], cut
