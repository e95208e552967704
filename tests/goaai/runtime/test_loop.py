"""The turn loop, driven with an in-memory store and fake models: no database.

Each test checks what a user of the run would see: how it ended (status, output,
error), which turns and tool calls were recorded, which policy rule stopped it, and
what the model was told.
"""

from __future__ import annotations

import datetime as dt
import itertools
import json
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import pytest

from goaai.runtime.agents import Agent, AgentRegistry, Policy
from goaai.runtime.errors import ModelError
from goaai.runtime.loop import TurnLoop
from goaai.runtime.models import ModelRequest
from goaai.runtime.models.scripted import ScriptedModel
from goaai.runtime.types import (
    MemoryRecord,
    Message,
    ModelReply,
    RunContext,
    RunError,
    RunInfo,
    ToolCallRequest,
    ToolOutcome,
    Usage,
)
from goaai.runtime.vocabulary import ErrorKind, RunStatus

# A fake store


@dataclass
class FakeTurn:
    id: uuid.UUID
    index: int
    model: str
    messages: list[dict[str, Any]]
    reply: ModelReply | None = None


@dataclass
class FakeToolCall:
    id: uuid.UUID
    turn_id: uuid.UUID
    index: int
    request: ToolCallRequest
    requires_approval: bool
    outcome: ToolOutcome | None = None
    attempts: int = 0


@dataclass
class FakeStore:
    """The part of ``RunStore`` that the loop and the memory tools use, in lists."""

    input: str = "hello"
    history: tuple[Message, ...] = ()
    policy: Policy = field(default_factory=Policy)
    startable: bool = True
    # Set to a reason to have the loop find a cancel request at its next check.
    cancel_reason: str | None = None
    run_id: uuid.UUID = field(default_factory=uuid.uuid4)
    session_id: uuid.UUID = field(default_factory=uuid.uuid4)
    turns: list[FakeTurn] = field(default_factory=list)
    tool_calls: list[FakeToolCall] = field(default_factory=list)
    decisions: list[tuple[str, str, str]] = field(default_factory=list)
    finished: list[dict[str, Any]] = field(default_factory=list)
    awaiting: list[dict[str, Any]] = field(default_factory=list)
    memory: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)

    def context(self) -> RunContext:
        return RunContext(
            run_id=self.run_id,
            session_id=self.session_id,
            owner_id=7,
            agent="tester",
            input=self.input,
            labels={},
            history=self.history,
            policy=self.policy.as_dict(),
        )

    def claim_run(
        self, run_id: uuid.UUID, *, owner: str, lease_seconds: float
    ) -> RunContext | None:
        assert run_id == self.run_id
        assert owner
        return self.context() if self.startable else None

    def renew_lease(self, run_id: uuid.UUID, *, owner: str, lease_seconds: float) -> bool:
        return True

    @contextmanager
    def worker(self) -> Iterator[None]:
        yield

    def cancel_requested(self, run_id: uuid.UUID) -> str | None:
        return self.cancel_reason

    def start_turn(
        self, *, run_id: uuid.UUID, index: int, model: str, messages: list[dict[str, Any]]
    ) -> uuid.UUID:
        turn = FakeTurn(id=uuid.uuid4(), index=index, model=model, messages=messages)
        self.turns.append(turn)
        return turn.id

    def complete_turn(self, *, turn_id: uuid.UUID, reply: ModelReply, latency_ms: int) -> None:
        (turn,) = [t for t in self.turns if t.id == turn_id]
        assert turn.reply is None, "a turn was completed twice"
        assert latency_ms >= 0
        turn.reply = reply

    def schedule_tool_call(
        self,
        *,
        turn_id: uuid.UUID,
        index: int,
        request: ToolCallRequest,
        requires_approval: bool,
    ) -> uuid.UUID:
        call = FakeToolCall(uuid.uuid4(), turn_id, index, request, requires_approval)
        self.tool_calls.append(call)
        return call.id

    def begin_tool_call(self, *, tool_call_id: uuid.UUID) -> int:
        (call,) = [c for c in self.tool_calls if c.id == tool_call_id]
        call.attempts += 1
        return call.attempts

    def start_tool_call(
        self, *, turn_id: uuid.UUID, index: int, request: ToolCallRequest
    ) -> uuid.UUID:
        call_id = self.schedule_tool_call(
            turn_id=turn_id, index=index, request=request, requires_approval=False
        )
        self.begin_tool_call(tool_call_id=call_id)
        return call_id

    def finish_tool_call(self, *, tool_call_id: uuid.UUID, outcome: ToolOutcome) -> None:
        (call,) = [c for c in self.tool_calls if c.id == tool_call_id]
        assert call.outcome is None, "a tool call was finished twice"
        call.outcome = outcome

    def finish_run(
        self, *, run_id: uuid.UUID, status: str, output: str = "", error: RunError | None = None
    ) -> RunInfo:
        assert not self.finished, "the run was finished twice"
        self.finished.append({"status": status, "output": output, "error": error})
        return self._info(status, output, error)

    def _info(self, status: str, output: str, error: RunError | None) -> RunInfo:
        usage = [t.reply.usage for t in self.turns if t.reply is not None]
        return RunInfo(
            id=self.run_id,
            session_id=self.session_id,
            agent="tester",
            status=status,
            input=self.input,
            output=output,
            labels={},
            usage=Usage(
                input_tokens=sum(u.input_tokens for u in usage),
                output_tokens=sum(u.output_tokens for u in usage),
            ),
            error=error,
            created_at=dt.datetime.now(tz=dt.UTC),
        )

    def policy_decision(self, *, run_id: uuid.UUID, rule: str, verdict: str, reason: str) -> None:
        self.decisions.append((rule, verdict, reason))

    def await_input(
        self, *, run_id: uuid.UUID, kind: str, tool_call_id: uuid.UUID, question: str = ""
    ) -> RunInfo:
        self.awaiting.append({"kind": kind, "tool_call_id": tool_call_id, "question": question})
        return self._info(RunStatus.AWAITING_INPUT, "", None)

    def store_memory(self, *, key: str, value: Any, scope: str, **owner: Any) -> MemoryRecord:
        previous = self.memory.get((scope, key))
        self.memory[(scope, key)] = {"value": value, **owner}
        return MemoryRecord(
            id=uuid.uuid4(),
            key=key,
            value=value,
            scope=scope,
            session_id=owner.get("session_id"),
            user_id=owner.get("user_id"),
            agent="",
            version=1 if previous is None else 2,
            updated_at=dt.datetime.now(tz=dt.UTC),
        )

    # What a test asserts on

    @property
    def ending(self) -> dict[str, Any]:
        (ending,) = self.finished
        return ending


