"""The Anthropic client's stop reasons, token kinds, extended thinking, prompt
caching and broken streams, against the fake Messages API server."""

from __future__ import annotations

import pytest

from goaai.runtime.agents import Agent
from goaai.runtime.errors import ModelError
from goaai.runtime.models import ModelRequest, ModelSettings
from goaai.runtime.types import Message, ToolCallRequest, Usage
from tests.goaai.runtime.models.fake_providers import (
    ANTHROPIC_PATH,
    RedactedThinkingBlock,
    StreamedCall,
    TextBlock,
    ThinkingBlock,
    anthropic_cut_before_stop,
    anthropic_error,
    anthropic_error_body,
    anthropic_events,
    anthropic_message,
    anthropic_sse,
)
from tests.goaai.runtime.models.test_anthropic_client import (
    CACHED,
    CALCULATOR_SPEC,
    ask,
    client_for,
)

SIGNATURE = "EqQBCkgIARABGAIiQGz3Jm0c2nGf1lx3yQk5aPbTtC8Rw=="
REDACTED = "EmwKAhgBEgy3va3pzix/LafPsn4aDFIT2Xlxh0L5L8rLVyIwxtE3rAFBa8cr3qpP"


@pytest.mark.parametrize(
    ("stop_reason", "finish_reason"),
    [
        ("end_turn", "stop"),
        ("stop_sequence", "stop"),
        ("tool_use", "tool_calls"),
        ("max_tokens", "length"),
        ("model_context_window_exceeded", "length"),
        ("refusal", "content_filter"),
        ("pause_turn", "other"),
    ],
)
def test_stop_reasons_are_said_in_goaais_words(fake_server, stop_reason, finish_reason):
    fake_server.anthropic(anthropic_message([TextBlock(["so"])], stop_reason=stop_reason))

    reply = client_for(fake_server).complete(ask("hi"))

    assert reply.finish_reason == finish_reason


def test_cache_reads_and_writes_are_counted_apart_from_full_price_input(fake_server):
    fake_server.anthropic(
        anthropic_message(
            [TextBlock(["ok"])],
            input_tokens=12,
            cache_read_tokens=1800,
            cache_write_tokens=300,
            output_tokens=9,
        )
    )

    reply = client_for(fake_server).complete(ask("hi"))

    assert reply.usage == Usage(
        input_tokens=12, output_tokens=9, cached_input_tokens=1800, cache_write_tokens=300
    )
    assert reply.usage.prompt_tokens == 2112


def test_message_delta_counts_are_cumulative_and_win(fake_server):
    # Newer servers repeat the prompt's counts in message_delta, with the thinking
    # share of the output.
    fake_server.anthropic(
        anthropic_message(
            [TextBlock(["ok"])],
            input_tokens=12,
            final_usage={
                "input_tokens": 15,
                "cache_creation_input_tokens": 0,
                "cache_read_input_tokens": 2048,
                "output_tokens": 120,
                "output_tokens_details": {"thinking_tokens": 80},
            },
        )
    )

    reply = client_for(fake_server).complete(ask("hi"))

    assert reply.usage == Usage(
        input_tokens=15, output_tokens=120, cached_input_tokens=2048, reasoning_tokens=80
    )


# Extended thinking


def test_thinking_blocks_are_the_reasoning_and_kept_as_sent_in_order(fake_server):
    fake_server.anthropic(
        anthropic_message(
            [
                ThinkingBlock(["The user wants ", "6*7."], signature=SIGNATURE),
                RedactedThinkingBlock(REDACTED),
                TextBlock(["Let me calculate."]),
                StreamedCall("toolu_1", "calculator", ['{"expression": "6*7"}']),
            ]
        )
    )
    pieces: list[str] = []

    reply = client_for(fake_server).complete(ask("6*7?", reasoning_effort="low"), pieces.append)

    assert reply.reasoning == "The user wants 6*7."
    assert reply.reasoning_state == (
        {"type": "thinking", "thinking": "The user wants 6*7.", "signature": SIGNATURE},
        {"type": "redacted_thinking", "data": REDACTED},
    )
    # Thinking is neither the answer nor streamed as it.
    assert (reply.text, pieces) == ("Let me calculate.", ["Let me calculate."])
    assert reply.tool_calls == (ToolCallRequest("toolu_1", "calculator", {"expression": "6*7"}),)
    assert reply.finish_reason == "tool_calls"


