"""Every run status transition, legal and illegal, through the services.

A legal move sets the run's fields and appends exactly the event that announces
it; an illegal one raises ``IllegalTransition`` and leaves the run, its tool calls
and the session's event log exactly as they were.
"""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
from django.utils import timezone

from goaai.runtime.errors import IllegalTransition, NotFound
from goaai.runtime.public_errors import ERROR_SENTENCES
from goaai.runtime.types import Usage
from goaai.runtime.vocabulary import (
    RUN_TRANSITIONS,
    TERMINAL_RUN_STATUSES,
    AwaitingKind,
    EventType,
    RunStatus,
    ToolCallStatus,
)
from runs_app import services
from runs_app.models import Run, ToolCall
from sessions_app.models import RunEvent, Session
from tests.factories import RunFactory, ToolCallFactory, TurnFactory

pytestmark = pytest.mark.django_db

# The tool call a run waits on in these tests (its row is not needed).
CALL_7 = uuid.UUID("00000000-0000-0000-0000-000000000007")


@dataclass(frozen=True)
class Move:
    """A service that moves a run to ``target``, the statuses it accepts, and the
    event it must append."""

    name: str
    target: RunStatus
    sources: frozenset[RunStatus]
    event: EventType
    call: Callable[[uuid.UUID], Run]


def _from_table(target: RunStatus) -> frozenset[RunStatus]:
    return frozenset(src for src, targets in RUN_TRANSITIONS.items() if target in targets)


MOVES = [
    # The two moves to running are not here: a pending run starts when a worker
    # claims it, a waiting run resumes when its answer arrives (run_claim and
    # run_respond, tested below, each only from its one status).
    Move(
        "run_await_input",
        RunStatus.AWAITING_INPUT,
        _from_table(RunStatus.AWAITING_INPUT),
        EventType.RUN_AWAITING_INPUT,
        lambda run_id: services.run_await_input(
            run_id=run_id, kind=AwaitingKind.APPROVAL, tool_call_id=CALL_7
        ),
    ),
    Move(
        "run_complete",
        RunStatus.COMPLETED,
        _from_table(RunStatus.COMPLETED),
        EventType.RUN_COMPLETED,
        lambda run_id: services.run_complete(run_id=run_id, output="The answer is 42."),
    ),
    Move(
        "run_fail",
        RunStatus.FAILED,
        _from_table(RunStatus.FAILED),
        EventType.RUN_FAILED,
        lambda run_id: services.run_fail(
            run_id=run_id, kind="rate_limited", message="Slow down.", retryable=True
        ),
    ),
    Move(
        "run_time_out",
        RunStatus.TIMED_OUT,
        _from_table(RunStatus.TIMED_OUT),
        EventType.RUN_TIMED_OUT,
        lambda run_id: services.run_time_out(run_id=run_id, message="Out of time."),
    ),
    Move(
        "run_cancel",
        RunStatus.CANCELED,
        _from_table(RunStatus.CANCELED),
        EventType.RUN_CANCELED,
        lambda run_id: services.run_cancel(run_id=run_id, reason="user_requested"),
    ),
]
MOVES_BY_NAME = {move.name: move for move in MOVES}

LEGAL = [
    pytest.param(source, move, id=f"{source}->{move.name}")
    for move in MOVES
    for source in RunStatus
    if source in move.sources
]
ILLEGAL = [
    pytest.param(source, move, id=f"{source}->{move.name}")
    for move in MOVES
    for source in RunStatus
    if source not in move.sources
]


def _run_in(status: RunStatus, **fields: Any) -> Run:
    return RunFactory(status=status, input_tokens=30, output_tokens=12, total_tokens=42, **fields)


def _row(run: Run) -> dict[str, Any]:
    return Run.objects.filter(pk=run.pk).values().get()


def _events(run: Run) -> list[RunEvent]:
    return list(RunEvent.objects.filter(session_id=run.session_id).order_by("seq"))


def test_the_services_cover_exactly_the_transition_table():
    """Every move the table allows has a service, and no service allows more."""
    allowed_by_services = {(source, move.target) for move in MOVES for source in move.sources}
    allowed_by_services |= {
        (RunStatus.PENDING, RunStatus.RUNNING),  # run_claim
        (RunStatus.AWAITING_INPUT, RunStatus.RUNNING),  # run_respond
    }
    allowed_by_table = {
        (source, target) for source, targets in RUN_TRANSITIONS.items() for target in targets
    }
    assert allowed_by_services == allowed_by_table


