"""A run's, a turn's and a tool call's raw record show what the record holds: no
error fields without an error, no cancel fields on a run nobody stopped, no lease on
an ended run, never the digests and fingerprints kept for the machinery."""

from __future__ import annotations

import datetime as dt

import pytest
from django.urls import reverse
from django.utils import timezone

from goaai.runtime.vocabulary import RunStatus
from tests.factories import RunFactory, ToolCallFactory, TurnFactory

pytestmark = pytest.mark.django_db

INTERNAL = {"request_fingerprint", "conversation_digest"}
ERROR = {"error_kind", "error_message", "error_retryable"}
CANCEL = {"cancel_requested_at", "cancel_reason"}
LEASE = {"lease_owner", "lease_expires_at"}


@pytest.fixture
def operator(client, staff):
    client.force_login(staff)
    return client


def shown(client, obj) -> set[str]:
    meta = obj._meta
    url = reverse(f"admin:{meta.app_label}_{meta.model_name}_change", args=[obj.pk])
    response = client.get(url)
    assert response.status_code == 200
    return {
        name for _, options in response.context["adminform"].fieldsets for name in options["fields"]
    }


def test_a_run_that_went_well_shows_no_error_cancel_lease_or_digest(operator):
    run = RunFactory(
        status=RunStatus.COMPLETED,
        output="Done.",
        model="scripted",
        lease_owner="worker-1",
        lease_expires_at=timezone.now(),
        request_fingerprint="f" * 64,
        conversation_digest="d" * 64,
    )
    fields = shown(operator, run)
    assert not fields & (INTERNAL | ERROR | CANCEL | LEASE)
    assert not fields & {"awaiting", "awaiting_since", "paused_seconds", "parent_run_link"}
    assert not fields & {"cached_input_tokens", "reasoning_tokens", "idempotency_key"}
    assert {"id", "timeline", "input", "output", "model", "status", "total_tokens"} <= fields
    assert {"created_at", "started_at", "ended_at", "steps"} <= fields


def test_a_failed_run_shows_its_error_and_a_canceled_one_who_stopped_it(operator):
    failed = RunFactory(
        status=RunStatus.FAILED, error_kind="timeout", error_message="slow", error_retryable=True
    )
    assert shown(operator, failed) >= ERROR
    canceled = RunFactory(
        status=RunStatus.CANCELED, cancel_requested_at=timezone.now(), cancel_reason="user"
    )
    fields = shown(operator, canceled)
    assert fields >= CANCEL
    assert not fields & ERROR


def test_an_open_run_shows_its_lease_and_what_it_waits_for(operator):
    parent = RunFactory(status=RunStatus.RUNNING)
    waiting = RunFactory(
        status=RunStatus.AWAITING_INPUT,
        parent_run=parent,
        awaiting={"kind": "approval", "tool_call": "x"},
        awaiting_since=timezone.now(),
        lease_owner="worker-2",
        lease_expires_at=timezone.now() + dt.timedelta(seconds=30),
        idempotency_key="k-1",
    )
    fields = shown(operator, waiting)
    assert LEASE | {"awaiting", "awaiting_since", "parent_run_link", "idempotency_key"} <= fields
    assert "ended_at" not in fields
    assert not fields & INTERNAL


def test_a_turn_shows_what_it_holds(operator):
    plain = TurnFactory(model="scripted", response_model="scripted", latency_ms=12)
    fields = shown(operator, plain)
    assert {"model", "request_messages", "response_text", "latency_ms"} <= fields
    assert not fields & {"response_model", "retries", "retry_errors", "interruption"}
    assert not fields & {"reasoning", "usage_estimated", "response_tool_calls", "ended_at"}
    retried = TurnFactory(
        model="openai:gpt-4.1",
        response_model="gpt-4.1-2025-04-14",
        retries=2,
        retry_errors=[{"attempt": 1, "error_kind": "rate_limited"}],
        interruption="stopped",
        ended_at=timezone.now(),
    )
    assert {"response_model", "retries", "retry_errors", "interruption", "ended_at"} <= shown(
        operator, retried
    )


def test_a_tool_call_shows_what_it_holds(operator):
    succeeded = ToolCallFactory(attempt=1, duration_ms=5)
    fields = shown(operator, succeeded)
    assert {"name", "arguments", "result", "status", "duration_ms", "run_link"} <= fields
    assert not fields & {"error_kind", "error_message", "attempt", "call_id"}
    assert not fields & {"requires_approval", "decision", "decided_by", "decision_reason"}
    denied = ToolCallFactory(
        status="denied",
        result=None,
        requires_approval=True,
        decision="deny",
        decision_reason="no",
        error_kind="domain_rejection",
        error_message="denied",
        attempt=2,
    )
    fields = shown(operator, denied)
    assert {"requires_approval", "decision", "decision_reason", "error_kind", "attempt"} <= fields
    assert "result" not in fields
