"""Tools the caller executes (an OpenAI-compatible client's ``tools``), through the
``rt`` facade on the in-memory store: the run waits for their results and goes on
with them; goaai never executes them."""

from __future__ import annotations

import pytest

from goaai.runtime.config import RuntimeConfig
from goaai.runtime.errors import IllegalTransition, InvalidAnswer
from goaai.runtime.facade import Runtime
from goaai.runtime.vocabulary import AwaitingKind, EventType, RunStatus, ToolCallStatus

WEATHER = {
    "name": "get_weather",
    "description": "The weather in a city.",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
    },
}
TIME = {"name": "get_time", "description": "The time.", "parameters": {"type": "object"}}


@pytest.fixture
def rt() -> Runtime:
    runtime = Runtime()
    runtime.configure(config=RuntimeConfig(), executor="inline")
    return runtime


def _calls(rt: Runtime, run_id):
    return [rt.store._calls[c] for c in rt.store._calls if rt.store._calls[c].run_id == run_id]  # type: ignore[attr-defined]


def test_a_call_of_a_callers_tool_waits_for_its_result_and_the_run_goes_on(rt):
    session = rt.create_session(owner=1, agent="assistant")

    waiting = rt.start(
        "assistant", 'call get_weather {"city": "Rome"}', session=session.id, client_tools=[WEATHER]
    ).wait()

    assert waiting.status == RunStatus.AWAITING_INPUT
    awaiting = rt.store._runs[waiting.id].awaiting  # type: ignore[attr-defined]
    assert awaiting["kind"] == AwaitingKind.CLIENT_TOOL
    (call,) = _calls(rt, waiting.id)
    assert (call.name, call.arguments, call.status) == (
        "get_weather",
        {"city": "Rome"},
        ToolCallStatus.SCHEDULED,
    )
    assert awaiting["tool_calls"] == [str(call.id)]

    rt.submit_tool_outputs(waiting.id, {call.id: {"sky": "sunny", "celsius": 21}}, user=1)
    done = rt.wait(waiting.id)

    assert done.status == RunStatus.COMPLETED
    assert "sunny" in done.output
    assert call.status == ToolCallStatus.SUCCEEDED
    assert call.result == {"sky": "sunny", "celsius": 21}
    assert call.decision == "answered"
    assert call.decided_by_id == 1
    resumed = [e for e in rt.store.events(session.id) if e["type"] == EventType.RUN_RESUMED]  # type: ignore[attr-defined]
    assert resumed[-1]["data"]["answered"] == AwaitingKind.CLIENT_TOOL


def test_every_waited_call_must_be_answered_at_once(rt):
    session = rt.create_session(owner=1, agent="assistant")
    waiting = rt.start(
        "assistant",
        "together: call get_weather; call get_time",
        session=session.id,
        client_tools=[WEATHER, TIME],
    ).wait()
    calls = _calls(rt, waiting.id)

    assert waiting.status == RunStatus.AWAITING_INPUT
    assert len(calls) == 2
    assert rt.store._runs[waiting.id].awaiting["tool_calls"] == [str(c.id) for c in calls]  # type: ignore[attr-defined]
    with pytest.raises(InvalidAnswer, match=str(calls[1].id)):
        rt.submit_tool_outputs(waiting.id, {calls[0].id: "20C"})
    assert rt.get_run(waiting.id).status == RunStatus.AWAITING_INPUT

    rt.submit_tool_outputs(waiting.id, {calls[0].id: "20C", calls[1].id: "noon"})
    assert rt.wait(waiting.id).status == RunStatus.COMPLETED


def test_an_answer_for_a_call_the_run_does_not_wait_on_is_refused(rt):
    session = rt.create_session(owner=1, agent="assistant")
    waiting = rt.start(
        "assistant", "call get_weather", session=session.id, client_tools=[WEATHER]
    ).wait()
    (call,) = _calls(rt, waiting.id)
    other = rt.start(
        "assistant", "echo hi", session=rt.create_session(owner=1, agent="assistant").id
    ).wait()

    with pytest.raises(InvalidAnswer, match="does not wait"):
        rt.submit_tool_outputs(waiting.id, {call.id: "x", other.id: "y"})
    with pytest.raises(IllegalTransition):
        rt.submit_tool_outputs(other.id, {call.id: "x"})


def test_the_agents_own_tool_keeps_its_name_and_runs_on_the_server(rt):
    session = rt.create_session(owner=1, agent="assistant")
    shadow = {"name": "calculator", "parameters": {"type": "object"}}

    done = rt.start(
        "assistant", "calculate 2 * (3 + 4)", session=session.id, client_tools=[shadow]
    ).wait()

    assert done.status == RunStatus.COMPLETED
    assert "14" in done.output


def test_the_callers_instructions_come_after_the_agents_prompt(rt):
    session = rt.create_session(owner=1, agent="assistant")

    done = rt.start(
        "assistant", "echo hi", session=session.id, instructions="Answer in French."
    ).wait()

    turn = next(iter(rt.store._turns.values()))  # type: ignore[attr-defined]
    systems = [m["content"] for m in turn.request_messages if m["role"] == "system"]
    assert done.status == RunStatus.COMPLETED
    assert systems[-1] == "Answer in French."
    assert len(systems) >= 2