def test_no_transition_leads_back_to_pending_or_out_of_a_terminal_status():
    assert all(RunStatus.PENDING not in targets for targets in RUN_TRANSITIONS.values())
    assert all(not RUN_TRANSITIONS[status] for status in TERMINAL_RUN_STATUSES)


@pytest.mark.parametrize(("source", "move"), LEGAL)
def test_legal_transition_changes_the_run_and_appends_its_event(source, move):
    run = _run_in(source)
    before = _row(run)

    returned = move.call(run.id)

    run.refresh_from_db()
    assert returned.pk == run.pk
    assert returned.status == run.status == move.target
    events = _events(run)
    assert [(e.seq, e.type, e.run_id) for e in events] == [(1, move.event, run.id)]
    assert Session.objects.get(pk=run.session_id).last_event_seq == 1
    data = events[0].data

    if move.name == "run_await_input":
        assert run.ended_at is None
        assert data == {"kind": "approval", "tool_call": str(CALL_7)}
        assert run.awaiting == {"kind": "approval", "tool_call": str(CALL_7)}
        assert run.awaiting_since is not None
        # Nobody executes a waiting run: the worker's lease is given up.
        assert (run.lease_owner, run.lease_expires_at) == ("", None)
    else:
        # Every ending sets ended_at.
        assert before["ended_at"] is None
        assert run.ended_at is not None
    if move.name == "run_complete":
        assert run.output == "The answer is 42."
        assert data == {
            "output": "The answer is 42.",
            "usage": {**Usage(30, 12).as_dict(), "cost": "0"},
        }
    elif move.name == "run_fail":
        assert (run.error_kind, run.error_message, run.error_retryable) == (
            "rate_limited",
            "Slow down.",
            True,
        )
        # Its owner reads the event: plain words, the provider's stay on the run.
        assert data == {
            "error": {
                "kind": "rate_limited",
                "message": ERROR_SENTENCES["rate_limited"],
                "retryable": True,
            }
        }
    elif move.name == "run_time_out":
        assert (run.error_kind, run.error_message) == ("timeout", "Out of time.")
        assert data == {"error": {"kind": "timeout", "message": "Out of time.", "retryable": False}}
    elif move.name == "run_cancel":
        assert run.cancel_reason == "user_requested"
        # Nobody was named as asking: who stopped it is not known.
        assert data == {"reason": "user_requested", "stopped_by": None}


@pytest.mark.parametrize(("source", "move"), ILLEGAL)
def test_illegal_transition_raises_and_changes_nothing(source, move):
    run = _run_in(source)
    before = _row(run)

    with pytest.raises(IllegalTransition) as excinfo:
        move.call(run.id)

    error = excinfo.value
    assert str(error) == f"Run {run.id} is {source}; it cannot become {move.target}."
    assert (error.run_id, error.current, error.target) == (run.id, source, move.target)
    assert _row(run) == before
    assert not RunEvent.objects.exists()
    assert Session.objects.get(pk=run.session_id).last_event_seq == 0


@pytest.mark.parametrize("move", MOVES, ids=lambda move: move.name)
def test_transition_of_an_unknown_run_is_not_found(move):
    with pytest.raises(NotFound):
        move.call(uuid.uuid4())


def test_events_of_successive_transitions_are_numbered_in_order():
    run = _run_in(RunStatus.PENDING)

    services.run_claim(run_id=run.id, owner="worker-1", lease_seconds=60)
    question = ToolCallFactory(run=run, turn__run=run, status=ToolCallStatus.SCHEDULED)
    services.run_await_input(
        run_id=run.id, kind=AwaitingKind.QUESTION, tool_call_id=question.pk, question="City?"
    )
    services.run_respond(run_id=run.id, answer="Rome")
    services.run_complete(run_id=run.id, output="Rome.")

    assert [(e.seq, e.type) for e in _events(run)] == [
        (1, EventType.RUN_STARTED),
        (2, EventType.RUN_AWAITING_INPUT),
        (3, EventType.TOOL_CALL_DECIDED),
        (4, EventType.TOOL_CALL_SUCCEEDED),
        (5, EventType.RUN_RESUMED),
        (6, EventType.RUN_COMPLETED),
    ]


# Asking a run to stop


