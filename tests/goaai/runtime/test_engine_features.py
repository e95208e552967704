"""The turn loop's features, through ``rt`` and the database: model self-correction,
agents calling agents, the policy caps, label rules, cancel, tool timeouts and
crashes, resuming a run whose worker died, and token usage.

Test agents and their models and tools live in ``engine_agents``; each test that
uses them gets them registered for itself (``engine``) and removed afterwards.
"""

from __future__ import annotations

import datetime as dt
import itertools
import json
from uuid import UUID

import pytest
from django.utils import timezone

from goaai.runtime import IllegalTransition, rt
from goaai.runtime.agents import ASSISTANT, CONCIERGE, Agent, AgentRegistry
from goaai.runtime.loop import MAX_DELEGATION_DEPTH
from goaai.runtime.tools import TOOLSETS
from goaai.runtime.types import Message, ModelReply, ToolCallRequest, ToolOutcome
from goaai.runtime.vocabulary import EventType, RunStatus, ToolCallStatus
from memory_app.models import MemoryEntry
from runs_app.models import Run, RunEvent, ToolCall
from tests.goaai.runtime import engine_agents
from tests.goaai.runtime.engine_agents import ENGINE_AGENTS, PROBE, TURN_USAGE

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


# The model corrects its own invalid call


@pytest.mark.django_db(transaction=True)
def test_invalid_arguments_are_corrected_by_the_model_on_the_next_turn(inline_runtime, session):
    info = rt.run("assistant", "sloppy calculate 2+2", session=session.id)

    assert (info.status, info.output) == (RunStatus.COMPLETED, "2+2 = 4")
    wrong, right = _calls(info.id)
    assert (wrong.name, wrong.arguments, wrong.status, wrong.error_kind) == (
        "calculator",
        {"expression_text": "2+2"},
        ToolCallStatus.FAILED,
        "invalid_call",
    )
    # The message tells the model which argument was wrong and which is missing.
    assert "expression_text" in wrong.error_message
    assert "expression: Field required" in wrong.error_message
    assert wrong.result is None
    assert (right.name, right.arguments, right.status, right.result) == (
        "calculator",
        {"expression": "2+2"},
        ToolCallStatus.SUCCEEDED,
        {"expression": "2+2", "value": 4},
    )
    run = Run.objects.get(pk=info.id)
    turns = list(run.turns.order_by("index"))
    assert [t.index for t in turns] == [0, 1, 2]
    assert (wrong.turn_id, right.turn_id) == (turns[0].id, turns[1].id)
    # The second turn carried the error back to the model.
    assert turns[1].request_messages[-1]["role"] == "tool"
    assert "invalid_call" in turns[1].request_messages[-1]["content"]
    assert _event_types(info.id).count(E.TOOL_CALL_FAILED) == 1
    assert _event_types(info.id)[-1] == E.RUN_COMPLETED


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


@pytest.mark.django_db(transaction=True)
def test_an_agent_that_delegates_to_itself_stops_at_the_depth_bound(inline_runtime, owner):
    # An "assistant" whose only tool is asking itself: the scripted model delegates
    # everything it cannot do to ask_assistant, so it would recurse for ever.
    narcissist = Agent(
        id="assistant", description="Asks itself.", model="scripted", delegates=("assistant",)
    )
    rt.configure(agents=AgentRegistry([narcissist]))
    session = rt.create_session(owner=owner, agent="assistant")

    info = rt.run("assistant", "remember my pet is a cat", session=session.id, timeout=30)

    bound = f"Agents may call agents at most {MAX_DELEGATION_DEPTH} levels deep."
    assert info.status == RunStatus.COMPLETED
    assert info.output.endswith(f"I couldn't do that: {bound}")
    runs = list(Run.objects.filter(session_id=session.id).order_by("created_at"))
    assert len(runs) == MAX_DELEGATION_DEPTH + 1
    # Each run is the child of the one before, linked by its ask_assistant call.
    for parent, child in itertools.pairwise(runs):
        assert child.parent_run_id == parent.id
        assert child.parent_tool_call.run_id == parent.id
    assert all(run.status == RunStatus.COMPLETED for run in runs)
    deepest = runs[-1]
    (refused,) = _calls(deepest.id)
    assert (refused.name, refused.status, refused.error_kind, refused.error_message) == (
        "ask_assistant",
        ToolCallStatus.FAILED,
        "domain_rejection",
        bound,
    )
    assert not Run.objects.filter(parent_run=deepest).exists()


