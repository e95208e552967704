"""The turn loop's features on the in-memory store: model self-correction, approvals
and questions, agents calling agents, the policy caps, cancel, tool timeouts and
crashes, resuming a run whose worker died, streaming and token usage.

The test agents, their models and tools live in ``engine_agents``; the ``engine``
fixture registers their toolsets for one test at a time.
"""

from __future__ import annotations

import itertools
import json
from uuid import UUID

import pytest

from goaai.runtime.agents import Agent, AgentRegistry
from goaai.runtime.context import estimated_usage, tools_tokens
from goaai.runtime.errors import IllegalTransition
from goaai.runtime.loop import MAX_DELEGATION_DEPTH
from goaai.runtime.models import ToolSpec
from goaai.runtime.models.scripted import STORY
from goaai.runtime.types import Message, ModelReply, RunContext, ToolCallRequest, ToolOutcome
from goaai.runtime.vocabulary import EventType, RunStatus, ToolCallStatus
from tests.runtime_core.conftest import ALICE, BOB, LEASE_SECONDS, REVIEW_REQUIRED, Engine
from tests.runtime_core.engine_agents import PROBE, TURN_USAGE

E = EventType


# The model corrects its own invalid call


def test_invalid_arguments_are_corrected_by_the_model_on_the_next_turn(engine):
    info = engine.run("assistant", "sloppy calculate 2+2")

    assert (info.status, info.output) == (RunStatus.COMPLETED, "2+2 = 4")
    wrong, right = engine.calls(info.id)
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
    turns = engine.store.turns(info.id)
    assert [t.index for t in turns] == [0, 1, 2]
    assert (turns[0].tool_calls, turns[1].tool_calls) == ((wrong,), (right,))
    # The second turn carried the error back to the model.
    assert turns[1].request_messages[-1].role == "tool"
    assert "invalid_call" in turns[1].request_messages[-1].content
    assert engine.event_types(info.id).count(E.TOOL_CALL_FAILED) == 1
    assert engine.event_types(info.id)[-1] == E.RUN_COMPLETED


# Waiting for a person


def test_an_approved_call_runs_once_the_person_approves_and_the_run_goes_on(engine):
    session = engine.session()
    engine.store.store_memory(key="pet", value="a cat", scope="session", session_id=session.id)
    waiting = engine.run("assistant", "forget everything", session=session.id)
    assert waiting.status == RunStatus.AWAITING_INPUT
    (call,) = engine.calls(waiting.id)
    assert (call.name, call.status, call.requires_approval) == (
        "memory_forget_all",
        ToolCallStatus.SCHEDULED,
        True,
    )
    # Nothing is forgotten before a person says so.
    assert engine.store.memory_keys(scope="session", session_id=session.id) == ["pet"]

    engine.store.respond(
        waiting.id,
        tool_call_id=call.id,
        decision="approve",
        reason="",
        answer=None,
        decided_by_id=ALICE,
    )
    done = engine.execute(waiting.id)

    assert (done.status, done.output) == (
        RunStatus.COMPLETED,
        "Done. I've forgotten everything in this conversation: pet.",
    )
    (call,) = engine.calls(waiting.id)
    assert (call.status, call.decision, call.attempt, call.result) == (
        ToolCallStatus.SUCCEEDED,
        "approved",
        1,
        {"forgotten": ["pet"]},
    )
    assert engine.store.memory_keys(scope="session", session_id=session.id) == []
    (decided,) = engine.events(waiting.id, E.TOOL_CALL_DECIDED)
    assert (decided["decision"], decided["decided_by"], decided["decided_by_name"]) == (
        "approved",
        ALICE,
        "alice",
    )
    types = engine.event_types(waiting.id)
    assert types.index(E.RUN_AWAITING_INPUT) < types.index(E.TOOL_CALL_DECIDED)
    assert types.index(E.RUN_RESUMED) < types.index(E.TOOL_CALL_STARTED)
    assert types.count(E.RUN_STARTED) == 1