@pytest.mark.parametrize("source", [RunStatus.PENDING, RunStatus.AWAITING_INPUT])
def test_request_cancel_cancels_a_run_that_no_loop_is_stepping_through_at_once(source):
    run = _run_in(source)

    returned = services.run_request_cancel(run_id=run.id, reason="user_requested")

    run.refresh_from_db()
    assert returned.status == run.status == RunStatus.CANCELED
    assert run.ended_at is not None
    assert run.cancel_reason == "user_requested"
    assert [(e.type, e.data) for e in _events(run)] == [
        (EventType.RUN_CANCELED, {"reason": "user_requested", "stopped_by": None})
    ]


def _held_by_a_live_worker() -> dict[str, Any]:
    return {"lease_owner": "worker-1", "lease_expires_at": timezone.now() + dt.timedelta(minutes=1)}


def test_request_cancel_of_a_running_run_only_flags_it_for_its_loop():
    run = _run_in(RunStatus.RUNNING, **_held_by_a_live_worker())

    returned = services.run_request_cancel(run_id=run.id, reason="user_requested")

    run.refresh_from_db()
    assert returned.status == run.status == RunStatus.RUNNING
    assert run.cancel_requested_at is not None
    assert run.cancel_reason == "user_requested"
    assert run.ended_at is None
    assert not RunEvent.objects.filter(type=EventType.RUN_CANCELED).exists()


@pytest.mark.parametrize(
    "lease",
    [
        pytest.param({}, id="never held"),
        pytest.param(
            {"lease_owner": "dead-worker", "lease_expires_at": timezone.now()}, id="lease expired"
        ),
    ],
)
def test_request_cancel_of_a_running_run_that_no_worker_holds_cancels_it_at_once(lease):
    run = _run_in(RunStatus.RUNNING, **lease)

    returned = services.run_request_cancel(run_id=run.id, reason="user_requested")

    assert returned.status == RunStatus.CANCELED
    assert [e.type for e in _events(run)] == [EventType.RUN_CANCELED]


def test_asking_a_running_run_to_stop_twice_keeps_the_first_request():
    run = _run_in(RunStatus.RUNNING, **_held_by_a_live_worker())
    services.run_request_cancel(run_id=run.id, reason="first")
    first = _row(run)

    services.run_request_cancel(run_id=run.id, reason="second")

    after = _row(run)
    assert (after["cancel_requested_at"], after["cancel_reason"]) == (
        first["cancel_requested_at"],
        "first",
    )


@pytest.mark.parametrize("source", sorted(TERMINAL_RUN_STATUSES))
def test_request_cancel_of_a_finished_run_changes_nothing(source):
    run = _run_in(source)
    before = _row(run)

    returned = services.run_request_cancel(run_id=run.id, reason="too late")

    assert returned.status == source
    assert _row(run) == before
    assert not RunEvent.objects.exists()
    assert Session.objects.get(pk=run.session_id).last_event_seq == 0


def test_request_cancel_of_an_unknown_run_is_not_found():
    with pytest.raises(NotFound):
        services.run_request_cancel(run_id=uuid.uuid4(), reason="")


def test_resuming_counts_the_time_spent_waiting_as_paused():
    since = timezone.now() - dt.timedelta(seconds=30)
    run = _run_in(RunStatus.AWAITING_INPUT, awaiting_since=since, paused_seconds=5)
    question = ToolCallFactory(run=run, turn__run=run, status=ToolCallStatus.SCHEDULED)
    Run.objects.filter(pk=run.pk).update(
        awaiting={"kind": "question", "tool_call": str(question.pk)}
    )

    services.run_respond(run_id=run.id, answer="Rome")

    run.refresh_from_db()
    assert 35 <= run.paused_seconds < 35 + 60
    resumed = [e for e in _events(run) if e.type == EventType.RUN_RESUMED]
    assert resumed[0].data["waited_seconds"] >= 30


# Claiming a run for execution


def test_claiming_a_pending_run_starts_it_under_the_workers_lease():
    run = _run_in(RunStatus.PENDING)

    claimed = services.run_claim(run_id=run.id, owner="worker-1", lease_seconds=60)

    assert claimed is not None
    assert claimed[0].pk == run.pk
    assert claimed[1] is True  # it has just started
    run.refresh_from_db()
    assert run.status == RunStatus.RUNNING
    assert run.started_at is not None
    assert run.lease_owner == "worker-1"
    assert run.lease_expires_at > timezone.now()
    assert [(e.type, e.data) for e in _events(run)] == [
        (EventType.RUN_STARTED, {"agent": "assistant", "worker": "worker-1"})
    ]


