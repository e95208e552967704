"""The turn loop's features through ``rt`` and the database: what depends on the
runtime and the ORM store together. An agent calling another agent (its memory
written on the child run's behalf), label rules from the settings, a parent that
waits while its child waits for a person (the runtime hands it on once the child
ends), a cancel from another thread while a tool blocks (PostgreSQL), and the
reaper finding runs whose worker died.

The loop's own behaviour (caps, cancel, tool failures, resuming a run, streaming,
usage) is tested without a database in ``tests/runtime_core``. Test agents and
their models and tools live in ``tests.runtime_core.engine_agents``; each test that
uses them gets them registered for itself (``engine``) and removed afterwards.
"""

from __future__ import annotations

import datetime as dt
import json
from uuid import UUID

import pytest
from django.utils import timezone

from goaai.runtime import IllegalTransition, rt
from goaai.runtime.agents import ASSISTANT, CONCIERGE, AgentRegistry
from goaai.runtime.tools import TOOLSETS
from goaai.runtime.types import Message, ModelReply, ToolCallRequest, ToolOutcome
from goaai.runtime.vocabulary import EventType, RunStatus, ToolCallStatus
from memory_app.models import MemoryEntry
from runs_app.models import Run, ToolCall
from sessions_app.models import RunEvent
from tests.runtime_core import engine_agents
from tests.runtime_core.engine_agents import ENGINE_AGENTS, PROBE, TURN_USAGE

E = EventType


@pytest.fixture
def engine(inline_runtime, monkeypatch):
    """The inline runtime knowing the shipped agents and the test agents."""
    for name, toolset in engine_agents.engine_toolsets().items():
        monkeypatch.setitem(TOOLSETS, name, toolset)
    PROBE.reset()
    rt.configure(agents=AgentRegistry([ASSISTANT, CONCIERGE, *ENGINE_AGENTS]))
    yield rt
    # Nothing a test started may stay blocked after it.
    PROBE.release.set()


@pytest.fixture
def session(owner):
    return rt.create_session(owner=owner, agent="assistant")


def _event_types(run_id: UUID) -> list[str]:
    return list(
        RunEvent.objects.filter(run_id=run_id).order_by("seq").values_list("type", flat=True)
    )


def _events(run_id: UUID, type: str) -> list[dict]:
    return list(
        RunEvent.objects.filter(run_id=run_id, type=type)
        .order_by("seq")
        .values_list("data", flat=True)
    )


def _calls(run_id: UUID) -> list[ToolCall]:
    return list(ToolCall.objects.filter(run_id=run_id).order_by("turn__index", "index"))


# Agents calling agents


@pytest.mark.django_db(transaction=True)
def test_the_concierge_hands_the_request_to_the_assistant_as_a_child_run(inline_runtime, owner):
    session = rt.create_session(owner=owner, agent="concierge")

    info = rt.run("concierge", "remember my pet is a cat", session=session.id)

    assistant_said = "Got it. I'll remember in this conversation that your pet is a cat."
    assert (info.status, info.output) == (
        RunStatus.COMPLETED,
        f"The assistant agent says: {assistant_said}",
    )
    parent = Run.objects.get(pk=info.id)
    (ask,) = _calls(parent.id)
    assert (ask.name, ask.arguments, ask.status) == (
        "ask_assistant",
        {"prompt": "remember my pet is a cat"},
        ToolCallStatus.SUCCEEDED,
    )
    child = Run.objects.get(parent_run=parent)
    assert (child.agent, child.session_id, child.parent_tool_call_id) == (
        "assistant",
        session.id,
        ask.id,
    )
    assert (child.status, child.input, child.output) == (
        RunStatus.COMPLETED,
        "remember my pet is a cat",
        assistant_said,
    )
    assert ask.result == {"agent": "assistant", "run": str(child.id), "answer": assistant_said}
    (store,) = _calls(child.id)
    assert (store.name, store.status, store.arguments) == (
        "memory_store",
        ToolCallStatus.SUCCEEDED,
        {"key": "pet", "value": "a cat", "scope": "session"},
    )
    entry = MemoryEntry.objects.get()
    assert (entry.key, entry.value, entry.session_id) == ("pet", "a cat", session.id)
    assert (entry.written_by_run_id, entry.written_by_tool_call_id) == (child.id, store.id)
    # The parent's log links the child while the ask_assistant call is running.
    assert _events(parent.id, E.RUN_CHILD_LINKED) == [
        {"child_run": str(child.id), "parent_tool_call": str(ask.id)}
    ]
    parent_events = _event_types(parent.id)
    started = parent_events.index(E.TOOL_CALL_STARTED)
    assert parent_events[started + 1 : started + 3] == [E.RUN_CHILD_LINKED, E.TOOL_CALL_SUCCEEDED]
    # The child ran (and ended) between the parent's call starting and succeeding.
    seq = dict(RunEvent.objects.filter(run=child).values_list("type", "seq"))
    linked, succeeded = (
        RunEvent.objects.get(run=parent, type=t).seq
        for t in (E.RUN_CHILD_LINKED, E.TOOL_CALL_SUCCEEDED)
    )
    assert linked < seq[E.RUN_STARTED] < seq[E.RUN_COMPLETED] < succeeded


