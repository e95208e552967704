"""What every store promises about how runs end and lose their workers, checked
against both (the harness of test_store_contract.py): who stopped a run (its own
user, an operator, the next message, a policy rule) and its end event saying so;
a worker known lost told as ``run.interrupted`` and its lease taken from it; runs
called as tools found again and handed out while nothing else takes them up."""

from __future__ import annotations

import pytest

from goaai.runtime.types import ModelReply, RunError, ToolCallRequest, Usage
from goaai.runtime.vocabulary import EventType, RunStatus
from tests.goaai.runtime import test_store_contract as contract
from tests.goaai.runtime.test_store_contract import LEASE, Harness

E = EventType


@pytest.fixture(
    params=["memory", pytest.param("orm", marks=pytest.mark.django_db(transaction=True))]
)
def h(request: pytest.FixtureRequest) -> Harness:
    """Each store, as the contract suite builds it."""
    if request.param == "memory":
        return contract._memory_harness()
    return contract._orm_harness()


def _stopped(kind: str, user: str | None = None, rule: str | None = None) -> dict:
    return {"kind": kind, "user": user, "rule": rule}


# Who stopped a run


def test_a_user_stopping_their_own_run_is_its_user_and_anyone_else_an_operator(h):
    own, others = h.run(), h.run()

    h.store.request_cancel(own.id, "stopped by the user", by=h.alice)
    h.store.request_cancel(others.id, "canceled by bob", by=h.bob)

    assert h.last(own.session_id, E.RUN_CANCELED) == {
        "reason": "stopped by the user",
        "stopped_by": _stopped("user", "alice"),
    }
    assert h.last(others.session_id, E.RUN_CANCELED) == {
        "reason": "canceled by bob",
        "stopped_by": _stopped("operator", "bob"),
    }


def test_a_stop_may_say_what_kind_it_is(h):
    run = h.run()

    h.store.request_cancel(run.id, "the user sent a new message", by=h.alice, kind="superseded")

    assert h.last(run.session_id, E.RUN_CANCELED)["stopped_by"] == _stopped("superseded", "alice")


def test_a_run_stopped_mid_step_says_who_asked_once_its_loop_ends_it(h):
    run = h.claimed()
    h.store.request_cancel(run.id, "canceled by bob", by=h.bob)

    h.store.finish_run(run_id=run.id, status=RunStatus.CANCELED, output="Once upon")

    assert h.last(run.session_id, E.RUN_CANCELED) == {
        "reason": "canceled by bob",
        "stopped_by": _stopped("operator", "bob"),
    }


def test_an_operator_ending_a_session_is_who_stopped_its_runs(h):
    session = h.session()
    pending = h.run(session)

    h.store.end_session(session.id, ended_by=h.bob)

    assert h.store.get_run(pending.id).status == RunStatus.CANCELED
    assert h.last(session.id, E.RUN_CANCELED)["stopped_by"] == _stopped("operator", "bob")


@pytest.mark.parametrize(
    ("status", "error", "rule"),
    [
        (RunStatus.TIMED_OUT, RunError(kind="timeout", message="Out of time."), "time_budget"),
        (RunStatus.FAILED, RunError(kind="domain_rejection", message="Too many."), "max_turns"),
    ],
    ids=["timed_out", "failed"],
)
def test_a_policy_rule_that_ends_a_run_stopped_it(h, status, error, rule):
    run = h.claimed()

    ended = h.store.finish_run(run_id=run.id, status=status, error=error, rule=rule)

    assert (ended.status, ended.error) == (status, error)
    assert h.last(run.session_id, f"run.{status}") == {
        "error": {"kind": error.kind, "message": error.message, "retryable": False},
        "stopped_by": _stopped("policy", rule=rule),
    }


@pytest.mark.parametrize("asked_to_stop", [False, True])
def test_a_run_that_failed_on_its_own_was_stopped_by_nobody(h, asked_to_stop):
    run = h.claimed()
    if asked_to_stop:
        # Alice asked it to stop, but the model failed before its loop saw that.
        h.store.request_cancel(run.id, "stopped by the user", by=h.alice)

    h.store.finish_run(run_id=run.id, status=RunStatus.FAILED)

    assert "stopped_by" not in h.last(run.session_id, E.RUN_FAILED)


@pytest.mark.parametrize("how", ["operator", "policy"])
def test_what_stopped_a_parent_stops_the_agents_it_called_and_their_calls(h, how):
    parent = h.claimed()
    child = h.child(parent)
    (call,) = [c for t in h.turns(parent.id) for c in t.tool_calls]
    if how == "operator":
        h.lose_worker(parent.id)
        h.store.request_cancel(parent.id, "canceled by bob", by=h.bob)
        expected, end = _stopped("operator", "bob"), E.RUN_CANCELED
    else:
        error = RunError(kind="timeout", message="Out of time.")
        h.store.finish_run(run_id=parent.id, status=RunStatus.TIMED_OUT, error=error, rule="time")
        expected, end = _stopped("policy", rule="time"), E.RUN_TIMED_OUT

    assert h.store.get_run(child.id).status == RunStatus.CANCELED
    assert h.last(parent.session_id, end)["stopped_by"] == expected
    stopped = [e for e in h.events(parent.session_id) if e["run"] == str(child.id)]
    assert stopped[-1]["type"] == E.RUN_CANCELED
    assert stopped[-1]["data"]["stopped_by"] == expected
    # The parent's call of the agent was cut short with it, and says by whom.
    canceled = h.last(parent.session_id, E.TOOL_CALL_CANCELED)
    assert (canceled["tool_call"], canceled["stopped_by"]) == (str(call.id), expected)