# The policy's caps


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    ("agent", "status", "kind", "message", "rule", "reason", "calls"),
    [
        (
            "turn_capped",
            RunStatus.FAILED,
            "domain_rejection",
            "The agent did not answer within 3 turns.",
            "max_turns",
            "Limit of 3 turns reached.",
            ["tick"] * 3,
        ),
        (
            "call_capped",
            RunStatus.FAILED,
            "domain_rejection",
            "The run used its 2 tool calls.",
            "max_tool_calls",
            "Limit of 2 tool calls reached.",
            ["tick"] * 2,
        ),
        (
            "failure_capped",
            RunStatus.FAILED,
            "domain_rejection",
            "2 tool calls failed in a row; the last: Not today.",
            "max_consecutive_tool_failures",
            "2 consecutive failed tool calls.",
            ["refuse"] * 2,
        ),
        (
            "time_capped",
            RunStatus.TIMED_OUT,
            "timeout",
            "The run exceeded its time budget of 1s.",
            "time_budget_seconds",
            "Time budget of 1s spent.",
            ["dawdle"],
        ),
    ],
    ids=["max_turns", "max_tool_calls", "max_consecutive_tool_failures", "time_budget"],
)
def test_a_policy_cap_ends_the_run_and_says_which_rule_did(
    engine, session, agent, status, kind, message, rule, reason, calls
):
    info = rt.run(agent, "keep going", session=session.id)

    assert (info.status, info.output) == (status, "")
    assert (info.error.kind, info.error.message) == (kind, message)
    run = Run.objects.get(pk=info.id)
    assert (run.status, run.error_kind, run.error_message) == (status, kind, message)
    assert [c.name for c in _calls(info.id)] == calls
    # Every tool call the cap let through really ran; none ran after it.
    assert PROBE.executed == calls
    assert all(c.status != ToolCallStatus.SCHEDULED for c in _calls(info.id))
    assert _events(info.id, E.POLICY_DECISION) == [
        {"rule": rule, "verdict": "stop", "reason": reason}
    ]
    types = _event_types(info.id)
    assert types[-2:] == [E.POLICY_DECISION, f"run.{status}"]


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


@pytest.mark.django_db(transaction=True)
def test_canceling_a_parent_stops_the_agent_it_waits_for(inline_runtime, owner):
    parent_id, child = _concierge_waiting_for_its_child(owner)

    canceled = rt.cancel_run(parent_id, reason="user_requested")

    assert canceled.status == RunStatus.CANCELED
    child.refresh_from_db()
    assert child.status == RunStatus.CANCELED
    assert child.cancel_reason == f"its parent run {parent_id} ended canceled"
    assert not MemoryEntry.objects.exists()


# Cancel while a tool runs


@pytest.mark.django_db(transaction=True)
def test_a_cancel_requested_while_a_tool_runs_stops_the_run_after_it(engine, session):
    # The cancel arrives (here from the tool's own thread) while the loop waits for
    # the tool; the loop must see it at its next step and begin no further turn.
    flagged: list[str] = []

    def cancel_then_release() -> None:
        run = Run.objects.get(session_id=session.id)
        flagged.append(rt.cancel_run(run.id, reason="user_requested").status)
        PROBE.release.set()

    PROBE.on_start = cancel_then_release

    info = rt.run("blocker", "wait for me", session=session.id)

    # While the tool ran, the run was only flagged: the loop cancels it.
    assert flagged == [RunStatus.RUNNING]
    assert info.status == RunStatus.CANCELED
    _assert_canceled_after_the_tool(info.id)


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
    assert _events(run_id, E.RUN_CANCELED) == [{"reason": "user_requested"}]


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

        flagged = rt.cancel_run(handle.run_id, reason="user_requested")
        # The loop is busy in the tool: the run is only flagged until its next step.
        assert flagged.status == RunStatus.RUNNING
        PROBE.release.set()
        info = handle.wait(timeout=30)
    finally:
        PROBE.release.set()

    assert info.status == RunStatus.CANCELED
    _assert_canceled_after_the_tool(handle.run_id)


# Tools that time out or crash