class FakeModel:
    """A model that answers each turn with ``script(request, turn_number)``."""

    name = "fake-model"

    def __init__(self, script: Callable[[ModelRequest, int], ModelReply]) -> None:
        self.script = script
        self.requests: list[ModelRequest] = []

    def complete(self, request: ModelRequest, on_delta=None) -> ModelReply:
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


def loop_for(
    store: FakeStore,
    model: Any,
    *,
    toolsets: tuple[str, ...] = ("calculator", "text"),
    clock: Callable[[], float] | None = None,
    deltas: list[tuple[uuid.UUID, str]] | None = None,
) -> TurnLoop:
    agent = Agent(
        id="tester",
        description="An agent for tests.",
        model="fake-model",
        system_prompt="Be brief.",
        toolsets=toolsets,
        policy=store.policy,
    )

    def publish(context: RunContext, turn_id: uuid.UUID, text: str) -> None:
        assert context.run_id == store.run_id
        if deltas is not None:
            deltas.append((turn_id, text))

    def model_factory(name: str) -> Any:
        assert name == "fake-model"
        return model

    return TurnLoop(
        store=store,
        agents=AgentRegistry([agent]),
        model_factory=model_factory,
        clock=clock or itertools.count().__next__,
        publish_delta=publish,
    )


# A run that ends with an answer


