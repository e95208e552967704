"""Reads behind the run and session timelines of the admin.

The event log is the record; the timeline shows it a page at a time and looks up only
what that page refers to. Every query here is bounded by the page size (100 events),
walks an index that exists (``(run, seq)``, ``(session, seq)``, primary keys) and
never counts a big table, so a run with a million tool calls renders as fast as one
with ten. Values are cut in SQL (``Substr`` of the JSON text) so that one huge tool
result cannot make a page slow either; the full value is one click away.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any
from urllib.parse import urlencode
from uuid import UUID

from django.contrib.auth import get_user_model
from django.db.models import Q, QuerySet, TextField
from django.db.models.fields.json import KT
from django.db.models.functions import Cast, Length, Substr
from django.urls import reverse
from django.utils import timezone

from goaai.runtime.vocabulary import EventType, RunStatus
from runs_app.models import Run, RunEvent, ToolCall, Turn
from sessions_app.models import Session

PAGE_SIZE = 100
# A value longer than this is cut in the HTML; the rest loads on demand.
DISPLAY_CAP = 2000
# Values up to this size are read whole from the database; bigger ones are read cut.
LOAD_CAP = 64 * 1024
CHILD_RUNS_LIMIT = 50
SESSION_RUNS_LIMIT = 200
WAITS_LIMIT = 50
# "1000+ events": an upper-bounded count, never a COUNT(*) of the whole log.
COUNT_CAP = 1000

VIEWS = ("all", "compact", "raw")

FAILURE_TYPES = frozenset(
    {
        EventType.TOOL_CALL_FAILED,
        EventType.RUN_FAILED,
        EventType.RUN_TIMED_OUT,
        EventType.RUN_CANCELED,
    }
)
SUCCESS_TYPES = frozenset({EventType.TOOL_CALL_SUCCEEDED, EventType.RUN_COMPLETED})
WAITING_TYPES = frozenset(
    {
        EventType.RUN_AWAITING_INPUT,
        EventType.RUN_RESUMED,
        EventType.TOOL_CALL_APPROVAL_REQUESTED,
    }
)
RUN_END_TYPES = frozenset(
    {
        EventType.RUN_COMPLETED,
        EventType.RUN_FAILED,
        EventType.RUN_CANCELED,
        EventType.RUN_TIMED_OUT,
    }
)
TOOL_CALL_END_TYPES = frozenset({EventType.TOOL_CALL_SUCCEEDED, EventType.TOOL_CALL_FAILED})
TURN_MEMBER_TYPES = frozenset(
    {EventType.TURN_COMPLETED, EventType.USAGE, EventType.MESSAGE_COMPLETED}
)

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
)


def event_type_choices() -> list[tuple[str, str]]:
    """The type filter's options: each family (``tool_call.*``) and each type."""
    families = sorted({t.value.split(".")[0] for t in EventType if "." in t.value})
    options = [(f"{family}.*", f"{family}.* (all)") for family in families]
    options += [(t.value, t.value) for t in EventType]
    return options


# Filters, in the URL