# A worker known lost


def test_an_interrupted_run_is_told_so_and_its_lease_taken_from_the_dead_worker(h):
    dead = "host-a:41:7:aa:1.2.3"
    run = h.run()
    assert h.store.claim_run(run.id, owner=dead, lease_seconds=LEASE) is not None
    assert h.store.held_runs(host="host-a") == [(run.id, dead)]
    logged = len(h.events(run.session_id))

    told = h.store.interrupt_run(run.id, owner=dead, cause="process_ended")

    assert told is not None
    assert told.status == RunStatus.RUNNING
    new = h.events(run.session_id)[logged:]
    assert [(e["type"], e["run"]) for e in new] == [(E.RUN_INTERRUPTED, str(run.id))]
    assert new[0]["data"] == {
        "cause": "process_ended",
        "reason": "the worker's process ended",
        "worker": dead,
    }
    assert h.store.renew_lease(run.id, owner=dead, lease_seconds=LEASE) is False
    # Told once, and no longer among the runs a live worker may hold.
    assert h.store.interrupt_run(run.id, owner=dead, cause="process_ended") is None
    assert h.store.held_runs(host="host-a") == []
    # Another worker takes it over at once, as from any lost worker.
    assert h.store.claim_run(run.id, owner="w2", lease_seconds=LEASE) is not None
    assert h.types(run.session_id)[logged:] == [E.RUN_INTERRUPTED, E.RUN_RESUMED]
    assert h.last(run.session_id, E.RUN_RESUMED) == {
        "reason": "worker_lost",
        "previous_worker": dead,
        "worker": "w2",
    }


@pytest.mark.parametrize("state", ["held by another", "completed", "waiting"])
def test_a_run_its_worker_no_longer_holds_is_not_interrupted(h, state):
    if state == "waiting":
        run, _ = h.waiting()
    else:
        run = h.claimed()
        if state == "completed":
            h.store.finish_run(run_id=run.id, status=RunStatus.COMPLETED)
    logged = h.events(run.session_id)

    owner = "w2" if state == "held by another" else "w1"
    assert h.store.interrupt_run(run.id, owner=owner, cause="process_ended") is None
    assert h.events(run.session_id) == logged


def test_taking_over_from_an_expired_lease_tells_the_run_interrupted_then_resumed(h):
    run = h.claimed()
    h.lose_worker(run.id)

    assert h.store.claim_run(run.id, owner="w2", lease_seconds=LEASE) is not None

    assert h.types(run.session_id)[-2:] == [E.RUN_INTERRUPTED, E.RUN_RESUMED]
    assert h.last(run.session_id, E.RUN_INTERRUPTED) == {
        "cause": "lease_expired",
        "reason": "its lease expired",
        "worker": "w1",
    }


def test_the_runs_held_on_a_host_are_listed_with_their_owners(h):
    here = h.run()
    assert h.store.claim_run(here.id, owner="this-host:41:7:aa:1.2.3", lease_seconds=LEASE)
    other = h.run()
    assert h.store.claim_run(other.id, owner="this-host-2:41:7:aa:1.2.3", lease_seconds=LEASE)
    waiting, _ = h.waiting()

    assert h.store.held_runs(host="this-host") == [(here.id, "this-host:41:7:aa:1.2.3")]
    assert h.store.held_runs(host="nowhere") == []
    assert waiting.id not in [run_id for run_id, _ in h.store.held_runs(host="this-host")]


def test_a_turn_lost_with_its_worker_is_no_message_and_is_seen_as_crashed(h):
    run = h.claimed()
    turn = h.turn(run.id)
    logged = len(h.events(run.session_id))

    h.store.complete_turn(
        turn_id=turn,
        reply=ModelReply(text="Once upon", usage=Usage(9, 2)),
        latency_ms=0,
        interruption="crashed",
        usage_estimated=True,
    )

    types = h.types(run.session_id)[logged:]
    assert types == [E.TURN_COMPLETED, E.USAGE]
    (state,) = h.turns(run.id)
    assert (state.ended, state.interruption, state.response_text) == (True, "crashed", "Once upon")
    assert h.store.get_run(run.id).usage.input_tokens == 9


# Runs called as tools


def test_the_run_a_tool_call_started_is_found_again(h):
    parent = h.claimed()
    child = h.child(parent)
    (call,) = [c for t in h.turns(parent.id) for c in t.tool_calls]
    other = h.store.start_tool_call(
        turn_id=h.turn(parent.id, index=1),
        index=0,
        request=ToolCallRequest(id="c2", name="echo", arguments={}),
    )

    found = h.store.tool_call_child(call.id)

    assert found is not None
    assert (found.id, found.parent_run_id) == (child.id, parent.id)
    assert h.store.tool_call_child(other) is None


def test_a_child_without_a_worker_is_handed_out_only_when_its_parent_does_not_run(h):
    parent = h.claimed()
    child = h.child(parent)
    assert h.store.claim_run(child.id, owner="w1", lease_seconds=LEASE)
    h.lose_worker(child.id)
    h.age(child.id, 120)
    # Its parent runs (its worker alive): the parent takes the child up itself.
    assert child.id not in h.store.expired_runs()

    (call,) = [c for t in h.turns(parent.id) for c in t.tool_calls]
    h.store.await_input(
        run_id=parent.id, kind="delegated", tool_call_id=call.id, child_run_id=child.id
    )
    # Now the parent waits for it: nothing executes the child but the reaper's hand-off.
    assert h.store.expired_runs() == [child.id]