def test_a_run_calls_the_tool_then_answers_with_the_scripted_model():
    store = FakeStore(input="calculate 2 * (3 + 4)")
    deltas: list[tuple[uuid.UUID, str]] = []

    info = loop_for(store, ScriptedModel(), deltas=deltas).execute(store.run_id)

    assert info is not None
    assert (info.status, info.output) == (RunStatus.COMPLETED, "2 * (3 + 4) = 14")
    assert store.ending == {
        "status": RunStatus.COMPLETED,
        "output": "2 * (3 + 4) = 14",
        "error": None,
    }
    assert [t.index for t in store.turns] == [0, 1]
    assert [t.model for t in store.turns] == ["scripted", "scripted"]
    (tool_call,) = store.tool_calls
    assert (tool_call.turn_id, tool_call.index, tool_call.request.name) == (
        store.turns[0].id,
        0,
        "calculator",
    )
    assert tool_call.outcome == ToolOutcome(result={"expression": "2 * (3 + 4)", "value": 14})
    assert (tool_call.attempts, tool_call.requires_approval) == (1, False)
    # The second turn showed the model its own call and the tool's answer.
    assert [m["role"] for m in store.turns[0].messages] == ["system", "user"]
    assert [m["role"] for m in store.turns[1].messages] == ["system", "user", "assistant", "tool"]
    tool_message = store.turns[1].messages[-1]
    assert json.loads(tool_message["content"]) == {
        "ok": True,
        "result": {"expression": "2 * (3 + 4)", "value": 14},
    }
    assert tool_message["tool_call_id"] == "call_1"
    # The answer was streamed, as it was written, under the turn that wrote it.
    assert {turn for turn, _ in deltas} == {store.turns[1].id}
    assert "".join(text for _, text in deltas) == "2 * (3 + 4) = 14"
    assert store.decisions == []


def test_the_model_sees_the_sessions_history_before_the_new_message():
    history = (
        Message(role="user", content="remember my colour is red"),
        Message(role="assistant", content="Got it."),
    )
    store = FakeStore(input="what is my colour?", history=history)
    model = FakeModel(lambda request, n: say("Red."))

    loop_for(store, model).execute(store.run_id)

    assert [(m.role, m.content) for m in model.requests[0].messages] == [
        ("system", "Be brief."),
        ("user", "remember my colour is red"),
        ("assistant", "Got it."),
        ("user", "what is my colour?"),
    ]
    assert {spec.name for spec in model.requests[0].tools} == {"calculator", "echo"}


def test_a_memory_tool_writes_on_behalf_of_the_run_and_its_tool_call():
    store = FakeStore(input="remember my favourite colour is green")

    info = loop_for(store, ScriptedModel(), toolsets=("memory",)).execute(store.run_id)

    assert (
        info.output
        == "Got it. I'll remember in this conversation that your favourite colour is green."
    )
    (tool_call,) = store.tool_calls
    assert store.memory == {
        ("session", "favourite colour"): {
            "value": "green",
            "session_id": store.session_id,
            "user_id": None,
            "written_by_run": store.run_id,
            "written_by_tool_call": tool_call.id,
        }
    }


def test_a_run_that_must_not_start_records_nothing():
    store = FakeStore(startable=False)
    model = FakeModel(lambda request, n: say("never"))

    assert loop_for(store, model).execute(store.run_id) is None
    assert (store.turns, store.tool_calls, store.finished, model.requests) == ([], [], [], [])


# Caps


def test_max_turns_stops_a_model_that_never_answers():
    store = FakeStore(policy=Policy(max_turns=3))
    model = FakeModel(lambda request, n: call("echo", text=f"again {n}"))

    info = loop_for(store, model).execute(store.run_id)

    assert info.status == RunStatus.FAILED
    assert store.ending["error"] == RunError(
        kind=ErrorKind.DOMAIN_REJECTION, message="The agent did not answer within 3 turns."
    )
    assert store.decisions == [("max_turns", "stop", "Limit of 3 turns reached.")]
    assert [t.index for t in store.turns] == [0, 1, 2]
    assert all(c.outcome is not None and c.outcome.ok for c in store.tool_calls)
    assert len(store.tool_calls) == 3


def test_max_tool_calls_stops_before_the_call_over_the_limit():
    store = FakeStore(policy=Policy(max_tool_calls=2))
    three_calls = ModelReply(
        tool_calls=tuple(
            ToolCallRequest(id=f"c{i}", name="echo", arguments={"text": str(i)}) for i in range(3)
        )
    )
    model = FakeModel(lambda request, n: three_calls)

    info = loop_for(store, model).execute(store.run_id)

    assert info.status == RunStatus.FAILED
    assert store.ending["error"].message == "The run used its 2 tool calls."
    assert store.decisions == [("max_tool_calls", "stop", "Limit of 2 tool calls reached.")]
    assert [c.request.id for c in store.tool_calls] == ["c0", "c1"]