@dataclass(frozen=True)
class TimelineFilter:
    """What the URL asks for: filters, order, view and a keyset cursor."""

    types: tuple[str, ...] = ()
    failed_only: bool = False
    text: str = ""
    newest_first: bool = False
    view: str = "all"
    after: int | None = None
    before: int | None = None
    from_end: bool = False

    @classmethod
    def from_query(cls, query: Mapping[str, Any]) -> TimelineFilter:
        """Read the filter from ``request.GET``; anything malformed is ignored."""
        getlist = getattr(query, "getlist", None)
        raw_types: list[str] = list(getlist("type")) if getlist else [str(query.get("type", ""))]
        known = {value for value, _label in event_type_choices()}
        types = tuple(t for t in raw_types if t in known)
        view = str(query.get("view", "all"))
        return cls(
            types=types,
            failed_only=str(query.get("failed", "")) in ("1", "on", "true"),
            text=str(query.get("q", "")).replace("\x00", "").strip()[:200],
            newest_first=str(query.get("order", "")) == "desc",
            view=view if view in VIEWS else "all",
            after=_int_or_none(query.get("after")),
            before=_int_or_none(query.get("before")),
            from_end=str(query.get("end", "")) == "1",
        )

    @property
    def is_filtered(self) -> bool:
        return bool(self.types or self.failed_only or self.text)

    def query_string(self, **changes: Any) -> str:
        """This filter as a URL query, with ``changes`` applied (cursors reset unless
        given): what every link of the page carries so that state lives in the URL."""
        changes.setdefault("after", None)
        changes.setdefault("before", None)
        changes.setdefault("from_end", False)
        state = replace(self, **changes)
        params: list[tuple[str, str]] = [("type", t) for t in state.types]
        if state.failed_only:
            params.append(("failed", "1"))
        if state.text:
            params.append(("q", state.text))
        if state.newest_first:
            params.append(("order", "desc"))
        if state.view != "all":
            params.append(("view", state.view))
        if state.after is not None:
            params.append(("after", str(state.after)))
        if state.before is not None:
            params.append(("before", str(state.before)))
        if state.from_end:
            params.append(("end", "1"))
        return "?" + urlencode(params) if params else "?"


def _int_or_none(value: Any) -> int | None:
    try:
        number = int(str(value))
    except (TypeError, ValueError):
        return None
    return number if number >= 0 else None


def _expand_types(types: Iterable[str]) -> list[str]:
    exact: list[str] = []
    for value in types:
        if value.endswith(".*"):
            family = value[:-2]
            exact += [t.value for t in EventType if t.value.split(".")[0] == family]
        else:
            exact.append(value)
    return exact


def _filtered(events: QuerySet[RunEvent], filters: TimelineFilter) -> QuerySet[RunEvent]:
    if filters.types:
        events = events.filter(type__in=_expand_types(filters.types))
    if filters.failed_only:
        events = events.filter(
            Q(type__in=FAILURE_TYPES)
            | Q(type=EventType.TOOL_CALL_DECIDED, data__decision="denied")
            | Q(type=EventType.POLICY_DECISION, data__verdict="stop")
        )
    if filters.text:
        events = events.filter(Q(type__icontains=filters.text) | Q(data__icontains=filters.text))
    return events


# Values, cut for display


@dataclass(frozen=True)
class Value:
    """A value as the page shows it: pretty text cut at ``DISPLAY_CAP``, with the URL
    of the whole value when it was cut."""

    text: str
    truncated: bool = False
    size: int = 0
    full_url: str = ""

    @property
    def download_url(self) -> str:
        return f"{self.full_url}{'&' if '?' in self.full_url else '?'}download=1"


def pretty(value: Any) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=False, default=str)


def make_value(value: Any, *, full_url: str, known_size: int | None = None) -> Value:
    text = pretty(value)
    size = max(len(text), known_size or 0)
    if len(text) > DISPLAY_CAP:
        return Value(text=text[:DISPLAY_CAP], truncated=True, size=size, full_url=full_url)
    return Value(
        text=text,
        truncated=bool(known_size and known_size > LOAD_CAP),
        size=size,
        full_url=full_url,
    )


def _value_from_head(head: str | None, size: int | None, *, full_url: str) -> Value:
    """A JSON value read cut in SQL (``head`` is its first ``LOAD_CAP`` characters)."""
    if head is None:
        return Value(text="null", size=4, full_url=full_url)
    size = size or len(head)
    if size <= LOAD_CAP:
        try:
            return make_value(json.loads(head), full_url=full_url)
        except ValueError:
            pass
    return Value(text=head[:DISPLAY_CAP], truncated=True, size=size, full_url=full_url)


def _json_head(name: str) -> Substr:
    """The first ``LOAD_CAP`` characters of a JSON column's text."""
    return Substr(Cast(name, output_field=TextField()), 1, LOAD_CAP)


def _json_size(name: str) -> Length:
    return Length(Cast(name, output_field=TextField()))


def payload_url(kind: str, object_id: object, field_name: str = "") -> str:
    url = reverse("admin:runs_app_timeline_payload", args=[kind, str(object_id)])
    return f"{url}?field={field_name}" if field_name else url


