"""What events refer to (their turns, tool calls and the users who decided), looked
up for a page at a time: one query by primary key for each kind, whatever the page."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any
from uuid import UUID

from django.contrib.auth import get_user_model
from django.db.models.functions import Length, Substr
from django.urls import reverse

from goaai.runtime.vocabulary import FinishReason
from runs_app.models import ToolCall, Turn
from runs_app.timeline.values import (
    DISPLAY_CAP,
    Value,
    format_cost,
    format_duration,
    json_head,
    json_size,
    payload_url,
    seconds_between,
    value_from_head,
)


def uuid_or_none(value: Any) -> UUID | None:
    """The id an event's data names, if it is one."""
    if not value:
        return None
    try:
        return UUID(str(value))
    except ValueError:
        return None


def user_id(value: Any) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def decider_name(users: Mapping[int, str], decided_by: Any) -> str:
    """Who an event's ``decided_by`` names: the username, or the id of a user since
    deleted."""
    return users.get(user_id(decided_by) or 0, f"user {decided_by}")


@dataclass
class TurnInfo:
    id: UUID
    run_id: UUID
    index: int
    model: str
    response_model: str
    input_tokens: int
    output_tokens: int
    cached_input_tokens: int
    cache_write_tokens: int
    reasoning_tokens: int
    cost: Decimal | None
    finish_reason: str
    retries: int
    # What the provider said of each failed attempt ({attempt, error_kind, message, at}).
    retry_errors: list[dict[str, Any]]
    latency_ms: int | None
    started_at: dt.datetime
    ended_at: dt.datetime | None
    response: Value
    reasoning: Value
    messages_url: str
    response_tool_calls_url: str
    admin_url: str

    @property
    def duration(self) -> str:
        return format_duration(seconds_between(self.started_at, self.ended_at))

    @property
    def cost_label(self) -> str:
        """The turn's cost; "not answered yet" before its reply is recorded."""
        if self.cost is None and self.ended_at is None:
            return "not answered yet"
        return format_cost(self.cost)

    @property
    def truncated(self) -> bool:
        return self.finish_reason == FinishReason.LENGTH

    @property
    def total_tokens(self) -> int:
        return (
            self.input_tokens
            + self.cached_input_tokens
            + self.cache_write_tokens
            + self.output_tokens
        )

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
        """How long the call ran; empty while it runs, or if it never started."""
        if self.duration_ms is not None:
            return format_duration(self.duration_ms / 1000)
        # A call cut short by the end of its run has no duration of its own: it ran
        # from its start until the run ended it.
        return format_duration(seconds_between(self.started_at, self.ended_at))


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
            reasoning_head=Substr("reasoning", 1, DISPLAY_CAP + 1),
            reasoning_size=Length("reasoning"),
        )
        .values(
            "id",
            "run_id",
            "index",
            "model",
            "response_model",
            "input_tokens",
            "output_tokens",
            "cached_input_tokens",
            "cache_write_tokens",
            "reasoning_tokens",
            "cost",
            "finish_reason",
            "retries",
            "retry_errors",
            "latency_ms",
            "started_at",
            "ended_at",
            "response_head",
            "response_size",
            "reasoning_head",
            "reasoning_size",
        )
    )
    return {row["id"]: _turn_info(row) for row in rows}


def _cut_text(head: str | None, size: int | None, full_url: str) -> Value:
    """A text column read cut in SQL (its first ``DISPLAY_CAP + 1`` characters)."""
    return Value(
        text=(head or "")[:DISPLAY_CAP],
        truncated=(size or 0) > DISPLAY_CAP,
        size=size or 0,
        full_url=full_url,
    )


def _turn_info(row: dict[str, Any]) -> TurnInfo:
    return TurnInfo(
        id=row["id"],
        run_id=row["run_id"],
        index=row["index"],
        model=row["model"],
        response_model=row["response_model"],
        input_tokens=row["input_tokens"],
        output_tokens=row["output_tokens"],
        cached_input_tokens=row["cached_input_tokens"],
        cache_write_tokens=row["cache_write_tokens"],
        reasoning_tokens=row["reasoning_tokens"],
        cost=row["cost"],
        finish_reason=row["finish_reason"],
        retries=row["retries"],
        retry_errors=[e for e in row["retry_errors"] or [] if isinstance(e, dict)],
        latency_ms=row["latency_ms"],
        started_at=row["started_at"],
        ended_at=row["ended_at"],
        response=_cut_text(
            row["response_head"],
            row["response_size"],
            payload_url("turn", row["id"], "response"),
        ),
        reasoning=_cut_text(
            row["reasoning_head"],
            row["reasoning_size"],
            payload_url("turn", row["id"], "reasoning"),
        ),
        messages_url=payload_url("turn", row["id"], "request_messages"),
        response_tool_calls_url=payload_url("turn", row["id"], "response"),
        admin_url=reverse("admin:runs_app_turn_change", args=[row["id"]]),
    )


def tool_calls_by_id(ids: Iterable[UUID]) -> dict[UUID, ToolCallInfo]:
    """The tool calls a page refers to, in one query by primary key, with their
    arguments and result cut in SQL."""
    wanted = set(ids)
    if not wanted:
        return {}
    rows = (
        ToolCall.objects.filter(pk__in=wanted)
        .annotate(
            arguments_head=json_head("arguments"),
            arguments_size=json_size("arguments"),
            result_head=json_head("result"),
            result_size=json_size("result"),
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
    return {row["id"]: _tool_call_info(row) for row in rows}


def _tool_call_info(row: dict[str, Any]) -> ToolCallInfo:
    pk = row["id"]
    return ToolCallInfo(
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
        arguments=value_from_head(
            row["arguments_head"],
            row["arguments_size"],
            full_url=payload_url("tool_call", pk, "arguments"),
        ),
        result=value_from_head(
            row["result_head"],
            row["result_size"],
            full_url=payload_url("tool_call", pk, "result"),
        ),
        admin_url=reverse("admin:runs_app_toolcall_change", args=[pk]),
    )


def usernames_by_id(ids: Iterable[Any]) -> dict[int, str]:
    """Usernames of the users with these ids, in one query (none for no ids)."""
    wanted = {i for i in map(user_id, ids) if i is not None}
    if not wanted:
        return {}
    users = get_user_model().objects.filter(pk__in=wanted).values_list("pk", "username")
    return {int(pk): str(username) for pk, username in users}