def test_a_denied_call_never_runs_and_the_model_is_told_why(engine):
    session = engine.session()
    engine.store.store_memory(key="pet", value="a cat", scope="session", session_id=session.id)
    waiting = engine.run("assistant", "forget everything", session=session.id)

    engine.store.respond(
        waiting.id,
        tool_call_id=None,
        decision="deny",
        reason="not now",
        answer=None,
        decided_by_id=BOB,
    )
    done = engine.execute(waiting.id)

    assert (done.status, done.output) == (
        RunStatus.COMPLETED,
        "I couldn't do that: A person denied this call: not now",
    )
    (call,) = engine.calls(waiting.id)
    assert (call.status, call.decision, call.attempt, call.error_message) == (
        ToolCallStatus.DENIED,
        "denied",
        0,
        "Denied: not now",
    )
    assert engine.store.memory_keys(scope="session", session_id=session.id) == ["pet"]
    assert E.TOOL_CALL_STARTED not in engine.event_types(waiting.id)


def test_a_question_waits_for_the_answer_and_the_model_uses_it(engine):
    waiting = engine.run("assistant", "ask me for my name")

    assert waiting.status == RunStatus.AWAITING_INPUT
    (call,) = engine.calls(waiting.id)
    assert (call.name, call.status, call.arguments) == (
        "ask_user",
        ToolCallStatus.SCHEDULED,
        {"question": "What is your name?"},
    )
    assert engine.events(waiting.id, E.RUN_AWAITING_INPUT) == [
        {"kind": "question", "tool_call": str(call.id), "question": "What is your name?"}
    ]

    engine.store.respond(
        waiting.id, tool_call_id=call.id, decision="", reason="", answer="Ada", decided_by_id=ALICE
    )
    done = engine.execute(waiting.id)

    assert (done.status, done.output) == (RunStatus.COMPLETED, "Thanks! Your name is Ada.")
    (call,) = engine.calls(waiting.id)
    assert (call.status, call.result, call.decision, call.attempt) == (
        ToolCallStatus.SUCCEEDED,
        {"answer": "Ada"},
        "answered",
        1,
    )
    assert engine.events(waiting.id, E.RUN_RESUMED)[0]["answered"] == "question"


# Agents calling agents


def test_the_concierge_hands_the_request_to_the_assistant_as_a_child_run(engine):
    session = engine.session("concierge")
    earlier = engine.run("concierge", "what time is it?", session=session.id)
    assert earlier.status == RunStatus.COMPLETED

    info = engine.run("concierge", "remember my pet is a cat", session=session.id)

    assistant_said = "Got it. I'll remember in this conversation that your pet is a cat."
    assert (info.status, info.output) == (
        RunStatus.COMPLETED,
        f"The assistant agent says: {assistant_said}",
    )
    (ask,) = engine.calls(info.id)
    assert (ask.name, ask.arguments, ask.status) == (
        "ask_assistant",
        {"prompt": "remember my pet is a cat"},
        ToolCallStatus.SUCCEEDED,
    )
    (child,) = engine.store.child_runs(info.id)
    assert (child.agent, child.session_id, child.parent_run_id) == (
        "assistant",
        session.id,
        info.id,
    )
    assert (child.status, child.input, child.output) == (
        RunStatus.COMPLETED,
        "remember my pet is a cat",
        assistant_said,
    )
    assert ask.result == {"agent": "assistant", "run": str(child.id), "answer": assistant_said}
    (store_call,) = engine.calls(child.id)
    assert (store_call.name, store_call.status) == ("memory_store", ToolCallStatus.SUCCEEDED)
    entry = engine.store.get_memory(key="pet", scope="session", session_id=session.id)
    assert entry.value == "a cat"
    (stored,) = engine.events(child.id, E.MEMORY_STORED)
    assert stored["written_by"]["run_id"] == str(child.id)
    assert stored["written_by"]["tool_call_id"] == str(store_call.id)
    assert engine.events(info.id, E.RUN_CHILD_LINKED) == [
        {"child_run": str(child.id), "parent_tool_call": str(ask.id)}
    ]
    # The child ran, and ended, while the parent's ask_assistant call was running.
    log = engine.store.events(session.id)
    seq = {(e["run"], e["type"]): e["seq"] for e in log}
    parent, kid = str(info.id), str(child.id)
    assert (
        seq[(parent, E.TOOL_CALL_STARTED)]
        < seq[(parent, E.RUN_CHILD_LINKED)]
        < seq[(kid, E.RUN_STARTED)]
        < seq[(kid, E.RUN_COMPLETED)]
        < seq[(parent, E.TOOL_CALL_SUCCEEDED)]
    )
    # The parent continues the session's conversation (the earlier run in full: its
    # clock call and result, then its answer); its child starts afresh.
    parent_turn, child_turn = (engine.store.turns(run)[0] for run in (info.id, child.id))
    assert [m.role for m in parent_turn.request_messages] == [
        "system",
        "user",
        "assistant",
        "tool",
        "assistant",
        "user",
    ]
    assert [m.role for m in child_turn.request_messages] == ["system", "user"]