@pytest.mark.django_db(transaction=True)
def test_a_tool_past_its_time_limit_fails_as_timeout_and_the_run_goes_on(engine, session):
    info = rt.run("slowpoke", "hurry", session=session.id)

    assert (info.status, info.output) == (
        RunStatus.COMPLETED,
        "slow failed (timeout): slow did not finish within 0.2s.",
    )
    (call,) = _calls(info.id)
    assert (call.status, call.error_kind, call.error_message, call.result) == (
        ToolCallStatus.FAILED,
        "timeout",
        "slow did not finish within 0.2s.",
        None,
    )
    assert call.duration_ms < 1500
    assert Run.objects.get(pk=info.id).turns.count() == 2


@pytest.mark.django_db(transaction=True)
def test_a_tool_that_raises_fails_as_internal_and_the_run_goes_on(engine, session):
    info = rt.run("breaker", "try it", session=session.id)

    message = "broken failed: RuntimeError: the flux capacitor is empty"
    assert (info.status, info.output) == (
        RunStatus.COMPLETED,
        f"broken failed (internal): {message}",
    )
    (call,) = _calls(info.id)
    assert (call.status, call.error_kind, call.error_message) == (
        ToolCallStatus.FAILED,
        "internal",
        message,
    )
    assert _events(info.id, E.TOOL_CALL_FAILED)[0]["error"] == {
        "kind": "internal",
        "message": message,
    }


# Resuming a run whose worker died


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


@pytest.mark.django_db(transaction=True)
def test_a_resumed_run_does_not_repeat_a_call_of_unknown_effect(engine, session):
    run_id = _dead_worker_recorded(
        session.id, "note note note", [("note", "succeeded"), ("note", "running")]
    )
    _lose_the_worker(run_id)

    info = rt.execute(run_id)

    assert info is not None
    assert info.status == RunStatus.COMPLETED
    not_retried = (
        "The worker executing note stopped during the call; it was not retried because "
        "the tool is not idempotent. Its effect is unknown."
    )
    assert info.output == (f"done: note ok; note failed (internal): {not_retried}; note ok")
    # Only the step that had never begun really ran now.
    assert PROBE.executed == ["note:step3"]
    first, interrupted, fresh = _calls(run_id)
    assert (first.status, first.attempt, first.result) == (
        ToolCallStatus.SUCCEEDED,
        1,
        {"noted": "step1"},
    )
    assert (interrupted.status, interrupted.attempt, interrupted.error_kind) == (
        ToolCallStatus.FAILED,
        1,
        "internal",
    )
    assert "not retried" in interrupted.error_message
    assert (fresh.status, fresh.attempt, fresh.arguments) == (
        ToolCallStatus.SUCCEEDED,
        1,
        {"label": "step3"},
    )
    run = Run.objects.get(pk=run_id)
    assert [t.index for t in run.turns.order_by("index")] == [0, 1, 2, 3]
    resumed = _events(run_id, E.RUN_RESUMED)
    assert len(resumed) == 1
    assert resumed[0]["reason"] == "worker_lost"
    assert resumed[0]["previous_worker"] == "dead-worker"


@pytest.mark.django_db(transaction=True)
def test_a_resumed_run_executes_an_interrupted_idempotent_call_again(engine, session):
    run_id = _dead_worker_recorded(
        session.id, "note peek", [("note", "succeeded"), ("peek", "running")]
    )
    _lose_the_worker(run_id)

    info = rt.execute(run_id)

    assert (info.status, info.output) == (RunStatus.COMPLETED, "done: note ok; peek ok")
    assert PROBE.executed == ["peek:step2"]
    first, again = _calls(run_id)
    assert (first.status, first.attempt) == (ToolCallStatus.SUCCEEDED, 1)
    assert (again.status, again.attempt, again.result) == (
        ToolCallStatus.SUCCEEDED,
        2,
        {"peeked": "step2"},
    )
    assert _events(run_id, E.RUN_RESUMED)[0]["reason"] == "worker_lost"
    assert _event_types(run_id).count(E.RUN_STARTED) == 1


@pytest.mark.django_db(transaction=True)
def test_a_run_held_by_a_live_worker_is_not_executed_by_another(engine, session):
    run_id = _dead_worker_recorded(session.id, "note note", [("note", "succeeded")])

    assert rt.execute(run_id) is None

    assert Run.objects.get(pk=run_id).status == RunStatus.RUNNING
    assert PROBE.executed == []
    assert _events(run_id, E.RUN_RESUMED) == []