def test_thinking_goes_back_first_in_its_assistant_message(fake_server):
    fake_server.anthropic(anthropic_message([TextBlock(["42"])]))
    thinking = {"type": "thinking", "thinking": "Multiply.", "signature": SIGNATURE}
    redacted = {"type": "redacted_thinking", "data": REDACTED}
    conversation = (
        Message(role="user", content="6*7?"),
        Message(
            role="assistant",
            content="Let me calculate.",
            tool_calls=(ToolCallRequest("toolu_1", "calculator", {"expression": "6*7"}),),
            # An item another provider's client kept is not the Messages API's.
            reasoning_state=(thinking, redacted, {"type": "reasoning_content", "text": "x"}),
        ),
        Message(role="tool", content='{"ok": true, "result": 42}', tool_call_id="toolu_1"),
    )

    client_for(fake_server).complete(
        ModelRequest(messages=conversation, settings=ModelSettings(reasoning_effort="low"))
    )

    (body,) = fake_server.bodies(ANTHROPIC_PATH)
    assert body["messages"][1] == {
        "role": "assistant",
        "content": [
            thinking,
            redacted,
            {"type": "text", "text": "Let me calculate."},
            {
                "type": "tool_use",
                "id": "toolu_1",
                "name": "calculator",
                "input": {"expression": "6*7"},
            },
        ],
    }


@pytest.mark.parametrize(
    ("effort", "max_output_tokens", "budget", "max_tokens"),
    [
        ("minimal", None, 1024, 4096),
        ("low", 1000, 2048, 3048),
        ("medium", None, 8192, 12288),
        ("high", 32000, 24576, 32000),
    ],
)
def test_reasoning_effort_turns_on_extended_thinking(
    fake_server, effort, max_output_tokens, budget, max_tokens
):
    fake_server.anthropic(anthropic_message([TextBlock(["ok"])]))

    client_for(fake_server).complete(
        ask("hi", reasoning_effort=effort, max_output_tokens=max_output_tokens, temperature=0.7)
    )

    (body,) = fake_server.bodies(ANTHROPIC_PATH)
    assert body["thinking"] == {"type": "enabled", "budget_tokens": budget}
    # The cap counts the thinking: it must leave room for an answer.
    assert body["max_tokens"] == max_tokens
    assert body["max_tokens"] > budget
    # The API takes no temperature with thinking on.
    assert "temperature" not in body


# Tool results and prompt caching


def test_a_failed_tools_result_is_flagged_as_an_error(fake_server):
    fake_server.anthropic(anthropic_message([TextBlock(["It failed."])]))
    conversation = (
        Message(role="user", content="6*7?"),
        Message(
            role="assistant",
            tool_calls=(
                ToolCallRequest("toolu_1", "calculator", {"expression": "6*"}),
                ToolCallRequest("toolu_2", "clock_now", {}),
            ),
        ),
        Message(
            role="tool",
            content='{"ok": false, "error": {"kind": "invalid_call", "message": "bad"}}',
            tool_call_id="toolu_1",
            is_error=True,
        ),
        Message(role="tool", content='{"ok": true, "result": "16:05"}', tool_call_id="toolu_2"),
    )

    client_for(fake_server).complete(ModelRequest(messages=conversation))

    (body,) = fake_server.bodies(ANTHROPIC_PATH)
    assert body["messages"][2]["content"] == [
        {
            "type": "tool_result",
            "tool_use_id": "toolu_1",
            "content": '{"ok": false, "error": {"kind": "invalid_call", "message": "bad"}}',
            "is_error": True,
        },
        {
            "type": "tool_result",
            "tool_use_id": "toolu_2",
            "content": '{"ok": true, "result": "16:05"}',
        },
    ]


def test_the_stable_system_prompt_and_the_tools_are_cache_breakpoints(fake_server):
    fake_server.anthropic(anthropic_message([TextBlock(["ok"])]))
    conversation = (
        Message(role="system", content="You are the calculator agent."),
        Message(role="system", content="What you remember that applies here:\n- units: metric"),
        Message(role="user", content="6*7?"),
    )

    client_for(fake_server).complete(
        ModelRequest(messages=conversation, tools=(CALCULATOR_SPEC, CALCULATOR_SPEC))
    )

    (body,) = fake_server.bodies(ANTHROPIC_PATH)
    assert body["system"] == [
        {"type": "text", "text": "You are the calculator agent.", "cache_control": CACHED},
        {"type": "text", "text": "What you remember that applies here:\n- units: metric"},
    ]
    assert ["cache_control" in tool for tool in body["tools"]] == [False, True]