# Label rules


@pytest.mark.django_db(transaction=True)
def test_a_free_tier_run_gets_three_tool_calls_and_says_why(engine, session):
    info = rt.run("uncapped", "keep going", session=session.id, labels={"tier": "free"})

    run = Run.objects.get(pk=info.id)
    assert run.labels == {"tier": "free"}
    assert run.policy["max_tool_calls"] == 3
    assert "http" in run.policy["blocked_toolsets"]
    assert run.policy["max_turns"] == 50  # what the rule does not mention stays the agent's
    decisions = _events(info.id, E.POLICY_DECISION)
    assert decisions[0] == {
        "rule": "free_tier",
        "verdict": "tightened",
        "reason": "labels tier=free: max_tool_calls=3; blocked_toolsets=http",
    }
    # The rule fired when the run was created, before it started.
    assert _event_types(info.id)[:3] == [E.RUN_CREATED, E.POLICY_DECISION, E.RUN_STARTED]
    # And the loop held the run to it.
    assert (info.status, info.error.message) == (
        RunStatus.FAILED,
        "The run used its 3 tool calls.",
    )
    assert len(_calls(info.id)) == 3
    assert decisions[1]["rule"] == "max_tool_calls"


@pytest.mark.django_db(transaction=True)
def test_a_run_without_matching_labels_keeps_the_agents_policy(engine, session):
    info = rt.run("assistant", "echo hi", session=session.id, labels={"tier": "pro"})

    run = Run.objects.get(pk=info.id)
    assert run.policy["max_tool_calls"] == ASSISTANT.policy.max_tool_calls
    assert run.policy["approval_required"] == []
    assert _events(info.id, E.POLICY_DECISION) == []


@pytest.mark.django_db(transaction=True)
def test_a_review_required_run_waits_for_approval_of_every_tool(inline_runtime, owner, session):
    waiting = rt.run(
        "assistant", "calculate 1+1", session=session.id, labels={"review": "required"}
    )

    assert waiting.status == RunStatus.AWAITING_INPUT
    run = Run.objects.get(pk=waiting.id)
    assert run.policy["approval_required"] == ["*"]
    assert _events(waiting.id, E.POLICY_DECISION)[0]["rule"] == "review_required"
    (call,) = _calls(waiting.id)
    assert (call.name, call.status, call.requires_approval, call.attempt) == (
        "calculator",
        ToolCallStatus.SCHEDULED,
        True,
        0,
    )
    assert run.awaiting == {"kind": "approval", "tool_call": str(call.id)}

    rt.respond(waiting.id, tool_call=call.id, decision="approve", user=owner)
    done = rt.wait(waiting.id, timeout=30)

    assert (done.status, done.output) == (RunStatus.COMPLETED, "1+1 = 2")
    call.refresh_from_db()
    assert (call.status, call.decision, call.decided_by_id, call.result) == (
        ToolCallStatus.SUCCEEDED,
        "approved",
        owner.pk,
        {"expression": "1+1", "value": 2},
    )
    types = _event_types(waiting.id)
    assert types.index(E.TOOL_CALL_APPROVAL_REQUESTED) < types.index(E.RUN_AWAITING_INPUT)
    assert types.index(E.TOOL_CALL_DECIDED) < types.index(E.TOOL_CALL_STARTED)