def test_an_agent_that_delegates_to_itself_stops_at_the_depth_bound(store, clock):
    # An "assistant" whose only tool is asking itself: the scripted model delegates
    # everything it cannot do to ask_assistant, so it would recurse for ever.
    narcissist = Agent(
        id="assistant", description="Asks itself.", model="scripted", delegates=("assistant",)
    )
    engine = Engine(store, clock, AgentRegistry([narcissist]))

    info = engine.run("assistant", "remember my pet is a cat")

    bound = f"Agents may call agents at most {MAX_DELEGATION_DEPTH} levels deep."
    assert info.status == RunStatus.COMPLETED
    assert info.output.endswith(f"I couldn't do that: {bound}")
    chain = [info]
    while children := store.child_runs(chain[-1].id):
        (child,) = children
        chain.append(child)
    assert len(chain) == MAX_DELEGATION_DEPTH + 1
    for parent, child in itertools.pairwise(chain):
        assert child.parent_run_id == parent.id
    assert all(run.status == RunStatus.COMPLETED for run in chain)
    (refused,) = engine.calls(chain[-1].id)
    assert (refused.name, refused.status, refused.error_kind, refused.error_message) == (
        "ask_assistant",
        ToolCallStatus.FAILED,
        "domain_rejection",
        bound,
    )


def _concierge_waiting_for_its_child(engine: Engine) -> tuple[UUID, UUID]:
    """A concierge run under review=required, its ask_assistant call approved, and
    the assistant it called now waiting for approval of its own memory_store (labels
    pass from a run to its child runs, and so does the rule they match)."""
    engine.label_rules = [REVIEW_REQUIRED]
    session = engine.session("concierge")
    waiting = engine.run(
        "concierge", "remember my pet is a cat", session=session.id, labels={"review": "required"}
    )
    assert waiting.status == RunStatus.AWAITING_INPUT  # ask_assistant itself needs approval
    assert engine.answer(waiting.id, decision="approve").status == RunStatus.AWAITING_INPUT
    (child,) = engine.store.child_runs(waiting.id)
    return waiting.id, child.id


def test_a_parent_waits_while_the_agent_it_called_waits_for_approval(engine):
    parent_id, child_id = _concierge_waiting_for_its_child(engine)

    child = engine.store.get_run(child_id)
    assert (child.status, child.labels) == (RunStatus.AWAITING_INPUT, {"review": "required"})
    (policy_rule,) = engine.events(child_id, E.POLICY_DECISION)
    assert (policy_rule["rule"], policy_rule["verdict"]) == ("review_required", "tightened")
    (store_call,) = engine.calls(child_id)
    assert (store_call.name, store_call.status) == ("memory_store", ToolCallStatus.SCHEDULED)
    (ask,) = engine.calls(parent_id)
    assert ask.status == ToolCallStatus.RUNNING
    assert engine.events(parent_id, E.RUN_AWAITING_INPUT)[-1] == {
        "kind": "delegated",
        "tool_call": str(ask.id),
        "child_run": str(child_id),
    }
    # The person answers the run that asks, not its parent.
    with pytest.raises(IllegalTransition):
        engine.store.respond(
            parent_id,
            tool_call_id=None,
            decision="approve",
            reason="",
            answer=None,
            decided_by_id=ALICE,
        )
    assert engine.store.memory_keys(scope="session", session_id=child.session_id) == []

    # Approving the child lets it finish; its answer then settles the parent's call.
    assert engine.answer(child_id, decision="approve").status == RunStatus.COMPLETED
    assert engine.store.settle_child(child_id) == parent_id
    done = engine.execute(parent_id)

    said = "Got it. I'll remember in this conversation that your pet is a cat."
    assert (done.status, done.output) == (RunStatus.COMPLETED, f"The assistant agent says: {said}")
    (ask,) = engine.calls(parent_id)
    assert (ask.status, ask.result) == (
        ToolCallStatus.SUCCEEDED,
        {"agent": "assistant", "run": str(child_id), "answer": said},
    )
    assert engine.store.memory_keys(scope="session", session_id=child.session_id) == ["pet"]
    resumed = engine.events(parent_id, E.RUN_RESUMED)[-1]
    assert (resumed["answered"], resumed["child_run"]) == ("delegated", str(child_id))


