"""What the timeline's URL asks for (type, failed only, text, order, view, cursor),
and the filtering of the event log that follows from it."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any
from urllib.parse import urlencode

from django.db.models import Q, QuerySet

from goaai.runtime.vocabulary import FAILURE_EVENT_TYPES, EventType
from sessions_app.models import RunEvent

VIEWS = ("all", "compact", "raw")


def event_type_choices() -> list[tuple[str, str]]:
    """The type filter's options: each family (``tool_call.*``) and each type."""
    families = sorted({t.value.split(".")[0] for t in EventType if "." in t.value})
    options = [(f"{family}.*", f"{family}.* (all)") for family in families]
    options += [(t.value, t.value) for t in EventType]
    return options


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


def filtered_events(events: QuerySet[RunEvent], filters: TimelineFilter) -> QuerySet[RunEvent]:
    """``events`` narrowed to what the filter asks for (order and cursor aside)."""
    if filters.types:
        events = events.filter(type__in=_expand_types(filters.types))
    if filters.failed_only:
        # Besides failures: a denied approval and a policy that stopped the run.
        events = events.filter(
            Q(type__in=FAILURE_EVENT_TYPES)
            | Q(type=EventType.TOOL_CALL_DECIDED, data__decision="denied")
            | Q(type=EventType.POLICY_DECISION, data__verdict="stop")
        )
    if filters.text:
        events = events.filter(Q(type__icontains=filters.text) | Q(data__icontains=filters.text))
    return events