def test_consecutive_failed_tool_calls_stop_the_run():
    store = FakeStore(policy=Policy(max_consecutive_tool_failures=3))
    model = FakeModel(lambda request, n: call("calculator", expression="1/0"))

    info = loop_for(store, model).execute(store.run_id)

    assert info.status == RunStatus.FAILED
    assert store.ending["error"] == RunError(
        kind=ErrorKind.DOMAIN_REJECTION,
        message="3 tool calls failed in a row; the last: Division by zero.",
    )
    assert store.decisions == [
        ("max_consecutive_tool_failures", "stop", "3 consecutive failed tool calls.")
    ]
    assert len(store.tool_calls) == 3
    assert all(c.outcome.error_kind == ErrorKind.DOMAIN_REJECTION for c in store.tool_calls)


def test_a_successful_call_resets_the_count_of_failures():
    store = FakeStore(policy=Policy(max_consecutive_tool_failures=3))
    plan = ["1/0", "1/0", "1+1", "1/0", "1/0"]

    def script(request: ModelRequest, n: int) -> ModelReply:
        return call("calculator", expression=plan[n]) if n < len(plan) else say("Done.")

    info = loop_for(store, FakeModel(script)).execute(store.run_id)

    assert (info.status, info.output) == (RunStatus.COMPLETED, "Done.")
    assert [c.outcome.ok for c in store.tool_calls] == [False, False, True, False, False]
    assert store.decisions == []


def test_the_time_budget_times_the_run_out():
    store = FakeStore(policy=Policy(time_budget_seconds=5))
    now = [0.0]

    def script(request: ModelRequest, n: int) -> ModelReply:
        now[0] += 3  # each model round-trip takes three seconds
        return call("echo", text="x")

    info = loop_for(store, FakeModel(script), clock=lambda: now[0]).execute(store.run_id)

    assert info.status == RunStatus.TIMED_OUT
    assert store.ending["error"].kind == ErrorKind.TIMEOUT
    assert store.ending["error"].message == "The run exceeded its time budget of 5s."
    assert store.decisions == [("time_budget_seconds", "stop", "Time budget of 5s spent.")]
    assert len(store.turns) == 2


# Cancel


def test_a_cancel_requested_before_the_first_step_stops_the_run():
    store = FakeStore(cancel_reason="user_requested")
    model = FakeModel(lambda request, n: say("never"))

    info = loop_for(store, model).execute(store.run_id)

    assert info.status == RunStatus.CANCELED
    assert store.ending["error"] is None
    assert (store.turns, model.requests, store.decisions) == ([], [], [])


def test_a_cancel_requested_during_a_turn_stops_the_run_before_its_tool_call():
    store = FakeStore()

    def script(request: ModelRequest, n: int) -> ModelReply:
        store.cancel_reason = "user_requested"  # the user clicked stop meanwhile
        return call("echo", text="x")

    info = loop_for(store, FakeModel(script)).execute(store.run_id)

    assert info.status == RunStatus.CANCELED
    assert len(store.turns) == 1
    assert store.turns[0].reply is not None
    assert store.tool_calls == []
    assert store.decisions == []


# What the model is told when a call goes wrong


def test_an_unknown_tool_gives_the_model_an_invalid_call_to_correct():
    store = FakeStore()

    def script(request: ModelRequest, n: int) -> ModelReply:
        return call("weather", city="Rome") if n == 0 else say("Sorry, no weather here.")

    model = FakeModel(script)
    info = loop_for(store, model).execute(store.run_id)

    assert (info.status, info.output) == (RunStatus.COMPLETED, "Sorry, no weather here.")
    (tool_call,) = store.tool_calls
    expected = "There is no tool named 'weather'; available: calculator, echo."
    assert tool_call.outcome == ToolOutcome(
        error_kind=ErrorKind.INVALID_CALL, error_message=expected
    )
    assert tool_call.requires_approval is False
    told = model.requests[1].messages[-1]
    assert (told.role, told.tool_call_id, told.name) == ("tool", "call-weather", "weather")
    assert json.loads(told.content) == {
        "ok": False,
        "error": {"kind": "invalid_call", "message": expected},
    }