# Formatting of times


def format_duration(seconds: float | None) -> str:
    """A duration an operator reads at a glance: 12 ms, 1.25 s, 3 min 4 s, 2 h 5 min."""
    if seconds is None:
        return ""
    sign = "\u2212" if seconds < 0 else ""  # a minus sign, not a hyphen
    seconds = abs(seconds)
    if seconds < 1:
        return f"{sign}{round(seconds * 1000)} ms"
    if seconds < 60:
        return f"{sign}{seconds:.2f} s"
    if seconds < 3600:
        return f"{sign}{int(seconds // 60)} min {int(seconds % 60)} s"
    return f"{sign}{int(seconds // 3600)} h {int(seconds % 3600 // 60)} min"


def format_elapsed(moment: dt.datetime, origin: dt.datetime | None) -> str:
    if origin is None:
        return ""
    delta = (moment - origin).total_seconds()
    if delta < 0:
        return format_duration(delta)
    return "+" + format_duration(delta)


def _seconds_between(start: dt.datetime | None, end: dt.datetime | None) -> float | None:
    if start is None or end is None:
        return None
    return (end - start).total_seconds()


# Turns and tool calls referenced by a page


@dataclass
class TurnInfo:
    id: UUID
    run_id: UUID
    index: int
    model: str
    input_tokens: int
    output_tokens: int
    latency_ms: int | None
    started_at: dt.datetime
    ended_at: dt.datetime | None
    response: Value
    messages_url: str
    response_tool_calls_url: str
    admin_url: str

    @property
    def duration(self) -> str:
        return format_duration(_seconds_between(self.started_at, self.ended_at))

    @property
    def latency(self) -> str:
        return "" if self.latency_ms is None else format_duration(self.latency_ms / 1000)


@dataclass
class ToolCallInfo:
    id: UUID
    run_id: UUID
    turn_id: UUID
    name: str
    status: str
    attempt: int
    requires_approval: bool
    error_kind: str
    error_message: str
    decision: str
    decision_reason: str
    decided_by: str
    decided_at: dt.datetime | None
    started_at: dt.datetime | None
    ended_at: dt.datetime | None
    duration_ms: int | None
    arguments: Value
    result: Value
    admin_url: str

    @property
    def duration(self) -> str:
        return "" if self.duration_ms is None else format_duration(self.duration_ms / 1000)


def turns_by_id(ids: Iterable[UUID]) -> dict[UUID, TurnInfo]:
    """The turns a page refers to, in one query by primary key. Their messages (which
    grow with the conversation) are not read: they load when a turn is expanded."""
    wanted = set(ids)
    if not wanted:
        return {}
    rows = (
        Turn.objects.filter(pk__in=wanted)
        .annotate(
            response_head=Substr("response_text", 1, DISPLAY_CAP + 1),
            response_size=Length("response_text"),
        )
        .values(
            "id",
            "run_id",
            "index",
            "model",
            "input_tokens",
            "output_tokens",
            "latency_ms",
            "started_at",
            "ended_at",
            "response_head",
            "response_size",
        )
    )
    turns: dict[UUID, TurnInfo] = {}
    for row in rows:
        head = row["response_head"] or ""
        full = payload_url("turn", row["id"], "response")
        turns[row["id"]] = TurnInfo(
            id=row["id"],
            run_id=row["run_id"],
            index=row["index"],
            model=row["model"],
            input_tokens=row["input_tokens"],
            output_tokens=row["output_tokens"],
            latency_ms=row["latency_ms"],
            started_at=row["started_at"],
            ended_at=row["ended_at"],
            response=Value(
                text=head[:DISPLAY_CAP],
                truncated=(row["response_size"] or 0) > DISPLAY_CAP,
                size=row["response_size"] or 0,
                full_url=full,
            ),
            messages_url=payload_url("turn", row["id"], "request_messages"),
            response_tool_calls_url=payload_url("turn", row["id"], "response"),
            admin_url=reverse("admin:runs_app_turn_change", args=[row["id"]]),
        )
    return turns