# Broken streams


def test_a_stream_that_ends_before_message_stop_is_a_retryable_error(fake_server):
    fake_server.anthropic(anthropic_cut_before_stop([TextBlock(["Half an ", "answer"])]))
    pieces: list[str] = []

    with pytest.raises(ModelError) as raised:
        client_for(fake_server).complete(ask("hi"), pieces.append)

    assert (raised.value.kind, raised.value.retryable) == ("unavailable", True)
    assert raised.value.message == (
        "anthropic:claude-test: the stream ended before the reply was complete: "
        "no message_stop event."
    )
    assert pieces == ["Half an ", "answer"]


def test_a_connection_reset_mid_stream_is_a_retryable_error(fake_server):
    reset = anthropic_message([TextBlock(["Once", " upon", " a", " time"])])
    # message_start, content_block_start, ping, two deltas: then the reset.
    reset.reset_after = 5
    fake_server.anthropic(reset)
    pieces: list[str] = []

    with pytest.raises(ModelError) as raised:
        client_for(fake_server).complete(ask("a story"), pieces.append)

    assert (raised.value.kind, raised.value.retryable) == ("unavailable", True)
    assert raised.value.message.startswith(
        "anthropic:claude-test: the stream ended before the reply was complete: "
    )
    assert pieces == ["Once", " upon"]


@pytest.mark.parametrize(
    "error_type", ["overloaded_error", "api_error", "rate_limit_error"], ids=str
)
def test_errors_inside_the_stream_worth_retrying(fake_server, error_type):
    events = anthropic_events([TextBlock(["Partial"])])[:4]
    events.append(anthropic_error_body(error_type, "Try again."))
    fake_server.anthropic(anthropic_sse(events))

    with pytest.raises(ModelError) as raised:
        client_for(fake_server).complete(ask("hi"))

    assert raised.value.retryable
    assert f"(error in the stream, {error_type})" in raised.value.message


# Through the turn loop


def _agent(**settings) -> Agent:
    return Agent(
        id="calc",
        description="Does arithmetic.",
        model="anthropic:claude-test",
        system_prompt="Use the calculator.",
        toolsets=("calculator",),
        model_settings=ModelSettings(**settings),
    )


def test_an_overloaded_provider_is_asked_again_after_the_wait_it_asked_for(
    monkeypatch, fake_server, run_turn_loop
):
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-loop")
    monkeypatch.setenv("ANTHROPIC_BASE_URL", fake_server.base_url)
    fake_server.anthropic(
        anthropic_error(529, "overloaded_error", "Overloaded", headers={"retry-after-ms": "20"}),
        anthropic_message([TextBlock(["42"])]),
    )

    result = run_turn_loop(_agent(), "6*7?")

    assert result.run is not None
    assert (result.run.status, result.run.output) == ("completed", "42")
    ((attempt, kind, message, delay),) = result.store.retries
    assert (attempt, kind) == (1, "unavailable")
    assert "is overloaded (HTTP 529, overloaded_error); retry after 0.02 s" in message
    assert 0.02 <= delay <= 0.022
    assert len(fake_server.bodies(ANTHROPIC_PATH)) == 2


def test_thinking_travels_back_to_the_model_through_the_turn_loop(
    monkeypatch, fake_server, run_turn_loop
):
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-loop")
    monkeypatch.setenv("ANTHROPIC_BASE_URL", fake_server.base_url)
    fake_server.anthropic(
        anthropic_message(
            [
                ThinkingBlock(["Use the tool."], signature=SIGNATURE),
                StreamedCall("toolu_calc", "calculator", ['{"expression": "6*7"}']),
            ]
        ),
        anthropic_message([TextBlock(["42"])]),
    )

    result = run_turn_loop(_agent(reasoning_effort="low"), "6*7?")

    assert result.run is not None
    assert (result.run.status, result.run.output) == ("completed", "42")
    first, second = fake_server.bodies(ANTHROPIC_PATH)
    assert first["thinking"] == {"type": "enabled", "budget_tokens": 2048}
    assert second["messages"][1]["content"][0] == {
        "type": "thinking",
        "thinking": "Use the tool.",
        "signature": SIGNATURE,
    }