def test_invalid_arguments_are_sent_back_to_the_model():
    store = FakeStore()

    def script(request: ModelRequest, n: int) -> ModelReply:
        return call("calculator", formula="1+1") if n == 0 else say("Fixed.")

    model = FakeModel(script)
    loop_for(store, model).execute(store.run_id)

    error = json.loads(model.requests[1].messages[-1].content)["error"]
    assert error["kind"] == "invalid_call"
    assert "expression: Field required" in error["message"]
    assert "formula: Extra inputs are not permitted" in error["message"]


# Failures of the model itself


def test_a_model_error_fails_the_run_with_its_kind_message_and_retryable():
    store = FakeStore()

    def script(request: ModelRequest, n: int) -> ModelReply:
        raise ModelError("rate_limited", "The provider asks us to slow down.", retryable=True)

    info = loop_for(store, FakeModel(script)).execute(store.run_id)

    assert info.status == RunStatus.FAILED
    assert info.error == RunError(
        kind="rate_limited", message="The provider asks us to slow down.", retryable=True
    )
    assert store.ending["error"] == info.error
    assert [t.reply for t in store.turns] == [None]


def test_a_crash_inside_the_loop_fails_the_run_as_internal():
    store = FakeStore()

    def script(request: ModelRequest, n: int) -> ModelReply:
        raise RuntimeError("socket closed")

    info = loop_for(store, FakeModel(script)).execute(store.run_id)

    assert info.status == RunStatus.FAILED
    assert info.error == RunError(kind=ErrorKind.INTERNAL, message="RuntimeError: socket closed")


def test_an_agent_with_an_unknown_toolset_fails_with_a_clear_message():
    store = FakeStore()

    info = loop_for(store, FakeModel(lambda r, n: say("x")), toolsets=("nope",)).execute(
        store.run_id
    )

    assert info.status == RunStatus.FAILED
    assert info.error.kind == ErrorKind.INTERNAL
    assert "No toolset named 'nope'" in info.error.message


@pytest.mark.parametrize("policy", [Policy(max_turns=1), Policy(max_tool_calls=0)])
def test_a_direct_answer_is_never_stopped_by_the_tool_caps(policy):
    store = FakeStore(policy=policy)

    info = loop_for(store, FakeModel(lambda r, n: say("Hi."))).execute(store.run_id)

    assert (info.status, info.output) == (RunStatus.COMPLETED, "Hi.")


# Waiting for a person


def test_a_tool_the_policy_wants_approved_pauses_the_run_before_it_executes():
    store = FakeStore(policy=Policy(approval_required=frozenset({"echo"})))
    model = FakeModel(lambda request, n: call("echo", text="hi"))

    info = loop_for(store, model).execute(store.run_id)

    assert info.status == RunStatus.AWAITING_INPUT
    (tool_call,) = store.tool_calls
    assert tool_call.requires_approval is True
    assert (tool_call.attempts, tool_call.outcome) == (0, None)
    assert store.awaiting == [{"kind": "approval", "tool_call_id": tool_call.id, "question": ""}]
    assert store.finished == []


def test_asking_the_user_pauses_the_run_with_the_question():
    store = FakeStore()
    model = FakeModel(lambda request, n: call("ask_user", question="Which city?"))

    info = loop_for(store, model, toolsets=("interaction",)).execute(store.run_id)

    assert info.status == RunStatus.AWAITING_INPUT
    (tool_call,) = store.tool_calls
    assert store.awaiting == [
        {"kind": "question", "tool_call_id": tool_call.id, "question": "Which city?"}
    ]
    assert store.finished == []


def test_a_blocked_tool_is_not_offered_and_calling_it_is_an_invalid_call():
    store = FakeStore(policy=Policy(blocked_tools=frozenset({"echo"})))

    def script(request: ModelRequest, n: int) -> ModelReply:
        return call("echo", text="hi") if n == 0 else say("ok")

    model = FakeModel(script)
    loop_for(store, model).execute(store.run_id)

    assert {spec.name for spec in model.requests[0].tools} == {"calculator"}
    assert store.tool_calls[0].outcome.error_kind == ErrorKind.INVALID_CALL