def tool_calls_by_id(ids: Iterable[UUID]) -> dict[UUID, ToolCallInfo]:
    """The tool calls a page refers to, in one query by primary key, with their
    arguments and result cut in SQL."""
    wanted = set(ids)
    if not wanted:
        return {}
    rows = (
        ToolCall.objects.filter(pk__in=wanted)
        .annotate(
            arguments_head=_json_head("arguments"),
            arguments_size=_json_size("arguments"),
            result_head=_json_head("result"),
            result_size=_json_size("result"),
        )
        .values(
            "id",
            "run_id",
            "turn_id",
            "name",
            "status",
            "attempt",
            "requires_approval",
            "error_kind",
            "error_message",
            "decision",
            "decision_reason",
            "decided_by__username",
            "decided_at",
            "started_at",
            "ended_at",
            "duration_ms",
            "arguments_head",
            "arguments_size",
            "result_head",
            "result_size",
        )
    )
    calls: dict[UUID, ToolCallInfo] = {}
    for row in rows:
        pk = row["id"]
        calls[pk] = ToolCallInfo(
            id=pk,
            run_id=row["run_id"],
            turn_id=row["turn_id"],
            name=row["name"],
            status=row["status"],
            attempt=row["attempt"],
            requires_approval=row["requires_approval"],
            error_kind=row["error_kind"],
            error_message=row["error_message"],
            decision=row["decision"],
            decision_reason=row["decision_reason"],
            decided_by=row["decided_by__username"] or "",
            decided_at=row["decided_at"],
            started_at=row["started_at"],
            ended_at=row["ended_at"],
            duration_ms=row["duration_ms"],
            arguments=_value_from_head(
                row["arguments_head"],
                row["arguments_size"],
                full_url=payload_url("tool_call", pk, "arguments"),
            ),
            result=_value_from_head(
                row["result_head"],
                row["result_size"],
                full_url=payload_url("tool_call", pk, "result"),
            ),
            admin_url=reverse("admin:runs_app_toolcall_change", args=[pk]),
        )
    return calls


def _user_id(value: Any) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def usernames_by_id(ids: Iterable[Any]) -> dict[int, str]:
    """Usernames of the users with these ids, in one query (none for no ids)."""
    wanted = {i for i in map(_user_id, ids) if i is not None}
    if not wanted:
        return {}
    users = get_user_model().objects.filter(pk__in=wanted).values_list("pk", "username")
    return {int(pk): str(username) for pk, username in users}


def _uuid_or_none(value: Any) -> UUID | None:
    if not value:
        return None
    try:
        return UUID(str(value))
    except ValueError:
        return None


# Events


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
        """The time of day to the millisecond (UTC)."""
        return self.created_at.astimezone(dt.UTC).strftime("%H:%M:%S.%f")[:-3]

    @property
    def is_policy(self) -> bool:
        return self.type == EventType.POLICY_DECISION

    @property
    def is_decision(self) -> bool:
        return self.type == EventType.TOOL_CALL_DECIDED

    @property
    def child_run_id(self) -> UUID | None:
        return _uuid_or_none(self.data.get("child_run"))

    @property
    def raw(self) -> Value:
        """The event as the API shows it, for the raw JSON view."""
        document = {
            "seq": self.seq,
            "type": self.type,
            "run": str(self.run_id) if self.run_id else None,
            "data": self.data if self.data_complete else "(too large: download it)",
            "created_at": self.created_at.isoformat(),
        }
        return make_value(document, full_url=self.data_value.full_url.split("?")[0])


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


def _outcome(event_type: str, data: Mapping[str, Any]) -> str:
    if event_type in FAILURE_TYPES - {EventType.RUN_CANCELED}:
        return "failed"
    if event_type == EventType.RUN_CANCELED:
        return "canceled"
    if event_type in SUCCESS_TYPES:
        return "succeeded"
    if event_type in WAITING_TYPES:
        return "waiting"
    if event_type == EventType.TOOL_CALL_DECIDED:
        return "failed" if data.get("decision") == "denied" else "succeeded"
    if event_type == EventType.POLICY_DECISION:
        return "failed" if data.get("verdict") == "stop" else "policy"
    return ""