def test_canceling_a_parent_stops_the_agent_it_waits_for(engine):
    parent_id, child_id = _concierge_waiting_for_its_child(engine)

    canceled = engine.store.request_cancel(parent_id, "user_requested", by=ALICE)

    assert canceled.status == RunStatus.CANCELED
    child = engine.store.get_run(child_id)
    assert child.status == RunStatus.CANCELED
    # Whoever stopped the parent stopped the agent it asked too.
    by_alice = {"kind": "user", "user": "alice", "rule": None}
    assert engine.events(parent_id, E.RUN_CANCELED)[0]["stopped_by"] == by_alice
    assert engine.events(child_id, E.RUN_CANCELED) == [
        {"reason": f"its parent run {parent_id} ended canceled", "stopped_by": by_alice}
    ]
    (ask,) = engine.calls(parent_id)
    assert ask.status == ToolCallStatus.CANCELED
    assert engine.store.memory_keys(scope="session", session_id=child.session_id) == []
    # A child that ended this way has nobody waiting for it any more.
    assert engine.store.settle_child(child_id) is None


# The policy's caps


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
    engine, agent, status, kind, message, rule, reason, calls
):
    info = engine.run(agent, "keep going")

    assert (info.status, info.output) == (status, "")
    assert (info.error.kind, info.error.message) == (kind, message)
    assert engine.store.get_run(info.id).error == info.error
    assert [c.name for c in engine.calls(info.id)] == calls
    # Every tool call the cap let through really ran; none ran after it.
    assert PROBE.executed == calls
    assert all(c.status != ToolCallStatus.SCHEDULED for c in engine.calls(info.id))
    assert engine.events(info.id, E.POLICY_DECISION) == [
        {"rule": rule, "verdict": "stop", "reason": reason}
    ]
    assert engine.event_types(info.id)[-2:] == [E.POLICY_DECISION, f"run.{status}"]
    # The run's end tells who stopped it: the policy, by that rule.
    (ended,) = engine.events(info.id, f"run.{status}")
    assert ended["stopped_by"] == {"kind": "policy", "user": None, "rule": rule}


# Cancel


def test_a_cancel_requested_while_a_tool_runs_stops_the_run_after_it(engine):
    # The cancel arrives (here from the tool's own thread) while the loop waits for
    # the tool; the loop must see it at its next step and begin no further turn.
    run = engine.create("blocker", "wait for me")
    flagged: list[str] = []

    def cancel_then_release() -> None:
        # Bob is not the run's user: his stop is an operator's.
        flagged.append(engine.store.request_cancel(run.id, "user_requested", by=BOB).status)
        PROBE.release.set()

    PROBE.on_start = cancel_then_release

    info = engine.execute(run.id)

    # While the tool ran, the run was only flagged: the loop cancels it.
    assert flagged == [RunStatus.RUNNING]
    assert (info.status, info.output) == (RunStatus.CANCELED, "")
    assert info.ended_at is not None
    # The tool was let finish; no turn began after the cancel.
    (call,) = engine.calls(run.id)
    assert (call.name, call.status) == ("blocking", ToolCallStatus.SUCCEEDED)
    assert len(engine.store.turns(run.id)) == 1
    assert PROBE.executed == ["blocking"]
    types = engine.event_types(run.id)
    assert types[-1] == E.RUN_CANCELED
    assert types.count(E.TURN_STARTED) == 1
    assert engine.events(run.id, E.RUN_CANCELED) == [
        {
            "reason": "user_requested",
            "stopped_by": {"kind": "operator", "user": "bob", "rule": None},
        }
    ]