@pytest.mark.django_db(transaction=True)
def test_a_run_whose_answer_was_recorded_before_its_worker_died_ends_with_it(engine, session):
    """The worker recorded the model's final answer (the turn is complete) but died
    before it marked the run completed. Taking the run over must finish it with
    that answer; asking the model again would pay for (and may change) an answer
    the user was already streamed."""
    answer = "done: note ok"
    run_id = _dead_worker_recorded(session.id, "note", [("note", "succeeded")], answer=answer)
    _lose_the_worker(run_id)

    info = rt.execute(run_id)

    assert (info.status, info.output) == (RunStatus.COMPLETED, answer)
    run = Run.objects.get(pk=run_id)
    # No turn was added: the model was not asked again, and no tokens were spent.
    assert run.turns.count() == 2
    assert run.input_tokens == 2 * TURN_USAGE.input_tokens
    assert PROBE.executed == []


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
    held = _dead_worker_recorded(session.id, "note", [("note", "running")])
    _lose_the_worker(lost)
    recorder = _Recorder()
    rt.configure(executor=recorder)

    assert rt.reap() == 1

    assert recorder.submitted == [lost]
    held_run = Run.objects.get(pk=held)
    assert (held_run.status, held_run.lease_owner) == (RunStatus.RUNNING, "dead-worker")


# Usage


@pytest.mark.django_db(transaction=True)
def test_token_usage_is_recorded_per_turn_and_summed_on_the_run(engine, session):
    info = rt.run("planner", "note peek", session=session.id)

    run = Run.objects.get(pk=info.id)
    turns = list(run.turns.order_by("index"))
    assert len(turns) == 3
    assert [(t.input_tokens, t.output_tokens) for t in turns] == [
        (TURN_USAGE.input_tokens, TURN_USAGE.output_tokens)
    ] * 3
    assert (run.input_tokens, run.output_tokens, run.total_tokens) == (33, 12, 45)
    assert (info.usage.input_tokens, info.usage.output_tokens) == (33, 12)
    assert [e["total_tokens"] for e in _events(info.id, E.USAGE)] == [15, 15, 15]
    assert _events(info.id, E.RUN_COMPLETED)[0]["usage"] == {
        "input_tokens": 33,
        "output_tokens": 12,
        "total_tokens": 45,
    }


@pytest.mark.django_db(transaction=True)
def test_a_cancel_while_the_model_streams_stops_the_answer_and_keeps_what_was_said(
    engine, session, monkeypatch
):
    # The story streams word by word; a cancel arrives after a few words. The loop
    # looks for it while the answer streams (not only between steps), so the answer
    # stops there: the turn keeps the words already said, and the run is canceled.
    monkeypatch.setattr("goaai.runtime.loop.CANCEL_CHECK_SECONDS", 0.0)
    monkeypatch.setattr("goaai.runtime.models.scripted.STORY_PACE", 0.0)
    words: list[str] = []

    def publish(context, turn_id, text: str) -> None:
        words.append(text)
        if len(words) == 5:
            rt.cancel_run(context.run_id, reason="user_requested")

    monkeypatch.setattr(rt.store, "publish_delta", publish)

    info = rt.run("assistant", "tell me a story", session=session.id)

    assert info.status == RunStatus.CANCELED
    run = Run.objects.get(pk=info.id)
    (turn,) = run.turns.all()
    assert turn.response_text == "".join(words)
    assert 5 <= len(words) < 20, "the answer went on after the cancel"
    assert run.output == ""
    types = _event_types(info.id)
    assert types[-2:] == [E.USAGE, E.RUN_CANCELED]
    assert _events(info.id, E.MESSAGE_COMPLETED) == [
        {"turn": str(turn.id), "role": "assistant", "text": "".join(words)}
    ]


@pytest.mark.django_db(transaction=True)
def test_the_story_streams_whole_when_nobody_stops_it(engine, session, monkeypatch):
    monkeypatch.setattr("goaai.runtime.models.scripted.STORY_PACE", 0.0)
    from goaai.runtime.models.scripted import STORY

    words: list[str] = []
    monkeypatch.setattr(rt.store, "publish_delta", lambda context, turn, text: words.append(text))

    info = rt.run("assistant", "tell me a story", session=session.id)

    assert info.status == RunStatus.COMPLETED
    assert info.output == STORY == "".join(words)