def _text(value: Any, limit: int = 120) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _summary(row: EventRow) -> str:
    """The key attribute of an event: tool name, decision, error kind, rule…"""
    data, kind = row.data, row.type
    if not row.data_complete and not data:
        return "(large event: expand to load)"
    if kind == EventType.RUN_CREATED:
        return f"{data.get('agent', '')}: {_text(data.get('input', ''))}"
    if kind == EventType.RUN_STARTED:
        return str(data.get("agent", ""))
    if kind in (EventType.TURN_STARTED, EventType.TURN_COMPLETED):
        parts = [f"turn {data.get('index', '?')}"]
        if data.get("model"):
            parts.append(str(data["model"]))
        if kind == EventType.TURN_COMPLETED:
            parts.append(f"{data.get('tool_calls', 0)} tool call(s)")
            if data.get("latency_ms") is not None:
                parts.append(f"latency {format_duration(float(data['latency_ms']) / 1000)}")
        if data.get("restarted"):
            parts.append("restarted")
        return " · ".join(parts)
    if kind == EventType.MESSAGE_COMPLETED:
        return f"{data.get('role', '')}: {_text(data.get('text', ''))}"
    if kind == EventType.USAGE:
        return f"{data.get('input_tokens', 0)} in · {data.get('output_tokens', 0)} out tokens"
    if kind == EventType.TOOL_CALL_DECIDED:
        who = row.decided_by or "unknown user"
        text = f"{data.get('name', '')} · {data.get('decision', '')} by {who}"
        return text + (f" · {_text(data['reason'], 80)}" if data.get("reason") else "")
    if kind == EventType.TOOL_CALL_FAILED:
        error = data.get("error") or {}
        message = _text(error.get("message", ""), 80)
        return f"{data.get('name', '')} · {error.get('kind', '')}: {message}"
    if kind == EventType.TOOL_CALL_STARTED:
        return f"{data.get('name', '')} · attempt {data.get('attempt', 1)}"
    if kind.startswith("tool_call."):
        extra = (
            f" · {format_duration(float(data['duration_ms']) / 1000)}"
            if data.get("duration_ms") is not None
            else ""
        )
        return f"{data.get('name', '')}{extra}"
    if kind == EventType.RUN_AWAITING_INPUT:
        what = str(data.get("kind", ""))
        if data.get("question"):
            return f"{what}: {_text(data['question'], 80)}"
        return what
    if kind == EventType.RUN_RESUMED:
        if "waited_seconds" in data:
            waited = format_duration(float(data["waited_seconds"]))
            return f"after waiting {waited} · {data.get('answered', '')}"
        return f"{data.get('reason', '')} · worker {data.get('worker', '')}"
    if kind in (EventType.MEMORY_STORED, EventType.MEMORY_DELETED):
        action = f" · {data['action']}" if data.get("action") else ""
        return f"{data.get('key', '')} ({data.get('scope', '')}){action}"
    if kind == EventType.POLICY_DECISION:
        reason = _text(data.get("reason", ""), 80)
        return f"{data.get('rule', '')} · {data.get('verdict', '')} · {reason}"
    if kind == EventType.RUN_CHILD_LINKED:
        return f"child run {data.get('child_run', '')}"
    if kind == EventType.RUN_COMPLETED:
        return _text(data.get("output", ""))
    if kind in (EventType.RUN_FAILED, EventType.RUN_TIMED_OUT):
        error = data.get("error") or {}
        return f"{error.get('kind', '')}: {_text(error.get('message', ''), 100)}"
    if kind == EventType.RUN_CANCELED:
        return _text(data.get("reason", "") or "canceled")
    return _text(data, 100) if data else ""