def test_a_cancel_while_the_model_streams_stops_the_answer_and_keeps_what_was_said(
    engine, monkeypatch
):
    # The story streams word by word; a cancel arrives after a few words. The loop
    # looks for it while the answer streams (not only between steps), so the answer
    # stops there: the turn keeps the words already said, and the run is canceled.
    monkeypatch.setattr("goaai.runtime.loop.CANCEL_CHECK_SECONDS", 0.0)
    monkeypatch.setattr("goaai.runtime.models.scripted.STORY_PACE", 0.0)
    words: list[str] = []

    def publish(context: RunContext, turn_id: UUID, text: str, offset: int) -> None:
        words.append(text)
        if len(words) == 5:
            engine.store.request_cancel(context.run_id, "user_requested")

    run = engine.create("assistant", "tell me a story")
    info = engine.loop(publish=publish).execute(run.id)

    # The run's record keeps the words said as its output too.
    assert (info.status, info.output) == (RunStatus.CANCELED, "".join(words))
    (turn,) = engine.store.turns(run.id)
    assert turn.response_text == "".join(words)
    assert 5 <= len(words) < 20, "the answer went on after the cancel"
    assert engine.event_types(run.id)[-2:] == [E.USAGE, E.RUN_CANCELED]
    assert engine.events(run.id, E.MESSAGE_COMPLETED) == [
        {"turn": str(turn.id), "role": "assistant", "text": "".join(words)}
    ]


def test_the_story_streams_whole_when_nobody_stops_it(engine, monkeypatch):
    monkeypatch.setattr("goaai.runtime.models.scripted.STORY_PACE", 0.0)

    info = engine.run("assistant", "tell me a story")

    assert info.status == RunStatus.COMPLETED
    assert info.output == STORY
    streamed = [delta for delta in engine.store.deltas if delta.run_id == info.id]
    assert "".join(delta.text for delta in streamed) == STORY
    assert {delta.turn_id for delta in streamed} == {engine.store.turns(info.id)[0].id}


# Tools that time out or crash


def test_a_tool_past_its_time_limit_fails_as_timeout_and_the_run_goes_on(engine):
    info = engine.run("slowpoke", "hurry")

    assert (info.status, info.output) == (
        RunStatus.COMPLETED,
        "slow failed (timeout): slow did not finish within 0.2s.",
    )
    (call,) = engine.calls(info.id)
    assert (call.status, call.error_kind, call.error_message, call.result) == (
        ToolCallStatus.FAILED,
        "timeout",
        "slow did not finish within 0.2s.",
        None,
    )
    (failed,) = engine.events(info.id, E.TOOL_CALL_FAILED)
    assert failed["duration_ms"] < 1500
    assert len(engine.store.turns(info.id)) == 2


def test_a_tool_that_raises_fails_as_internal_and_the_run_goes_on(engine):
    info = engine.run("breaker", "try it")

    message = "broken failed: RuntimeError: the flux capacitor is empty"
    assert (info.status, info.output) == (
        RunStatus.COMPLETED,
        f"broken failed (internal): {message}",
    )
    (call,) = engine.calls(info.id)
    assert (call.status, call.error_kind, call.error_message) == (
        ToolCallStatus.FAILED,
        "internal",
        message,
    )
    assert engine.events(info.id, E.TOOL_CALL_FAILED)[0]["error"] == {
        "kind": "internal",
        "message": message,
    }


# Resuming a run whose worker died


def _dead_worker_recorded(
    engine: Engine, plan: str, steps: list[tuple[str, str]], *, answer: str = ""
) -> UUID:
    """Create a run of the planner and record, as its (now dead) worker would have,
    one turn per step: each turn asked for the planned call, and the call is left
    ``succeeded`` (its result recorded) or ``running`` (the worker died in it).
    With ``answer``, a last turn in which the model gave it as its final answer."""
    store = engine.store
    run = engine.create("planner", plan)
    assert store.claim_run(run.id, owner="dead-worker", lease_seconds=LEASE_SECONDS) is not None
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
        call = store.start_tool_call(turn_id=turn_id, index=0, request=request)
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


def _lose_the_worker(engine: Engine) -> None:
    """Let the dead worker's lease run out."""
    engine.clock.advance(LEASE_SECONDS + 1)


def test_a_resumed_run_does_not_repeat_a_call_of_unknown_effect(engine):
    run_id = _dead_worker_recorded(
        engine, "note note note", [("note", "succeeded"), ("note", "running")]
    )
    _lose_the_worker(engine)
    assert engine.store.expired_runs() == [run_id]

    info = engine.execute(run_id)

    assert info is not None
    assert info.status == RunStatus.COMPLETED
    not_retried = (
        "The worker executing note stopped during the call; it was not retried because "
        "the tool is not idempotent. Its effect is unknown."
    )
    assert info.output == f"done: note ok; note failed (internal): {not_retried}; note ok"
    # Only the step that had never begun really ran now.
    assert PROBE.executed == ["note:step3"]
    first, interrupted, fresh = engine.calls(run_id)
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
    assert [t.index for t in engine.store.turns(run_id)] == [0, 1, 2, 3]
    (resumed,) = engine.events(run_id, E.RUN_RESUMED)
    assert (resumed["reason"], resumed["previous_worker"]) == ("worker_lost", "dead-worker")
    assert engine.store.expired_runs() == []