def _concierge_waiting_for_its_child(owner) -> tuple[UUID, Run]:
    """A concierge run under review=required, its ask_assistant call approved, and
    the assistant it called now waiting for approval of its own memory_store."""
    session = rt.create_session(owner=owner, agent="concierge")
    waiting = rt.run(
        "concierge", "remember my pet is a cat", session=session.id, labels={"review": "required"}
    )
    assert waiting.status == RunStatus.AWAITING_INPUT  # ask_assistant itself needs approval
    rt.respond(waiting.id, decision="approve", user=owner)
    child = Run.objects.get(parent_run_id=waiting.id)
    return waiting.id, child


@pytest.mark.django_db(transaction=True)
def test_a_parent_waits_while_the_agent_it_called_waits_for_approval(inline_runtime, owner):
    """Labels pass from a run to its child runs, so under review=required the
    assistant's memory_store waits for approval too; the concierge waits with it,
    and goes on with the assistant's answer once a person has approved."""
    parent_id, child = _concierge_waiting_for_its_child(owner)

    parent = rt.wait(parent_id, timeout=30)

    assert child.labels == {"review": "required"}
    assert child.policy["approval_required"] == ["*"]
    assert child.status == RunStatus.AWAITING_INPUT
    (store_call,) = _calls(child.id)
    assert (store_call.name, store_call.status) == ("memory_store", ToolCallStatus.SCHEDULED)
    assert child.awaiting == {"kind": "approval", "tool_call": str(store_call.id)}
    assert parent.status == RunStatus.AWAITING_INPUT
    (ask,) = _calls(parent_id)
    assert ask.status == ToolCallStatus.RUNNING
    assert Run.objects.get(pk=parent_id).awaiting == {
        "kind": "delegated",
        "tool_call": str(ask.id),
        "child_run": str(child.id),
    }
    # The person answers the run that asks, not its parent.
    with pytest.raises(IllegalTransition):
        rt.respond(parent_id, decision="approve", user=owner)
    assert not MemoryEntry.objects.exists()

    rt.respond(child.id, decision="approve", user=owner)
    done = rt.wait(parent_id, timeout=30)

    said = "Got it. I'll remember in this conversation that your pet is a cat."
    assert rt.get_run(child.id).status == RunStatus.COMPLETED
    assert (done.status, done.output) == (
        RunStatus.COMPLETED,
        f"The assistant agent says: {said}",
    )
    ask.refresh_from_db()
    assert (ask.status, ask.result) == (
        ToolCallStatus.SUCCEEDED,
        {"agent": "assistant", "run": str(child.id), "answer": said},
    )
    assert MemoryEntry.objects.get().written_by_run_id == child.id
    resumed = _events(parent_id, E.RUN_RESUMED)
    assert resumed[-1]["answered"] == "delegated"
    assert resumed[-1]["child_run"] == str(child.id)


# Cancel from another thread, while a tool blocks


def _assert_canceled_after_the_tool(run_id: UUID) -> None:
    run = Run.objects.get(pk=run_id)
    assert (run.status, run.cancel_reason, run.output) == (
        RunStatus.CANCELED,
        "user_requested",
        "",
    )
    assert run.ended_at is not None
    # The tool was let finish; no turn began after the cancel.
    (call,) = _calls(run_id)
    assert (call.name, call.status) == ("blocking", ToolCallStatus.SUCCEEDED)
    assert run.turns.count() == 1
    assert PROBE.executed == ["blocking"]
    types = _event_types(run_id)
    assert types[-1] == E.RUN_CANCELED
    assert types.count(E.TURN_STARTED) == 1
    assert _events(run_id, E.RUN_CANCELED) == [
        {"reason": "user_requested", "stopped_by": {"kind": "user", "user": "alice", "rule": None}}
    ]


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_cancel_run_from_another_thread_while_a_tool_blocks(thread_runtime, monkeypatch, owner):
    for name, toolset in engine_agents.engine_toolsets().items():
        monkeypatch.setitem(TOOLSETS, name, toolset)
    PROBE.reset()
    rt.configure(agents=AgentRegistry([ASSISTANT, *ENGINE_AGENTS]))
    session = rt.create_session(owner=owner)
    try:
        handle = rt.start("blocker", "wait for me", session=session.id)
        assert PROBE.started.wait(10), "the tool never started"

        flagged = rt.cancel_run(handle.run_id, reason="user_requested", by=owner)
        # The loop is busy in the tool: the run is only flagged until its next step.
        assert flagged.status == RunStatus.RUNNING
        PROBE.release.set()
        info = handle.wait(timeout=30)
    finally:
        PROBE.release.set()

    assert info.status == RunStatus.CANCELED
    _assert_canceled_after_the_tool(handle.run_id)