def _fetch_events(
    events: QuerySet[RunEvent], filters: TimelineFilter
) -> tuple[list[dict[str, Any]], bool, bool]:
    """A page of events in display order, plus whether more exist after and before it
    (in seq order). Keyset paging: the cursor is a seq, the query one index range."""
    events = _filtered(events, filters)
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
        .annotate(data_head=_json_head("data"), data_size=_json_size("data"))
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

    rows: list[EventRow] = []
    for r in raw:
        full_url = payload_url("event", r["id"])
        complete = True
        data: dict[str, Any]
        if (r["data_size"] or 0) > LOAD_CAP:
            data, complete = big.get(r["id"], {}), False
            value = Value(
                text=(r["data_head"] or "")[:DISPLAY_CAP],
                truncated=True,
                size=r["data_size"],
                full_url=full_url + "?field=data",
            )
        else:
            loaded = json.loads(r["data_head"]) if r["data_head"] else {}
            data = loaded if isinstance(loaded, dict) else {"value": loaded}
            value = make_value(data, full_url=full_url + "?field=data")
        rows.append(
            EventRow(
                id=r["id"],
                seq=r["seq"],
                type=r["type"],
                run_id=r["run_id"],
                created_at=r["created_at"],
                data=data,
                data_value=value,
                data_complete=complete,
            )
        )

    turns = turns_by_id(filter(None, (_uuid_or_none(row.data.get("turn")) for row in rows)))
    calls = tool_calls_by_id(
        filter(None, (_uuid_or_none(row.data.get("tool_call")) for row in rows))
    )
    # The header's wait list has usually named everyone who decided already.
    users = dict(known_users or {})
    users.update(
        usernames_by_id(
            row.data.get("decided_by")
            for row in rows
            if row.data.get("decided_by") and _user_id(row.data["decided_by"]) not in users
        )
    )
    labels = run_labels or {}
    for row in rows:
        turn_id = _uuid_or_none(row.data.get("turn"))
        call_id = _uuid_or_none(row.data.get("tool_call"))
        row.turn = turns.get(turn_id) if turn_id else None
        row.tool_call = calls.get(call_id) if call_id else None
        decided_by = row.data.get("decided_by")
        if decided_by is not None:
            row.decided_by = users.get(_user_id(decided_by) or 0, f"user {decided_by}")
        row.outcome = _outcome(row.type, row.data)
        row.summary = _summary(row)
        row.elapsed = format_elapsed(row.created_at, origin)
        row.permalink = f"{base_url}?after={row.seq - 1}#seq-{row.seq}"
        if row.run_id is not None and session is not None:
            row.run_label = labels.get(row.run_id, str(row.run_id)[:8])
            row.run_url = reverse("admin:runs_app_run_timeline", args=[row.run_id])

    first_seq = min((r.seq for r in rows), default=None)
    last_seq = max((r.seq for r in rows), default=None)
    later = filters.query_string(after=last_seq) if more_after and last_seq is not None else None
    earlier = (
        filters.query_string(before=first_seq) if more_before and first_seq is not None else None
    )
    next_query, previous_query = (earlier, later) if filters.newest_first else (later, earlier)
    page = EventPage(
        rows=rows,
        newest_first=filters.newest_first,
        next_query=next_query,
        previous_query=previous_query,
        first_query=filters.query_string(),
        last_query=filters.query_string(from_end=True),
    )
    if filters.view == "compact":
        page.rows, page.folded_count = fold(rows)
    return page


# The compact view


def _group(row: EventRow) -> tuple[str, str] | None:
    """Which started/finished pair an event belongs to, if any."""
    kind, data = row.type, row.data
    if kind == EventType.TURN_STARTED or kind in TURN_MEMBER_TYPES:
        return ("turn", str(data.get("turn", ""))) if data.get("turn") else None
    if (
        kind in (EventType.TOOL_CALL_SCHEDULED, EventType.TOOL_CALL_STARTED)
        or kind in TOOL_CALL_END_TYPES
    ):
        return ("tool_call", str(data.get("tool_call", ""))) if data.get("tool_call") else None
    if kind == EventType.RUN_STARTED or kind in RUN_END_TYPES:
        return ("run", str(row.run_id))
    if kind == EventType.RUN_AWAITING_INPUT or (
        kind == EventType.RUN_RESUMED and "waited_seconds" in data
    ):
        return ("wait", str(row.run_id))
    return None