def test_a_resumed_run_executes_an_interrupted_idempotent_call_again(engine):
    run_id = _dead_worker_recorded(
        engine, "note peek", [("note", "succeeded"), ("peek", "running")]
    )
    _lose_the_worker(engine)

    info = engine.execute(run_id)

    assert (info.status, info.output) == (RunStatus.COMPLETED, "done: note ok; peek ok")
    assert PROBE.executed == ["peek:step2"]
    first, again = engine.calls(run_id)
    assert (first.status, first.attempt) == (ToolCallStatus.SUCCEEDED, 1)
    assert (again.status, again.attempt, again.result) == (
        ToolCallStatus.SUCCEEDED,
        2,
        {"peeked": "step2"},
    )
    assert engine.events(run_id, E.RUN_RESUMED)[0]["reason"] == "worker_lost"
    assert engine.event_types(run_id).count(E.RUN_STARTED) == 1


def test_a_run_held_by_a_live_worker_is_not_executed_by_another(engine):
    run_id = _dead_worker_recorded(engine, "note note", [("note", "succeeded")])

    assert engine.execute(run_id) is None

    assert engine.store.get_run(run_id).status == RunStatus.RUNNING
    assert PROBE.executed == []
    assert engine.events(run_id, E.RUN_RESUMED) == []
    assert engine.store.expired_runs() == []


def test_a_run_whose_answer_was_recorded_before_its_worker_died_ends_with_it(engine):
    """The worker recorded the model's final answer (the turn is complete) but died
    before it marked the run completed. Taking the run over must finish it with
    that answer; asking the model again would pay for (and may change) an answer
    the user was already streamed."""
    answer = "done: note ok"
    run_id = _dead_worker_recorded(engine, "note", [("note", "succeeded")], answer=answer)
    _lose_the_worker(engine)

    info = engine.execute(run_id)

    assert (info.status, info.output) == (RunStatus.COMPLETED, answer)
    # No turn was added: the model was not asked again, and no tokens were spent.
    assert len(engine.store.turns(run_id)) == 2
    assert info.usage.input_tokens == 2 * TURN_USAGE.input_tokens
    assert PROBE.executed == []


def test_a_turn_whose_worker_died_mid_answer_is_closed_and_asked_again(engine):
    run_id = _dead_worker_recorded(engine, "note", [])
    # The worker began the first turn, checkpointed what the model had said so far,
    # and died before the model finished.
    sent = [Message(role="user", content="note")]
    lost = engine.store.start_turn(
        run_id=run_id, index=0, model="plan", messages=[m.as_dict() for m in sent]
    )
    engine.store.checkpoint_turn(turn_id=lost, text="Let me take a n")
    _lose_the_worker(engine)

    info = engine.execute(run_id)

    assert (info.status, info.output) == (RunStatus.COMPLETED, "done: note ok")
    crashed, asked_again, answered = engine.store.turns(run_id)
    # The lost turn keeps what was said, is closed as crashed, and the model is asked
    # again with the same messages in a turn of its own.
    assert (crashed.id, crashed.ended, crashed.interruption) == (lost, True, "crashed")
    assert crashed.response_text == "Let me take a n"
    assert (asked_again.index, asked_again.request_messages) == (1, tuple(sent))
    assert answered.index == 2
    assert PROBE.executed == ["note:step1"]
    # Taking over from the dead worker said so: interrupted, then resumed.
    types = engine.event_types(run_id)
    assert types.index(E.RUN_INTERRUPTED) < types.index(E.RUN_RESUMED)
    assert engine.events(run_id, E.RUN_INTERRUPTED) == [
        {"cause": "lease_expired", "reason": "its lease expired", "worker": "dead-worker"}
    ]
    # Its text is no message of the conversation: the answer asked again is.
    completed = engine.events(run_id, E.TURN_COMPLETED)[0]
    assert (completed["turn"], completed["interruption"]) == (str(lost), "crashed")
    assert completed["usage_estimated"] is True
    assert str(lost) not in [e["turn"] for e in engine.events(run_id, E.MESSAGE_COMPLETED)]
    # Its usage is estimated from what it was sent and said, and the run counts it.
    estimate = estimated_usage(sent, "Let me take a n")
    lost_usage = engine.events(run_id, E.USAGE)[0]
    assert (lost_usage["input_tokens"], lost_usage["output_tokens"]) == (
        estimate.input_tokens + tools_tokens(_planner_specs(engine)),
        estimate.output_tokens,
    )
    assert info.usage.output_tokens == estimate.output_tokens + 2 * TURN_USAGE.output_tokens


