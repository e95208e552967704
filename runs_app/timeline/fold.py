"""The compact view: each started/finished pair on a page folded into its first row,
with how long the pair took."""

from __future__ import annotations

from goaai.runtime.vocabulary import (
    RUN_END_EVENT_TYPES,
    TOOL_CALL_END_EVENT_TYPES,
    EventType,
)
from runs_app.timeline.references import uuid_or_none
from runs_app.timeline.rows import FINISH_REASONS, EventRow
from runs_app.timeline.values import format_duration

# An event's part in its pair: a head opens the pair (when it is not open yet), an
# end closes it, a member is folded in between.
HEAD, END, MEMBER = "head", "end", "member"

TURN, TOOL_CALL, RUN, WAIT = "turn", "tool_call", "run", "wait"

_PARTS: dict[str, tuple[str, str]] = {
    EventType.TURN_STARTED: (TURN, HEAD),
    EventType.TURN_COMPLETED: (TURN, END),
    EventType.USAGE: (TURN, MEMBER),
    EventType.MESSAGE_COMPLETED: (TURN, MEMBER),
    EventType.TOOL_CALL_SCHEDULED: (TOOL_CALL, HEAD),
    EventType.TOOL_CALL_STARTED: (TOOL_CALL, HEAD),
    **dict.fromkeys(TOOL_CALL_END_EVENT_TYPES, (TOOL_CALL, END)),
    EventType.RUN_STARTED: (RUN, HEAD),
    **dict.fromkeys(RUN_END_EVENT_TYPES, (RUN, END)),
    EventType.RUN_AWAITING_INPUT: (WAIT, HEAD),
    EventType.RUN_RESUMED: (WAIT, END),
}


def _pair_of(row: EventRow) -> tuple[str, str] | None:
    """Which started/finished pair an event belongs to (kind and key), if any."""
    part = _PARTS.get(row.type)
    if part is None:
        return None
    kind = part[0]
    if kind in (TURN, TOOL_CALL):
        # A turn's events name it in their data as "turn", a tool call's as "tool_call";
        # as an id, since not every writer spells it the same way (with dashes or not).
        named = uuid_or_none(row.data.get(kind))
        return (kind, str(named)) if named else None
    if row.type == EventType.RUN_RESUMED and "waited_seconds" not in row.data:
        # Picked up by another worker after the first was lost: no wait ends here.
        return None
    return (kind, str(row.run_id))


def fold(rows: list[EventRow]) -> tuple[list[EventRow], int]:
    """Fold each started/finished pair on the page into its first row, with how long
    it took: the rows that remain, and how many were folded away. Only pairs whose
    start is on the page fold; the others stay as they are."""
    in_seq_order = sorted(rows, key=lambda r: r.seq)
    folded_ids = _fold_into_heads(in_seq_order)
    for row in in_seq_order:
        if row.folded:
            _describe_pair(row)
    remaining = [row for row in rows if row.id not in folded_ids]
    return remaining, len(folded_ids)


def _fold_into_heads(in_seq_order: list[EventRow]) -> set[int]:
    """Append each event to the head of its open pair; the ids of those folded."""
    heads: dict[tuple[str, str], EventRow] = {}
    folded_ids: set[int] = set()
    for row in in_seq_order:
        pair = _pair_of(row)
        if pair is None:
            continue
        head = heads.get(pair)
        role = _PARTS[row.type][1]
        if head is None:
            if role == HEAD:
                heads[pair] = row
            continue
        head.folded.append(row)
        folded_ids.add(row.id)
        if role == END:
            head.end_type = row.type
            head.outcome = row.outcome or head.outcome
            # A turn's usage and message follow its completion: keep folding them.
            if pair[0] != TURN:
                del heads[pair]
    return folded_ids


def _describe_pair(head: EventRow) -> None:
    """How long the pair folded into ``head`` took, and its summary."""
    ends = [f for f in head.folded if f.type == head.end_type]
    last = ends[-1] if ends else head.folded[-1]
    kind = _PARTS[head.type][0]
    head.duration = _duration(kind, head, last)
    head.summary = _summary(kind, head, last)


def _duration(kind: str, head: EventRow, last: EventRow) -> str:
    if kind == TOOL_CALL and head.tool_call and head.tool_call.duration:
        # The call's own duration: time spent waiting for an approval is not work.
        return head.tool_call.duration
    if kind == WAIT and "waited_seconds" in last.data:
        return format_duration(float(last.data["waited_seconds"]))
    return format_duration((last.created_at - head.created_at).total_seconds())


def _summary(kind: str, head: EventRow, last: EventRow) -> str:
    if kind == TURN:
        usage = next((f for f in head.folded if f.type == EventType.USAGE), None)
        message = next((f for f in head.folded if f.type == EventType.MESSAGE_COMPLETED), None)
        extra = [f.summary for f in (usage, message) if f is not None]
        finished = next((f for f in head.folded if f.type == EventType.TURN_COMPLETED), None)
        reason = (
            FINISH_REASONS.get(str(finished.data.get("finish_reason", ""))) if finished else None
        )
        return " · ".join([head.summary, *([reason] if reason else []), *extra])
    if last.type in TOOL_CALL_END_EVENT_TYPES:
        # "name · duration" or "name · error kind: message" says it all.
        return last.summary or head.summary
    if last.type in RUN_END_EVENT_TYPES and last.summary:
        return f"{head.summary} → {last.summary}"
    return head.summary