_GROUP_HEADS = {
    "turn": {EventType.TURN_STARTED},
    "tool_call": {EventType.TOOL_CALL_SCHEDULED, EventType.TOOL_CALL_STARTED},
    "run": {EventType.RUN_STARTED},
    "wait": {EventType.RUN_AWAITING_INPUT},
}
_GROUP_ENDS = {
    "turn": {EventType.TURN_COMPLETED},
    "tool_call": TOOL_CALL_END_TYPES,
    "run": RUN_END_TYPES,
    "wait": {EventType.RUN_RESUMED},
}


def fold(rows: list[EventRow]) -> tuple[list[EventRow], int]:
    """Fold each started/finished pair on the page into its first row, with how long
    it took: the rows that remain, and how many were folded away. Only pairs whose
    start is on the page fold; the others stay as they are."""
    in_seq_order = sorted(rows, key=lambda r: r.seq)
    heads: dict[tuple[str, str], EventRow] = {}
    folded_ids: set[int] = set()
    for row in in_seq_order:
        group = _group(row)
        if group is None:
            continue
        head = heads.get(group)
        if head is None:
            if row.type in _GROUP_HEADS[group[0]]:
                heads[group] = row
            continue
        head.folded.append(row)
        folded_ids.add(row.id)
        if row.type in _GROUP_ENDS[group[0]]:
            head.end_type = row.type
            head.outcome = row.outcome or head.outcome
            # A turn's usage and message follow its completion: keep folding them.
            if group[0] != "turn":
                del heads[group]
    for row in in_seq_order:
        if not row.folded:
            continue
        ends = [f for f in row.folded if f.type == row.end_type]
        last = ends[-1] if ends else row.folded[-1]
        seconds = (last.created_at - row.created_at).total_seconds()
        kind = _group(row)
        if (
            kind is not None
            and kind[0] == "tool_call"
            and row.tool_call
            and row.tool_call.duration_ms is not None
        ):
            # The call's own duration: time spent waiting for an approval is not work.
            row.duration = row.tool_call.duration
        elif kind is not None and kind[0] == "wait" and "waited_seconds" in last.data:
            row.duration = format_duration(float(last.data["waited_seconds"]))
        else:
            row.duration = format_duration(seconds)
        if kind is not None and kind[0] == "turn":
            usage = next((f for f in row.folded if f.type == EventType.USAGE), None)
            message = next((f for f in row.folded if f.type == EventType.MESSAGE_COMPLETED), None)
            extra = []
            if usage is not None:
                extra.append(usage.summary)
            if message is not None:
                extra.append(message.summary)
            row.summary = " · ".join([row.summary, *extra])
        elif last.type in TOOL_CALL_END_TYPES:
            # "name · duration" or "name · error kind: message" says it all.
            row.summary = last.summary or row.summary
        elif last.type in RUN_END_TYPES:
            row.summary = f"{row.summary} → {last.summary}" if last.summary else row.summary
    remaining = [row for row in rows if row.id not in folded_ids]
    return remaining, len(folded_ids)