def test_turns_lost_with_their_workers_do_not_count_against_the_turn_cap(engine):
    run = engine.create("turn_capped", "tick")
    store = engine.store
    sent = [{"role": "user", "content": "tick"}]
    assert store.claim_run(run.id, owner="dead-worker", lease_seconds=LEASE_SECONDS)
    first = store.start_turn(run_id=run.id, index=0, model="x", messages=sent)
    _lose_the_worker(engine)
    # A second worker took the run over, closed the lost turn, asked again, and
    # died in that turn too.
    assert store.claim_run(run.id, owner="second-dead-worker", lease_seconds=LEASE_SECONDS)
    store.complete_turn(
        turn_id=first,
        reply=ModelReply(),
        latency_ms=0,
        interruption="crashed",
        usage_estimated=True,
    )
    store.start_turn(run_id=run.id, index=1, model="x", messages=sent)
    _lose_the_worker(engine)

    info = engine.execute(run.id)

    # Three turns were answered, as the cap allows, after the two that were lost.
    turns = store.turns(run.id)
    assert [t.interruption for t in turns] == ["crashed", "crashed", "", "", ""]
    assert all(t.ended for t in turns)
    assert (info.status, info.error.kind) == (RunStatus.FAILED, "domain_rejection")
    assert engine.events(run.id, E.POLICY_DECISION)[-1]["rule"] == "max_turns"
    assert len(engine.events(run.id, E.RUN_INTERRUPTED)) == 2


@pytest.mark.parametrize("interruption", ["canceled", "failed"])
def test_a_run_whose_end_was_lost_after_its_answer_broke_off_ends_as_it_would_have(
    engine, interruption
):
    run_id = _dead_worker_recorded(engine, "note", [])
    store = engine.store
    turn = store.start_turn(
        run_id=run_id,
        index=0,
        model="plan",
        messages=[Message(role="user", content="note").as_dict()],
    )
    if interruption == "canceled":
        store.request_cancel(run_id, "stopped by the user", by=ALICE)
    # The answer broke off (stopped, or the stream failed) and was recorded so; the
    # worker died before it recorded the run's end.
    store.complete_turn(
        turn_id=turn,
        reply=ModelReply(text="Let me", model="plan"),
        latency_ms=5,
        interruption=interruption,
        usage_estimated=True,
    )
    _lose_the_worker(engine)

    info = engine.execute(run_id)

    if interruption == "canceled":
        # Stopped is stopped: it ends canceled with what it had said, asked nothing.
        assert (info.status, info.output) == (RunStatus.CANCELED, "Let me")
        assert len(store.turns(run_id)) == 1
        assert PROBE.executed == []
    else:
        # The failure was never told: the model is asked again.
        assert (info.status, info.output) == (RunStatus.COMPLETED, "done: note ok")
        assert [t.interruption for t in store.turns(run_id)] == ["failed", "", ""]


def _planner_specs(engine: Engine) -> list[ToolSpec]:
    tools = engine.agents.tools_of(engine.agents.get("planner"))
    return [
        ToolSpec(name=t.name, description=t.description, parameters=t.json_schema())
        for t in tools.values()
    ]


# Usage


def test_token_usage_is_recorded_per_turn_and_summed_on_the_run(engine):
    info = engine.run("planner", "note peek")

    assert len(engine.store.turns(info.id)) == 3
    assert [e["total_tokens"] for e in engine.events(info.id, E.USAGE)] == [15, 15, 15]
    assert (info.usage.input_tokens, info.usage.output_tokens) == (33, 12)
    assert engine.store.get_run(info.id).usage == info.usage
    assert engine.events(info.id, E.RUN_COMPLETED)[0]["usage"] == {
        "input_tokens": 33,
        "output_tokens": 12,
        "cached_input_tokens": 0,
        "cache_write_tokens": 0,
        "reasoning_tokens": 0,
        "total_tokens": 45,
        "cost": None,
        "unpriced_turns": 3,
    }