def test_a_run_held_by_a_live_worker_cannot_be_claimed():
    run = _run_in(RunStatus.RUNNING, **_held_by_a_live_worker())
    before = _row(run)

    assert services.run_claim(run_id=run.id, owner="worker-2", lease_seconds=60) is None
    assert _row(run) == before
    assert not RunEvent.objects.exists()


def test_a_run_whose_worker_died_is_taken_over_and_says_so():
    run = _run_in(
        RunStatus.RUNNING,
        lease_owner="dead-worker",
        lease_expires_at=timezone.now() - dt.timedelta(seconds=1),
    )
    before = _row(run)

    claimed = services.run_claim(run_id=run.id, owner="worker-2", lease_seconds=60)

    assert claimed is not None
    assert claimed[1] is False  # taken over, not started again
    run.refresh_from_db()
    assert (run.status, run.lease_owner) == (RunStatus.RUNNING, "worker-2")
    assert run.started_at == before["started_at"]
    assert run.lease_expires_at > timezone.now()
    # Its worker kept no lease: told lost, then taken over.
    assert [(e.type, e.data) for e in _events(run)] == [
        (
            EventType.RUN_INTERRUPTED,
            {"cause": "lease_expired", "reason": "its lease expired", "worker": "dead-worker"},
        ),
        (
            EventType.RUN_RESUMED,
            {"reason": "worker_lost", "previous_worker": "dead-worker", "worker": "worker-2"},
        ),
    ]


@pytest.mark.parametrize("status", [RunStatus.AWAITING_INPUT, *sorted(TERMINAL_RUN_STATUSES)])
def test_a_waiting_or_finished_run_cannot_be_claimed(status):
    run = _run_in(status)
    before = _row(run)

    assert services.run_claim(run_id=run.id, owner="worker-1", lease_seconds=60) is None
    assert _row(run) == before
    assert not RunEvent.objects.exists()


def test_only_the_lease_holder_renews_its_lease():
    run = _run_in(RunStatus.RUNNING, **_held_by_a_live_worker())

    assert services.run_renew_lease(run_id=run.id, owner="worker-1", lease_seconds=600)
    assert not services.run_renew_lease(run_id=run.id, owner="worker-2", lease_seconds=600)
    run.refresh_from_db()
    assert run.lease_expires_at > timezone.now() + dt.timedelta(seconds=500)


# Open tool calls end with their run


ENDINGS = [
    pytest.param(MOVES_BY_NAME[name], id=name)
    for name in ("run_complete", "run_fail", "run_time_out", "run_cancel")
]


@pytest.mark.parametrize("move", ENDINGS)
def test_ending_a_run_cancels_its_open_tool_calls_and_only_those(move):
    run = _run_in(RunStatus.RUNNING)
    turn = TurnFactory(run=run, index=0)
    running = ToolCallFactory(turn=turn, status=ToolCallStatus.RUNNING, result=None)
    scheduled = ToolCallFactory(turn=turn, status=ToolCallStatus.SCHEDULED, result=None)
    succeeded = ToolCallFactory(turn=turn, status=ToolCallStatus.SUCCEEDED)
    failed = ToolCallFactory(turn=turn, status=ToolCallStatus.FAILED, error_kind="timeout")
    elsewhere = ToolCallFactory(status=ToolCallStatus.RUNNING, result=None)

    move.call(run.id)

    for call in (running, scheduled):
        call.refresh_from_db()
        assert call.status == ToolCallStatus.CANCELED
        assert call.ended_at is not None
    assert ToolCall.objects.get(pk=succeeded.pk).status == ToolCallStatus.SUCCEEDED
    assert ToolCall.objects.get(pk=failed.pk).status == ToolCallStatus.FAILED
    assert ToolCall.objects.get(pk=elsewhere.pk).status == ToolCallStatus.RUNNING


def test_an_illegal_ending_leaves_the_tool_calls_alone():
    run = _run_in(RunStatus.PENDING)
    call = ToolCallFactory(turn=TurnFactory(run=run), status=ToolCallStatus.RUNNING, result=None)

    with pytest.raises(IllegalTransition):
        services.run_complete(run_id=run.id, output="no")

    assert ToolCall.objects.get(pk=call.pk).status == ToolCallStatus.RUNNING
