"""A page of a run's or a session's events, with what each refers to.

Keyset paging on ``seq``: every query walks an index that exists (``(run, seq)``,
``(session, seq)``, primary keys) and is bounded by the page size, and a value too
big to read whole is read cut in SQL, its key attributes extracted there.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from uuid import UUID

from django.db.models import QuerySet
from django.db.models.fields.json import KT
from django.urls import reverse

from runs_app.models import Run
from runs_app.timeline.filters import TimelineFilter, filtered_events
from runs_app.timeline.fold import fold
from runs_app.timeline.references import (
    decider_name,
    tool_calls_by_id,
    turns_by_id,
    user_id,
    usernames_by_id,
    uuid_or_none,
)
from runs_app.timeline.rows import EventRow, outcome, summary
from runs_app.timeline.values import (
    DISPLAY_CAP,
    LOAD_CAP,
    Value,
    format_elapsed,
    json_head,
    json_size,
    make_value,
    payload_url,
)
from sessions_app.models import RunEvent, Session

PAGE_SIZE = 100

# The keys of an event's data the timeline reads; for an event too big to read whole,
# these are extracted in SQL.
_EVENT_KEYS = (
    "tool_call",
    "turn",
    "name",
    "index",
    "model",
    "attempt",
    "duration_ms",
    "decision",
    "decided_by",
    "rule",
    "verdict",
    "kind",
    "question",
    "waited_seconds",
    "answered",
    "child_run",
    "key",
    "scope",
    "agent",
    "latency_ms",
    "finish_reason",
    "error_kind",
    "delay_seconds",
    "message",
    "input_tokens",
    "output_tokens",
    "cached_input_tokens",
    "cache_write_tokens",
    "reasoning_tokens",
    "cost",
)


@dataclass
class EventPage:
    rows: list[EventRow]
    newest_first: bool
    next_query: str | None
    previous_query: str | None
    first_query: str
    last_query: str
    # Rows left out of this page by the compact view's folding.
    folded_count: int = 0

    @property
    def first_seq(self) -> int | None:
        return min((r.seq for r in self.rows), default=None)

    @property
    def last_seq(self) -> int | None:
        return max((r.seq for r in self.rows), default=None)


def event_page(
    *,
    filters: TimelineFilter,
    run: Run | None = None,
    session: Session | None = None,
    origin: dt.datetime | None = None,
    base_url: str = "",
    run_labels: Mapping[UUID, str] | None = None,
    known_users: Mapping[int, str] | None = None,
) -> EventPage:
    """One page (``PAGE_SIZE``) of a run's events, or a session's, with the turns and
    tool calls they refer to: at most six queries, whatever the size of the log."""
    if run is not None:
        events = RunEvent.objects.filter(run_id=run.id)
    elif session is not None:
        events = RunEvent.objects.filter(session_id=session.id)
    else:
        raise ValueError("event_page needs a run or a session")
    raw, more_after, more_before = _fetch_events(events, filters)
    big = _big_event_keys([r["id"] for r in raw if (r["data_size"] or 0) > LOAD_CAP])
    rows = [_event_row(r, big) for r in raw]
    _attach_references(rows, known_users or {})
    for row in rows:
        row.outcome = outcome(row.type, row.data)
        row.summary = summary(row)
        row.elapsed = format_elapsed(row.created_at, origin)
        row.permalink = f"{base_url}?after={row.seq - 1}#seq-{row.seq}"
    if session is not None:
        _label_runs(rows, run_labels or {})
    page = _page(rows, filters, more_after=more_after, more_before=more_before)
    if filters.view == "compact":
        page.rows, page.folded_count = fold(rows)
    return page


def _fetch_events(
    events: QuerySet[RunEvent], filters: TimelineFilter
) -> tuple[list[dict[str, Any]], bool, bool]:
    """A page of events in display order, plus whether more exist after and before it
    (in seq order). Keyset paging: the cursor is a seq, the query one index range."""
    events = filtered_events(events, filters)
    display_ascending = not filters.newest_first
    if filters.after is not None:
        events, ascending = events.filter(seq__gt=filters.after), True
    elif filters.before is not None:
        events, ascending = events.filter(seq__lt=filters.before), False
    elif filters.from_end:
        ascending = not display_ascending
    else:
        ascending = display_ascending
    rows = list(
        events.order_by("seq" if ascending else "-seq")
        .annotate(data_head=json_head("data"), data_size=json_size("data"))
        .values("id", "seq", "type", "run_id", "created_at", "data_head", "data_size")[
            : PAGE_SIZE + 1
        ]
    )
    more = len(rows) > PAGE_SIZE
    rows = rows[:PAGE_SIZE]
    # Past the cursor's side there is at least the row the cursor came from; a
    # second query to make sure would cost more than an occasional empty page.
    if ascending:
        more_after = more
        more_before = filters.after is not None and filters.after > 0
    else:
        more_before = more
        more_after = filters.before is not None
    if ascending != display_ascending:
        rows.reverse()
    return rows, more_after, more_before


def _big_event_keys(ids: list[int]) -> dict[int, dict[str, Any]]:
    """The keys the timeline reads from events too big to read whole, in SQL."""
    if not ids:
        return {}
    annotations: dict[str, Any] = {f"k_{key}": KT(f"data__{key}") for key in _EVENT_KEYS}
    annotations["k_error_kind"] = KT("data__error__kind")
    found: dict[int, dict[str, Any]] = {}
    for row in (
        RunEvent.objects.filter(pk__in=ids).annotate(**annotations).values("id", *annotations)
    ):
        data: dict[str, Any] = {}
        for key in _EVENT_KEYS:
            if row[f"k_{key}"] is not None:
                data[key] = row[f"k_{key}"]
        if row["k_error_kind"] is not None:
            data["error"] = {"kind": row["k_error_kind"], "message": "(too large: download it)"}
        found[row["id"]] = data
    return found


def _event_row(r: dict[str, Any], big: Mapping[int, dict[str, Any]]) -> EventRow:
    """An event as read by ``_fetch_events``; ``big`` has the keys of those too big to
    read whole."""
    full_url = payload_url("event", r["id"]) + "?field=data"
    data: dict[str, Any]
    if (r["data_size"] or 0) > LOAD_CAP:
        data, complete = big.get(r["id"], {}), False
        value = Value(
            text=(r["data_head"] or "")[:DISPLAY_CAP],
            truncated=True,
            size=r["data_size"],
            full_url=full_url,
        )
    else:
        loaded = json.loads(r["data_head"]) if r["data_head"] else {}
        data, complete = (loaded if isinstance(loaded, dict) else {"value": loaded}), True
        value = make_value(data, full_url=full_url)
    return EventRow(
        id=r["id"],
        seq=r["seq"],
        type=r["type"],
        run_id=r["run_id"],
        created_at=r["created_at"],
        data=data,
        data_value=value,
        data_complete=complete,
    )


def _attach_references(rows: list[EventRow], known_users: Mapping[int, str]) -> None:
    """Give each row the turn and tool call it names, and who decided (if it says)."""
    turns = turns_by_id(filter(None, (uuid_or_none(row.data.get("turn")) for row in rows)))
    calls = tool_calls_by_id(
        filter(None, (uuid_or_none(row.data.get("tool_call")) for row in rows))
    )
    # The header's wait list has usually named everyone who decided already.
    users = dict(known_users)
    users.update(
        usernames_by_id(
            row.data.get("decided_by")
            for row in rows
            if row.data.get("decided_by") and user_id(row.data["decided_by"]) not in users
        )
    )
    for row in rows:
        turn_id = uuid_or_none(row.data.get("turn"))
        call_id = uuid_or_none(row.data.get("tool_call"))
        row.turn = turns.get(turn_id) if turn_id else None
        row.tool_call = calls.get(call_id) if call_id else None
        if row.data.get("decided_by") is not None:
            row.decided_by = decider_name(users, row.data["decided_by"])


def _label_runs(rows: list[EventRow], run_labels: Mapping[UUID, str]) -> None:
    """On a session's page: which run each event is of, linked to its timeline."""
    for row in rows:
        if row.run_id is not None:
            row.run_label = run_labels.get(row.run_id, str(row.run_id)[:8])
            row.run_url = reverse("admin:runs_app_run_timeline", args=[row.run_id])


def _page(
    rows: list[EventRow], filters: TimelineFilter, *, more_after: bool, more_before: bool
) -> EventPage:
    """The page with its links: next and previous follow the display order."""
    first_seq = min((r.seq for r in rows), default=None)
    last_seq = max((r.seq for r in rows), default=None)
    later = filters.query_string(after=last_seq) if more_after and last_seq is not None else None
    earlier = (
        filters.query_string(before=first_seq) if more_before and first_seq is not None else None
    )
    next_query, previous_query = (earlier, later) if filters.newest_first else (later, earlier)
    return EventPage(
        rows=rows,
        newest_first=filters.newest_first,
        next_query=next_query,
        previous_query=previous_query,
        first_query=filters.query_string(),
        last_query=filters.query_string(from_end=True),
    )