# Headers: the run, its children, the waits


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

    @property
    def open(self) -> bool:
        return self.resumed_seq is None

    @property
    def waited(self) -> str:
        if self.waited_seconds is not None:
            return format_duration(self.waited_seconds)
        return format_duration((timezone.now() - self.since).total_seconds()) + " so far"


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
    types = [EventType.RUN_AWAITING_INPUT, EventType.TOOL_CALL_DECIDED, EventType.RUN_RESUMED]
    if run is not None:
        events = RunEvent.objects.filter(run_id=run.id, type__in=types)
    elif session is not None:
        events = RunEvent.objects.filter(session_id=session.id, type__in=types)
    else:
        raise ValueError("waits needs a run or a session")
    limit = WAITS_LIMIT * 3
    rows = list(
        events.order_by("seq").values("seq", "type", "run_id", "data", "created_at")[: limit + 1]
    )
    cut = len(rows) > limit
    rows = rows[:limit]
    users = usernames_by_id(
        r["data"].get("decided_by") for r in rows if r["data"].get("decided_by")
    )
    open_by_run: dict[UUID | None, WaitPeriod] = {}
    periods: list[WaitPeriod] = []
    for r in rows:
        data: dict[str, Any] = r["data"] if isinstance(r["data"], dict) else {}
        current = open_by_run.get(r["run_id"])
        if r["type"] == EventType.RUN_AWAITING_INPUT:
            period = WaitPeriod(
                run_id=r["run_id"],
                seq=r["seq"],
                kind=str(data.get("kind", "")),
                since=r["created_at"],
                question=str(data.get("question", "") or ""),
                tool_call_id=_uuid_or_none(data.get("tool_call")),
                child_run=_uuid_or_none(data.get("child_run")),
            )
            periods.append(period)
            open_by_run[r["run_id"]] = period
        elif r["type"] == EventType.TOOL_CALL_DECIDED and current is not None:
            decided_by = data.get("decided_by")
            current.tool_name = str(data.get("name", ""))
            current.decision = str(data.get("decision", ""))
            current.reason = str(data.get("reason", "") or "")
            current.answered_at = r["created_at"]
            if decided_by is not None:
                current.answered_by = users.get(_user_id(decided_by) or 0, f"user {decided_by}")
        elif (
            r["type"] == EventType.RUN_RESUMED and current is not None and "waited_seconds" in data
        ):
            current.resumed_seq = r["seq"]
            current.waited_seconds = float(data["waited_seconds"])
            if current.answered_at is None:
                current.answered_at = r["created_at"]
            if data.get("answered") == "delegated" and data.get("child_run"):
                current.child_run = _uuid_or_none(data.get("child_run"))
                current.answered_by = current.answered_by or "child run"
            del open_by_run[r["run_id"]]
    return periods, cut, users


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
        return format_duration(_seconds_between(self.run.created_at, self.run.started_at))

    @property
    def duration(self) -> str:
        end = self.run.ended_at or (None if self.run.is_terminal else timezone.now())
        return format_duration(_seconds_between(self.run.started_at, end))

    @property
    def waited(self) -> str:
        seconds = self.run.paused_seconds
        if self.run.awaiting_since is not None:
            seconds += (timezone.now() - self.run.awaiting_since).total_seconds()
        return format_duration(seconds) if seconds else ""

    @property
    def working(self) -> str:
        end = self.run.ended_at or (None if self.run.is_terminal else timezone.now())
        total = _seconds_between(self.run.started_at, end)
        if total is None:
            return ""
        waited = self.run.paused_seconds
        if self.run.awaiting_since is not None:
            waited += (timezone.now() - self.run.awaiting_since).total_seconds()
        return format_duration(max(total - waited, 0.0))

    @property
    def failed(self) -> bool:
        return self.run.status in (RunStatus.FAILED, RunStatus.TIMED_OUT) or bool(
            self.run.error_kind
        )

    @property
    def canceled(self) -> bool:
        return self.run.status == RunStatus.CANCELED

    @property
    def can_cancel(self) -> bool:
        return not self.run.is_terminal


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
        may_have_waited=run.paused_seconds > 0
        or run.awaiting_since is not None
        or run.status == RunStatus.AWAITING_INPUT,
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


def session_for_timeline(session_id: UUID) -> Session | None:
    return Session.objects.select_related("owner").filter(pk=session_id).first()


def session_header(session: Session) -> SessionHeader:
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
            "paused_seconds",
            "awaiting_since",
        )[: SESSION_RUNS_LIMIT + 1]
    )
    runs = [
        SessionRun(
            id=r["id"],
            agent=r["agent"],
            status=r["status"],
            input=_text(r["input"], 100),
            parent_run_id=r["parent_run_id"],
            created_at=r["created_at"],
            ended_at=r["ended_at"],
            total_tokens=r["total_tokens"],
            url=reverse("admin:runs_app_run_timeline", args=[r["id"]]),
        )
        for r in rows[:SESSION_RUNS_LIMIT]
    ]
    runs_cut = len(rows) > SESSION_RUNS_LIMIT
    may_have_waited = runs_cut or any(
        r["paused_seconds"] > 0
        or r["awaiting_since"] is not None
        or r["status"] == RunStatus.AWAITING_INPUT
        for r in rows
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
