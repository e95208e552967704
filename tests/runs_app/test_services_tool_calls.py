"""A tool call's life through the services: scheduled, running, then succeeded or
failed exactly once."""

from __future__ import annotations

import pytest

from goaai.runtime.errors import IllegalTransition
from goaai.runtime.vocabulary import EventType, RunStatus, ToolCallStatus
from runs_app import services
from runs_app.models import ToolCall
from sessions_app.models import RunEvent
from tests.factories import RunFactory, TurnFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def turn():
    return TurnFactory(run=RunFactory(status=RunStatus.RUNNING), index=0)


def _schedule(turn, **kwargs) -> ToolCall:
    return services.tool_call_schedule(
        turn_id=turn.id,
        index=0,
        call_id="call_1",
        name="calculator",
        arguments={"expression": "6*7"},
        **kwargs,
    )


def _types(turn) -> list[str]:
    return list(
        RunEvent.objects.filter(run_id=turn.run_id).order_by("seq").values_list("type", flat=True)
    )


def test_a_call_is_scheduled_started_and_succeeds_with_its_result(turn):
    call = _schedule(turn)
    assert (call.status, call.attempt, call.started_at) == (ToolCallStatus.SCHEDULED, 0, None)

    assert services.tool_call_begin(tool_call_id=call.id) == 1
    started = ToolCall.objects.get(pk=call.id)
    assert (started.status, started.attempt) == (ToolCallStatus.RUNNING, 1)
    assert started.started_at is not None

    services.tool_call_finish(tool_call_id=call.id, result={"value": 42})

    finished = ToolCall.objects.get(pk=call.id)
    assert finished.status == ToolCallStatus.SUCCEEDED
    assert finished.result == {"value": 42}
    assert finished.ended_at is not None
    assert finished.duration_ms is not None
    assert (finished.session_id, finished.run_id) == (turn.run.session_id, turn.run_id)
    assert _types(turn) == [
        EventType.TOOL_CALL_SCHEDULED,
        EventType.TOOL_CALL_STARTED,
        EventType.TOOL_CALL_SUCCEEDED,
    ]


def test_a_failed_call_keeps_its_error_and_no_result(turn):
    call = services.tool_call_start(
        turn_id=turn.id, index=0, call_id="c", name="calculator", arguments={}
    )

    services.tool_call_finish(
        tool_call_id=call.id,
        result={"ignored": True},
        error_kind="invalid_call",
        error_message="expression: Field required",
    )

    failed = ToolCall.objects.get(pk=call.id)
    assert failed.status == ToolCallStatus.FAILED
    assert (failed.result, failed.error_kind, failed.error_message) == (
        None,
        "invalid_call",
        "expression: Field required",
    )
    event = RunEvent.objects.get(type=EventType.TOOL_CALL_FAILED)
    assert event.data["error"] == {"kind": "invalid_call", "message": "expression: Field required"}


def test_a_call_that_needs_approval_asks_for_it(turn):
    call = _schedule(turn, requires_approval=True)

    assert call.requires_approval is True
    assert _types(turn) == [EventType.TOOL_CALL_SCHEDULED, EventType.TOOL_CALL_APPROVAL_REQUESTED]


def test_a_call_cannot_finish_twice(turn):
    call = services.tool_call_start(
        turn_id=turn.id, index=0, call_id="c", name="calculator", arguments={}
    )
    services.tool_call_finish(tool_call_id=call.id, result={"value": 1})
    events = RunEvent.objects.count()

    with pytest.raises(IllegalTransition) as excinfo:
        services.tool_call_finish(tool_call_id=call.id, result={"value": 2})

    assert ToolCall.objects.get(pk=call.id).result == {"value": 1}
    assert RunEvent.objects.count() == events
    # The message names what could not change: a tool call, not a run.
    assert str(call.id) in str(excinfo.value)
    assert not str(excinfo.value).startswith("Run ")


def test_a_call_cut_short_by_the_end_of_its_run_cannot_finish_afterwards(turn):
    call = services.tool_call_start(
        turn_id=turn.id, index=0, call_id="c", name="calculator", arguments={}
    )
    services.run_cancel(run_id=turn.run_id, reason="user_requested")

    with pytest.raises(IllegalTransition):
        services.tool_call_finish(tool_call_id=call.id, result={"value": 42})

    call.refresh_from_db()
    assert (call.status, call.result) == (ToolCallStatus.CANCELED, None)
