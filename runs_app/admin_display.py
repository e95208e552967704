"""How runs, turns and tool calls show in the operators' console: the cells of their
lists that point along the run tree (a run opens at its timeline, where its raw
record is one click further), and which fields their record pages show: what the
record holds, not every column it could hold, and none of the machinery's own."""

from __future__ import annotations

from typing import Any

from django.urls import reverse
from django.utils.safestring import SafeString

from goaai.admin_base import FieldTest, holds, never
from goaai.admin_cells import short_id
from runs_app.models import Run, ToolCall, Turn

# Cells


def run_cell(run_id: Any, what: str = "run id") -> SafeString | None:
    """A run's short id, opening its timeline."""
    if run_id is None:
        return None
    return short_id(run_id, url=reverse("admin:runs_app_run_timeline", args=[run_id]), what=what)


def record_cell(model: type[Any], pk: Any, what: str) -> SafeString | None:
    """A row's short id, opening its record page."""
    if pk is None:
        return None
    meta = model._meta
    url = reverse(f"admin:{meta.app_label}_{meta.model_name}_change", args=[pk])
    return short_id(pk, url=url, what=what)


# Record pages


def _errored(record: Run | ToolCall) -> bool:
    return bool(record.error_kind or record.error_message)


def _stop_asked(run: Run) -> bool:
    return run.cancel_requested_at is not None or bool(run.cancel_reason)


def _leased(run: Run) -> bool:
    # A lease matters while the run is open (who executes it, until when); an ended
    # run's is what its last worker left behind.
    return not run.is_terminal and bool(run.lease_owner or run.lease_expires_at)


def _branched(run: Run) -> bool:
    return any((run.previous_run_id, run.retry_of_id, run.regenerates_id, run.edit_of_id))


def _decided(call: ToolCall) -> bool:
    return call.requires_approval or bool(call.decision)


def _retried(call: ToolCall) -> bool:
    return call.attempt > 1


def _answered_by_another(turn: Turn) -> bool:
    return bool(turn.response_model) and turn.response_model != turn.model


RUN_FIELDS_SHOWN: dict[str, FieldTest] = {
    "output": holds("output"),
    "model": holds("model"),
    "labels": holds("labels"),
    "metadata": holds("metadata"),
    "policy": holds("policy"),
    "parent_run_link": holds("parent_run_id"),
    "parent_tool_call_link": holds("parent_tool_call_id"),
    "branch_links": _branched,
    "multitask": holds("multitask"),
    "created_by": holds("created_by_id"),
    "cached_input_tokens": holds("cached_input_tokens"),
    "cache_write_tokens": holds("cache_write_tokens"),
    "reasoning_tokens": holds("reasoning_tokens"),
    "unpriced_turns": holds("unpriced_turns"),
    "error_kind": _errored,
    "error_message": _errored,
    "error_retryable": _errored,
    "cancel_requested_at": _stop_asked,
    "cancel_reason": _stop_asked,
    "awaiting": holds("awaiting"),
    "awaiting_since": holds("awaiting_since"),
    "paused_seconds": holds("paused_seconds"),
    "lease_owner": _leased,
    "lease_expires_at": _leased,
    "idempotency_key": holds("idempotency_key"),
    "request_fingerprint": never,
    "conversation_digest": never,
    "client_tools": holds("client_tools"),
    "instructions": holds("instructions"),
    "started_at": holds("started_at"),
    "ended_at": holds("ended_at"),
}

TURN_FIELDS_SHOWN: dict[str, FieldTest] = {
    "response_model": _answered_by_another,
    "response_tool_calls": holds("response_tool_calls"),
    "finish_reason": holds("finish_reason"),
    "reasoning": holds("reasoning"),
    "cached_input_tokens": holds("cached_input_tokens"),
    "cache_write_tokens": holds("cache_write_tokens"),
    "reasoning_tokens": holds("reasoning_tokens"),
    "usage_estimated": holds("usage_estimated"),
    "interruption": holds("interruption"),
    "retries": holds("retries"),
    "retry_errors": holds("retry_errors"),
    "latency_ms": holds("latency_ms"),
    "ended_at": holds("ended_at"),
}

TOOL_CALL_FIELDS_SHOWN: dict[str, FieldTest] = {
    "call_id": holds("call_id"),
    "result": lambda call: call.result is not None,
    "error_kind": _errored,
    "error_message": _errored,
    "requires_approval": _decided,
    "decision": _decided,
    "decided_by": holds("decided_by_id"),
    "decided_at": holds("decided_at"),
    "decision_reason": holds("decision_reason"),
    "attempt": _retried,
    "started_at": holds("started_at"),
    "ended_at": holds("ended_at"),
    "duration_ms": lambda call: call.duration_ms is not None,
}
