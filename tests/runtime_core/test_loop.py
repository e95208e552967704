"""The turn loop on the in-memory store, driven by the scripted model and small fake
models.

Each test checks what a user of the run would see: how it ended (status, output,
error), which turns and tool calls were recorded, which policy rule stopped it,
what the model was told, and what the log says.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from typing import Any

import pytest

from goaai.runtime import loop
from goaai.runtime.agents import Agent, AgentRegistry
from goaai.runtime.conversation import ConversationSettings
from goaai.runtime.errors import ModelError
from goaai.runtime.inmemory_store import InMemoryRunStore
from goaai.runtime.loop import TurnLoop
from goaai.runtime.models import ModelRequest, ModelSettings
from goaai.runtime.models.scripted import ScriptedModel
from goaai.runtime.policy import Policy
from goaai.runtime.types import ModelReply, RunContext, RunError, ToolCallRequest, Usage
from goaai.runtime.vocabulary import ErrorKind, EventType, RunStatus, ToolCallStatus
from tests.runtime_core.conftest import ALICE, LEASE_SECONDS

E = EventType


class FakeModel:
    """A model that answers each turn with ``script(request, turn_number)``."""

    name = "fake-model"

    def __init__(self, script: Callable[[ModelRequest, int], ModelReply]) -> None:
        self.script = script
        self.requests: list[ModelRequest] = []

    def complete(self, request: ModelRequest, on_delta: Any = None) -> ModelReply:
        self.requests.append(request)
        reply = self.script(request, len(self.requests) - 1)
        if on_delta is not None and reply.text:
            on_delta(reply.text)
        return reply


def call(name: str, **arguments: Any) -> ModelReply:
    return ModelReply(
        tool_calls=(ToolCallRequest(id=f"call-{name}", name=name, arguments=arguments),),
        usage=Usage(10, 2),
    )


def say(text: str) -> ModelReply:
    return ModelReply(text=text, usage=Usage(10, 3))


class Harness:
    """A session of the ``tester`` agent in an in-memory store, and loops to run it."""

    def __init__(self, store: InMemoryRunStore) -> None:
        self.store = store
        self.session_id = store.create_session(
            owner_id=ALICE, agent="tester", title="", metadata={}
        ).id
        self.deltas: list[tuple[uuid.UUID, str]] = []

    def start(self, prompt: str = "hello", policy: Policy | None = None) -> uuid.UUID:
        return self.store.create_run(
            session_id=self.session_id,
            agent="tester",
            input=prompt,
            labels={},
            metadata={},
            policy=(policy or Policy()).as_dict(),
        ).id

    def loop(
        self,
        model: Any,
        *,
        toolsets: tuple[str, ...] = ("calculator", "text"),
        clock: Callable[[], float] | None = None,
        model_settings: ModelSettings | None = None,
        conversation: ConversationSettings | None = None,
    ) -> TurnLoop:
        agent = Agent(
            id="tester",
            description="An agent for tests.",
            model="fake-model",
            system_prompt="Be brief.",
            toolsets=toolsets,
            model_settings=model_settings or ModelSettings(),
            conversation=conversation or ConversationSettings(),
        )

        def publish(context: RunContext, turn_id: uuid.UUID, text: str, offset: int) -> None:
            self.deltas.append((turn_id, text))

        def model_factory(name: str) -> Any:
            assert name == "fake-model"
            return model

        extra: dict[str, Any] = {"clock": clock} if clock is not None else {}
        return TurnLoop(
            store=self.store,
            agents=AgentRegistry([agent]),
            model_factory=model_factory,
            publish_delta=publish,
            lease_seconds=LEASE_SECONDS,
            **extra,
        )

    def calls(self, run_id: uuid.UUID) -> list[Any]:
        return [c for turn in self.store.turns(run_id) for c in turn.tool_calls]

    def decisions(self, run_id: uuid.UUID) -> list[tuple[str, str, str]]:
        return [
            (e["data"]["rule"], e["data"]["verdict"], e["data"]["reason"])
            for e in self.store.events(self.session_id)
            if e["type"] == E.POLICY_DECISION and e["run"] == str(run_id)
        ]

    def types(self, run_id: uuid.UUID) -> list[str]:
        return [e["type"] for e in self.store.events(self.session_id) if e["run"] == str(run_id)]


@pytest.fixture
def tester(store: InMemoryRunStore) -> Harness:
    return Harness(store)


# A run that ends with an answer


def test_a_plain_answer_completes_the_run_in_one_turn(tester):
    run_id = tester.start("hi")

    info = tester.loop(FakeModel(lambda request, n: say("Hello."))).execute(run_id)

    assert (info.status, info.output, info.error) == (RunStatus.COMPLETED, "Hello.", None)
    assert info.usage == Usage(10, 3)
    (turn,) = tester.store.turns(run_id)
    assert (turn.index, turn.ended, turn.response_text, turn.tool_calls) == (0, True, "Hello.", ())
    assert tester.types(run_id) == [
        E.RUN_CREATED,
        E.RUN_STARTED,
        E.TURN_STARTED,
        E.TURN_COMPLETED,
        E.MESSAGE_COMPLETED,
        E.USAGE,
        E.RUN_COMPLETED,
    ]
    assert tester.store.get_run(run_id).status == RunStatus.COMPLETED


def test_a_run_calls_the_tool_then_answers_with_the_scripted_model(tester):
    run_id = tester.start("calculate 2 * (3 + 4)")

    info = tester.loop(ScriptedModel()).execute(run_id)

    assert info is not None
    assert (info.status, info.output) == (RunStatus.COMPLETED, "2 * (3 + 4) = 14")
    first, second = tester.store.turns(run_id)
    (tool_call,) = first.tool_calls
    assert (tool_call.index, tool_call.name, tool_call.status) == (
        0,
        "calculator",
        ToolCallStatus.SUCCEEDED,
    )
    assert tool_call.result == {"expression": "2 * (3 + 4)", "value": 14}
    assert (tool_call.attempt, tool_call.requires_approval) == (1, False)
    assert second.tool_calls == ()
    # The second turn showed the model its own call and the tool's answer.
    assert [m.role for m in first.request_messages] == ["system", "user"]
    assert [m.role for m in second.request_messages] == ["system", "user", "assistant", "tool"]
    tool_message = second.request_messages[-1]
    assert json.loads(tool_message.content) == {
        "ok": True,
        "result": {"expression": "2 * (3 + 4)", "value": 14},
    }
    assert tool_message.tool_call_id == "call_1"
    # The answer was streamed, as it was written, under the turn that wrote it.
    assert {turn for turn, _ in tester.deltas} == {second.id}
    assert "".join(text for _, text in tester.deltas) == "2 * (3 + 4) = 14"
    assert tester.decisions(run_id) == []
    assert tester.types(run_id)[5:8] == [
        E.TOOL_CALL_SCHEDULED,
        E.TOOL_CALL_STARTED,
        E.TOOL_CALL_SUCCEEDED,
    ]


def test_the_model_sees_the_sessions_earlier_runs_before_the_new_message(tester):
    earlier = tester.start("remember my colour is red")
    tester.loop(FakeModel(lambda request, n: say("Got it."))).execute(earlier)
    model = FakeModel(lambda request, n: say("Red."))

    tester.loop(model).execute(tester.start("what is my colour?"))

    assert [(m.role, m.content) for m in model.requests[0].messages] == [
        ("system", "Be brief."),
        ("user", "remember my colour is red"),
        ("assistant", "Got it."),
        ("user", "what is my colour?"),
    ]
    # Besides its toolsets' tools, every agent can read on in a truncated result.
    assert {spec.name for spec in model.requests[0].tools} == {
        "calculator",
        "echo",
        "read_tool_result",
    }


def test_the_model_is_told_what_the_agent_remembers_for_the_session(tester):
    tester.store.store_memory(
        key="favourite colour", value="green", scope="session", session_id=tester.session_id
    )
    tester.store.store_memory(key="name", value="Ada", scope="user", user_id=ALICE)
    model = FakeModel(lambda request, n: say("Hi Ada."))

    tester.loop(model).execute(tester.start())

    prompt, remembered = model.requests[0].messages[:2]
    # The agent's prompt first, the same in every run (what a prompt cache keys on);
    # what it remembers for this session apart, after it (the input matches neither
    # fact: the newest first).
    assert (prompt.role, prompt.content) == ("system", "Be brief.")
    assert remembered.role == "system"
    assert remembered.content == (
        "What you remember that applies here:\n"
        "- name: Ada (user)\n- favourite colour: green (session)"
    )


def test_a_memory_tool_writes_on_behalf_of_the_run_and_its_tool_call(tester):
    run_id = tester.start("remember my favourite colour is green")

    info = tester.loop(ScriptedModel(), toolsets=("memory",)).execute(run_id)

    assert info.output == (
        "Got it. I'll remember in this conversation that your favourite colour is green."
    )
    (tool_call,) = tester.calls(run_id)
    entry = tester.store.get_memory(
        key="favourite colour", scope="session", session_id=tester.session_id
    )
    assert (entry.value, entry.version, entry.session_id) == ("green", 1, tester.session_id)
    (stored,) = [e for e in tester.store.events(tester.session_id) if e["type"] == E.MEMORY_STORED]
    assert stored["run"] == str(run_id)
    assert stored["data"]["written_by"] == {
        "kind": "run",
        "user_id": None,
        "run_id": str(run_id),
        "tool_call_id": str(tool_call.id),
    }


def test_a_run_held_by_a_live_worker_is_not_executed_again(tester):
    run_id = tester.start()
    assert tester.store.claim_run(run_id, owner="other", lease_seconds=60) is not None
    model = FakeModel(lambda request, n: say("never"))

    assert tester.loop(model).execute(run_id) is None
    assert (tester.store.turns(run_id), model.requests) == ((), [])
    assert tester.store.get_run(run_id).status == RunStatus.RUNNING


# Caps


def test_max_turns_stops_a_model_that_never_answers(tester):
    run_id = tester.start(policy=Policy(max_turns=3))
    model = FakeModel(lambda request, n: call("echo", text=f"again {n}"))

    info = tester.loop(model).execute(run_id)

    assert info.status == RunStatus.FAILED
    assert info.error == RunError(
        kind=ErrorKind.DOMAIN_REJECTION, message="The agent did not answer within 3 turns."
    )
    assert tester.decisions(run_id) == [("max_turns", "stop", "Limit of 3 turns reached.")]
    assert [t.index for t in tester.store.turns(run_id)] == [0, 1, 2]
    calls = tester.calls(run_id)
    assert [c.status for c in calls] == [ToolCallStatus.SUCCEEDED] * 3
    assert tester.types(run_id)[-2:] == [E.POLICY_DECISION, E.RUN_FAILED]


def test_max_tool_calls_stops_before_the_call_over_the_limit(tester):
    run_id = tester.start(policy=Policy(max_tool_calls=2))
    three_calls = ModelReply(
        tool_calls=tuple(
            ToolCallRequest(id=f"c{i}", name="echo", arguments={"text": str(i)}) for i in range(3)
        )
    )

    info = tester.loop(FakeModel(lambda request, n: three_calls)).execute(run_id)

    assert info.status == RunStatus.FAILED
    assert info.error.message == "The run used its 2 tool calls."
    assert tester.decisions(run_id) == [
        ("max_tool_calls", "stop", "Limit of 2 tool calls reached.")
    ]
    assert [c.call_id for c in tester.calls(run_id)] == ["c0", "c1"]


def test_consecutive_failed_tool_calls_stop_the_run(tester):
    run_id = tester.start(policy=Policy(max_consecutive_tool_failures=3))
    model = FakeModel(lambda request, n: call("calculator", expression="1/0"))

    info = tester.loop(model).execute(run_id)

    assert info.status == RunStatus.FAILED
    assert info.error == RunError(
        kind=ErrorKind.DOMAIN_REJECTION,
        message="3 tool calls failed in a row; the last: Division by zero.",
    )
    assert tester.decisions(run_id) == [
        ("max_consecutive_tool_failures", "stop", "3 consecutive failed tool calls.")
    ]
    calls = tester.calls(run_id)
    assert [(c.status, c.error_kind) for c in calls] == [
        (ToolCallStatus.FAILED, ErrorKind.DOMAIN_REJECTION)
    ] * 3


def test_a_successful_call_resets_the_count_of_failures(tester):
    run_id = tester.start(policy=Policy(max_consecutive_tool_failures=3))
    plan = ["1/0", "1/0", "1+1", "1/0", "1/0"]

    def script(request: ModelRequest, n: int) -> ModelReply:
        return call("calculator", expression=plan[n]) if n < len(plan) else say("Done.")

    info = tester.loop(FakeModel(script)).execute(run_id)

    assert (info.status, info.output) == (RunStatus.COMPLETED, "Done.")
    assert [c.status == ToolCallStatus.SUCCEEDED for c in tester.calls(run_id)] == [
        False,
        False,
        True,
        False,
        False,
    ]
    assert tester.decisions(run_id) == []


def test_the_time_budget_times_the_run_out(tester):
    run_id = tester.start(policy=Policy(time_budget_seconds=5))
    now = [0.0]

    def script(request: ModelRequest, n: int) -> ModelReply:
        now[0] += 3  # each model round-trip takes three seconds
        return call("echo", text="x")

    info = tester.loop(FakeModel(script), clock=lambda: now[0]).execute(run_id)

    assert info.status == RunStatus.TIMED_OUT
    assert info.error == RunError(
        kind=ErrorKind.TIMEOUT, message="The run exceeded its time budget of 5s."
    )
    assert tester.decisions(run_id) == [("time_budget_seconds", "stop", "Time budget of 5s spent.")]
    assert len(tester.store.turns(run_id)) == 2
    assert tester.types(run_id)[-1] == E.RUN_TIMED_OUT


@pytest.mark.parametrize("policy", [Policy(max_turns=1), Policy(max_tool_calls=0)])
def test_a_direct_answer_is_never_stopped_by_the_tool_caps(tester, policy):
    run_id = tester.start(policy=policy)

    info = tester.loop(FakeModel(lambda r, n: say("Hi."))).execute(run_id)

    assert (info.status, info.output) == (RunStatus.COMPLETED, "Hi.")


# Cancel


def test_a_run_canceled_before_it_started_is_never_executed(tester):
    run_id = tester.start()
    assert tester.store.request_cancel(run_id, "user_requested").status == RunStatus.CANCELED
    model = FakeModel(lambda request, n: say("never"))

    assert tester.loop(model).execute(run_id) is None
    assert (tester.store.turns(run_id), model.requests) == ((), [])


def test_a_cancel_requested_during_a_turn_stops_the_run_before_its_tool_call(tester):
    run_id = tester.start()

    def script(request: ModelRequest, n: int) -> ModelReply:
        # The user clicks stop while the model thinks: the run is only flagged.
        assert tester.store.request_cancel(run_id, "user_requested").status == RunStatus.RUNNING
        return call("echo", text="x")

    info = tester.loop(FakeModel(script)).execute(run_id)

    assert info.status == RunStatus.CANCELED
    (turn,) = tester.store.turns(run_id)
    assert turn.ended
    assert turn.tool_calls == ()
    assert tester.decisions(run_id) == []
    assert tester.types(run_id)[-1] == E.RUN_CANCELED
    canceled = [
        e["data"] for e in tester.store.events(tester.session_id) if e["type"] == E.RUN_CANCELED
    ]
    # Nobody was named: who stopped it is not known.
    assert canceled == [{"reason": "user_requested", "stopped_by": None}]


def test_what_a_step_saw_of_a_cancel_serves_the_next_check_once_and_only_while_fresh(
    monkeypatch,
):
    """A check right after a step takes what the step found in its own transaction;
    a second check, or one that comes after something slow, reads again."""
    now = [100.0]
    monkeypatch.setattr(loop.time, "monotonic", lambda: now[0])
    progress = loop._Progress(started=0.0)

    progress.saw(None)
    assert progress.fresh_view() == (None,)
    assert progress.fresh_view() is None

    progress.saw("user_requested")
    now[0] += loop.SEEN_FRESH_SECONDS / 2
    assert progress.fresh_view() == ("user_requested",)

    progress.saw(None)
    now[0] += loop.SEEN_FRESH_SECONDS * 2
    assert progress.fresh_view() is None


def test_a_cancel_after_the_last_steps_view_is_read_by_the_next_check(tester, monkeypatch):
    """The check before the second turn comes too late for what the tool call's end
    saw (as after a slow moment): it reads, and finds the cancel asked for since."""
    run_id = tester.start()

    def script(request: ModelRequest, n: int) -> ModelReply:
        return call("echo", text="x") if n == 0 else say("never said")

    real_saw = loop._Progress.saw
    views: list[str | None] = []

    def saw(self, reason):
        real_saw(self, reason)
        views.append(reason)
        if len(views) == 3:  # the claim, the reply with its call, the call's end
            tester.store.request_cancel(run_id, "user_requested")
            self.seen = (reason, self.seen[1] - 2 * loop.SEEN_FRESH_SECONDS)

    monkeypatch.setattr(loop._Progress, "saw", saw)
    info = tester.loop(FakeModel(script)).execute(run_id)

    assert views == [None, None, None]
    assert info.status == RunStatus.CANCELED
    (turn,) = tester.store.turns(run_id)
    assert [c.status for c in turn.tool_calls] == [ToolCallStatus.SUCCEEDED]


# What the model is told when a call goes wrong


def test_an_unknown_tool_gives_the_model_an_invalid_call_to_correct(tester):
    run_id = tester.start()

    def script(request: ModelRequest, n: int) -> ModelReply:
        return call("weather", city="Rome") if n == 0 else say("Sorry, no weather here.")

    model = FakeModel(script)
    info = tester.loop(model).execute(run_id)

    assert (info.status, info.output) == (RunStatus.COMPLETED, "Sorry, no weather here.")
    (tool_call,) = tester.calls(run_id)
    expected = "There is no tool named 'weather'; available: calculator, echo, read_tool_result."
    assert (tool_call.status, tool_call.error_kind, tool_call.error_message) == (
        ToolCallStatus.FAILED,
        ErrorKind.INVALID_CALL,
        expected,
    )
    assert tool_call.requires_approval is False
    told = model.requests[1].messages[-1]
    assert (told.role, told.tool_call_id, told.name) == ("tool", "call-weather", "weather")
    assert json.loads(told.content) == {
        "ok": False,
        "error": {"kind": "invalid_call", "message": expected},
    }


def test_invalid_arguments_are_sent_back_to_the_model(tester):
    run_id = tester.start()

    def script(request: ModelRequest, n: int) -> ModelReply:
        return call("calculator", formula="1+1") if n == 0 else say("Fixed.")

    model = FakeModel(script)
    tester.loop(model).execute(run_id)

    error = json.loads(model.requests[1].messages[-1].content)["error"]
    assert error["kind"] == "invalid_call"
    assert "expression: Field required" in error["message"]
    assert "formula: Extra inputs are not permitted" in error["message"]
    (tool_call,) = tester.calls(run_id)
    assert (tool_call.status, tool_call.result) == (ToolCallStatus.FAILED, None)


def test_a_blocked_tool_is_not_offered_and_calling_it_is_an_invalid_call(tester):
    run_id = tester.start(policy=Policy(blocked_tools=frozenset({"echo"})))

    def script(request: ModelRequest, n: int) -> ModelReply:
        return call("echo", text="hi") if n == 0 else say("ok")

    model = FakeModel(script)
    tester.loop(model).execute(run_id)

    assert {spec.name for spec in model.requests[0].tools} == {"calculator", "read_tool_result"}
    assert tester.calls(run_id)[0].error_kind == ErrorKind.INVALID_CALL


# Failures of the model itself


def test_a_model_error_fails_the_run_with_its_kind_message_and_retryable(tester):
    run_id = tester.start()

    def script(request: ModelRequest, n: int) -> ModelReply:
        raise ModelError("rate_limited", "The provider asks us to slow down.", retryable=True)

    # No retries left (how retries go: test_model_retries.py).
    loop = tester.loop(FakeModel(script), model_settings=ModelSettings(retry_attempts=1))
    info = loop.execute(run_id)

    assert info.status == RunStatus.FAILED
    assert info.error == RunError(
        kind="rate_limited", message="The provider asks us to slow down.", retryable=True
    )
    assert tester.store.get_run(run_id).error == info.error
    (turn,) = tester.store.turns(run_id)
    assert turn.ended is False


def test_a_crash_inside_the_loop_fails_the_run_as_internal(tester):
    run_id = tester.start()

    def script(request: ModelRequest, n: int) -> ModelReply:
        raise RuntimeError("socket closed")

    info = tester.loop(FakeModel(script)).execute(run_id)

    assert info.status == RunStatus.FAILED
    assert info.error == RunError(kind=ErrorKind.INTERNAL, message="RuntimeError: socket closed")


def test_an_agent_with_an_unknown_toolset_fails_with_a_clear_message(tester):
    run_id = tester.start()

    info = tester.loop(FakeModel(lambda r, n: say("x")), toolsets=("nope",)).execute(run_id)

    assert info.status == RunStatus.FAILED
    assert info.error.kind == ErrorKind.INTERNAL
    assert "No toolset named 'nope'" in info.error.message


# Waiting for a person


def test_a_tool_the_policy_wants_approved_pauses_the_run_before_it_executes(tester):
    run_id = tester.start(policy=Policy(approval_required=frozenset({"echo"})))
    model = FakeModel(lambda request, n: call("echo", text="hi"))

    info = tester.loop(model).execute(run_id)

    assert info.status == RunStatus.AWAITING_INPUT
    (tool_call,) = tester.calls(run_id)
    assert (tool_call.status, tool_call.requires_approval, tool_call.attempt) == (
        ToolCallStatus.SCHEDULED,
        True,
        0,
    )
    (awaiting,) = [
        e["data"]
        for e in tester.store.events(tester.session_id)
        if e["type"] == E.RUN_AWAITING_INPUT
    ]
    assert awaiting == {"kind": "approval", "tool_call": str(tool_call.id)}
    assert tester.types(run_id)[-2:] == [E.TOOL_CALL_APPROVAL_REQUESTED, E.RUN_AWAITING_INPUT]


def test_asking_the_user_pauses_the_run_with_the_question(tester):
    run_id = tester.start()
    model = FakeModel(lambda request, n: call("ask_user", question="Which city?"))

    info = tester.loop(model, toolsets=("interaction",)).execute(run_id)

    assert info.status == RunStatus.AWAITING_INPUT
    (tool_call,) = tester.calls(run_id)
    assert (tool_call.status, tool_call.requires_approval) == (ToolCallStatus.SCHEDULED, False)
    (awaiting,) = [
        e["data"]
        for e in tester.store.events(tester.session_id)
        if e["type"] == E.RUN_AWAITING_INPUT
    ]
    assert awaiting == {
        "kind": "question",
        "tool_call": str(tool_call.id),
        "question": "Which city?",
    }