# Runs whose worker died, found again


def _dead_worker_recorded(
    session_id: UUID, plan: str, steps: list[tuple[str, str]], *, answer: str = ""
) -> UUID:
    """Create a run of the planner and record, as its (now dead) worker would have,
    one turn per step: each turn asked for the planned call, and the call is left
    ``succeeded`` (its result recorded) or ``running`` (the worker died in it).
    With ``answer``, a last turn in which the model gave it as its final answer."""
    store = rt.store
    run = store.create_run(
        session_id=session_id,
        agent="planner",
        input=plan,
        labels={},
        metadata={},
        policy=engine_agents.PLANNER.policy.as_dict(),
    )
    assert store.claim_run(run.id, owner="dead-worker", lease_seconds=60) is not None
    messages = [Message(role="user", content=plan)]

    def turn(index: int, reply: ModelReply) -> UUID:
        turn_id = store.start_turn(
            run_id=run.id, index=index, model="plan", messages=[m.as_dict() for m in messages]
        )
        store.complete_turn(turn_id=turn_id, reply=reply, latency_ms=1)
        return turn_id

    for index, (tool, state) in enumerate(steps):
        label = f"step{index + 1}"
        request = ToolCallRequest(id=f"step-{index + 1}", name=tool, arguments={"label": label})
        turn_id = turn(index, ModelReply(tool_calls=(request,), usage=TURN_USAGE, model="plan"))
        call = store.schedule_tool_call(
            turn_id=turn_id, index=0, request=request, requires_approval=False
        )
        store.begin_tool_call(tool_call_id=call)
        if state == "succeeded":
            outcome = ToolOutcome(result={f"{tool}d": label})
            store.finish_tool_call(tool_call_id=call, outcome=outcome)
            messages += [
                Message(role="assistant", tool_calls=(request,)),
                Message(
                    role="tool",
                    content=json.dumps(outcome.for_model()),
                    tool_call_id=request.id,
                    name=tool,
                ),
            ]
    if answer:
        turn(len(steps), ModelReply(text=answer, usage=TURN_USAGE, model="plan"))
    return run.id


def _lose_the_worker(run_id: UUID) -> None:
    Run.objects.filter(pk=run_id).update(lease_expires_at=timezone.now() - dt.timedelta(seconds=5))


class _Recorder:
    def __init__(self) -> None:
        self.submitted: list[UUID] = []

    def submit(self, run_id: UUID) -> None:
        self.submitted.append(run_id)

    def wait(self, run_id: UUID, timeout: float) -> bool:
        return False


@pytest.mark.django_db(transaction=True)
def test_reap_hands_exactly_the_runs_without_a_live_worker_to_the_executor(engine, session):
    lost = _dead_worker_recorded(session.id, "note", [("note", "running")])
    # In a session of its own: a session executes one run at a time.
    elsewhere = rt.create_session(owner=session.owner_id, agent="assistant")
    held = _dead_worker_recorded(elsewhere.id, "note", [("note", "running")])
    _lose_the_worker(lost)
    recorder = _Recorder()
    rt.configure(executor=recorder)

    assert rt.reap() == 1

    assert recorder.submitted == [lost]
    held_run = Run.objects.get(pk=held)
    assert (held_run.status, held_run.lease_owner) == (RunStatus.RUNNING, "dead-worker")
