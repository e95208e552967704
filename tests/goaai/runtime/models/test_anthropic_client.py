"""The Anthropic client against a fake Messages API server on 127.0.0.1."""

from __future__ import annotations

import json
import socket

import pytest

from goaai.runtime.agents import Agent
from goaai.runtime.config import ModelProfile
from goaai.runtime.errors import ModelError
from goaai.runtime.models import ModelRequest, ModelSettings, ToolSpec, get_model_client
from goaai.runtime.models.anthropic_client import DEFAULT_MAX_TOKENS, AnthropicModel
from goaai.runtime.tools import TOOLSETS
from goaai.runtime.types import Message, ToolCallRequest, Usage
from goaai.runtime_settings import runtime_config
from tests.goaai.runtime.models.fake_providers import (
    ANTHROPIC_PATH,
    SlowResponse,
    StreamedCall,
    TextBlock,
    anthropic_error,
    anthropic_error_body,
    anthropic_events,
    anthropic_message,
    anthropic_sse,
)

CALCULATOR = TOOLSETS["calculator"]["calculator"]
CALCULATOR_SPEC = ToolSpec(
    name=CALCULATOR.name, description=CALCULATOR.description, parameters=CALCULATOR.json_schema()
)


CACHED = {"type": "ephemeral"}


def profile_for(base_url: str, **options) -> ModelProfile:
    return ModelProfile(
        name="anthropic",
        kind="anthropic",
        base_url=base_url,
        api_key="sk-ant-test-key",
        **options,
    )


def client_for(server, **options) -> AnthropicModel:
    return AnthropicModel("claude-test", profile=profile_for(server.base_url, **options))


def ask(text: str, *tools: ToolSpec, **settings) -> ModelRequest:
    return ModelRequest(
        messages=(Message(role="user", content=text),),
        tools=tools,
        settings=ModelSettings(**settings),
    )


def test_a_text_reply_streams_each_piece_and_records_usage_and_model(fake_server):
    fake_server.anthropic(
        anthropic_message(
            [TextBlock(["The answer", " is", " 42."])], input_tokens=33, output_tokens=8
        )
    )
    pieces: list[str] = []

    reply = client_for(fake_server).complete(ask("What is the answer?"), pieces.append)

    assert pieces == ["The answer", " is", " 42."]
    assert reply.text == "".join(pieces)
    assert reply.tool_calls == ()
    assert reply.usage == Usage(input_tokens=33, output_tokens=8)
    assert reply.model == "claude-fake-4-5-20250929"
    assert (reply.finish_reason, reply.reasoning, reply.reasoning_state) == ("stop", "", ())


def test_the_request_streams_and_authenticates_with_the_key(fake_server):
    fake_server.anthropic(anthropic_message([TextBlock(["ok"])]))

    client_for(fake_server).complete(
        ModelRequest(
            messages=(
                Message(role="system", content="Be brief."),
                Message(role="user", content="hi"),
            )
        )
    )

    (request,) = fake_server.requests
    assert request.path == ANTHROPIC_PATH
    assert request.header("authorization") == "Bearer sk-ant-test-key"
    assert request.header("anthropic-version")
    assert request.body == {
        "model": "claude-test",
        "max_tokens": DEFAULT_MAX_TOKENS,
        "system": [{"type": "text", "text": "Be brief.", "cache_control": CACHED}],
        "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}],
        "stream": True,
    }


def test_temperature_and_max_tokens_are_sent_when_configured(fake_server):
    fake_server.anthropic(anthropic_message([TextBlock(["ok"])]))

    client_for(fake_server).complete(ask("hi", temperature=0.3, max_output_tokens=200))

    (body,) = fake_server.bodies(ANTHROPIC_PATH)
    assert (body["temperature"], body["max_tokens"]) == (0.3, 200)
    assert "thinking" not in body


def test_text_and_tool_use_blocks_make_one_reply(fake_server):
    fake_server.anthropic(
        anthropic_message(
            [
                TextBlock(["Let me ", "work that out."]),
                StreamedCall("toolu_01", "calculator", ['{"expr', 'ession": "2 *', ' (3 + 4)"}']),
                StreamedCall("toolu_02", "clock_now", ['{"timezone": "Asia/Tokyo"}']),
            ],
            input_tokens=70,
            output_tokens=44,
        )
    )
    pieces: list[str] = []

    reply = client_for(fake_server).complete(ask("sums and time"), pieces.append)

    assert reply.text == "Let me work that out."
    assert pieces == ["Let me ", "work that out."]
    assert reply.tool_calls == (
        ToolCallRequest(id="toolu_01", name="calculator", arguments={"expression": "2 * (3 + 4)"}),
        ToolCallRequest(id="toolu_02", name="clock_now", arguments={"timezone": "Asia/Tokyo"}),
    )
    assert reply.usage == Usage(70, 44)


def test_tools_are_sent_with_their_json_schema_as_input_schema(fake_server):
    fake_server.anthropic(anthropic_message([TextBlock(["ok"])]), anthropic_message([]))
    client = client_for(fake_server)

    client.complete(ask("calculate 1+1", CALCULATOR_SPEC))
    client.complete(ask("no tools"))

    with_tools, without_tools = fake_server.bodies(ANTHROPIC_PATH)
    assert with_tools["tools"] == [
        {
            "name": "calculator",
            "description": CALCULATOR.description,
            "input_schema": CALCULATOR.json_schema(),
            # The last tool is a prompt cache breakpoint.
            "cache_control": CACHED,
        }
    ]
    assert "tools" not in without_tools


def test_a_conversation_with_tool_calls_and_results_is_sent_in_messages_shape(fake_server):
    fake_server.anthropic(anthropic_message([TextBlock(["14, at 16:05."])]))
    conversation = (
        Message(role="system", content="Be brief."),
        Message(role="user", content="What is 2*7, and the time?"),
        Message(
            role="assistant",
            content="Checking.",
            tool_calls=(
                ToolCallRequest("toolu_1", "calculator", {"expression": "2*7"}),
                ToolCallRequest("toolu_2", "clock_now", {}),
            ),
        ),
        Message(role="tool", content='{"ok": true, "result": 14}', tool_call_id="toolu_1"),
        Message(role="tool", content='{"ok": true, "result": "16:05"}', tool_call_id="toolu_2"),
        Message(role="assistant", content="Anything else?"),
        Message(role="user", content="No, thanks."),
        Message(role="system", content="Sign off politely."),
    )

    client_for(fake_server).complete(ModelRequest(messages=conversation))

    (body,) = fake_server.bodies(ANTHROPIC_PATH)
    assert body["system"] == [
        {"type": "text", "text": "Be brief.", "cache_control": CACHED},
        {"type": "text", "text": "Sign off politely."},
    ]
    assert body["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "What is 2*7, and the time?"}]},
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "Checking."},
                {
                    "type": "tool_use",
                    "id": "toolu_1",
                    "name": "calculator",
                    "input": {"expression": "2*7"},
                },
                {"type": "tool_use", "id": "toolu_2", "name": "clock_now", "input": {}},
            ],
        },
        {
            # Both results answer one assistant turn, so they travel in one message.
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_1",
                    "content": '{"ok": true, "result": 14}',
                },
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_2",
                    "content": '{"ok": true, "result": "16:05"}',
                },
            ],
        },
        {"role": "assistant", "content": [{"type": "text", "text": "Anything else?"}]},
        {"role": "user", "content": [{"type": "text", "text": "No, thanks."}]},
    ]


def test_an_assistant_turn_with_only_tool_calls_sends_no_empty_text_block(fake_server):
    fake_server.anthropic(anthropic_message([TextBlock(["done"])]))
    conversation = (
        Message(role="user", content="calculate 1+1"),
        Message(
            role="assistant",
            tool_calls=(ToolCallRequest("toolu_1", "calculator", {"expression": "1+1"}),),
        ),
        Message(role="tool", content='{"ok": true}', tool_call_id="toolu_1"),
    )

    client_for(fake_server).complete(ModelRequest(messages=conversation))

    (body,) = fake_server.bodies(ANTHROPIC_PATH)
    assert body["messages"][1]["content"] == [
        {"type": "tool_use", "id": "toolu_1", "name": "calculator", "input": {"expression": "1+1"}}
    ]
    assert "system" not in body


@pytest.mark.parametrize(
    ("fragments", "expected"),
    [
        (['{"expression": "2+', "2"], {"_raw": '{"expression": "2+2'}),
        (['"2+2"'], {"_raw": '"2+2"'}),
        ([], {}),
    ],
    ids=["truncated-json", "not-an-object", "no-input"],
)
def test_tool_input_that_is_not_a_json_object_is_kept_raw(fake_server, fragments, expected):
    fake_server.anthropic(
        anthropic_message(
            [StreamedCall("toolu_x", "calculator", fragments)], stop_reason="max_tokens"
        )
    )

    reply = client_for(fake_server).complete(ask("calculate", CALCULATOR_SPEC))

    assert reply.tool_calls == (ToolCallRequest("toolu_x", "calculator", expected),)


@pytest.mark.parametrize(
    ("status", "error_type", "kind", "retryable"),
    [
        (401, "authentication_error", "unavailable", False),
        (403, "permission_error", "unavailable", False),
        (429, "rate_limit_error", "rate_limited", True),
        (500, "api_error", "unavailable", True),
        (529, "overloaded_error", "unavailable", True),
        (400, "invalid_request_error", "invalid_call", False),
        (404, "not_found_error", "invalid_call", False),
        (413, "request_too_large", "invalid_call", False),
    ],
)
def test_http_errors_become_model_errors_of_the_matching_kind(
    fake_server, status, error_type, kind, retryable
):
    fake_server.anthropic(anthropic_error(status, error_type, "Something specific went wrong."))

    with pytest.raises(ModelError) as raised:
        client_for(fake_server).complete(ask("hi"))

    assert (raised.value.kind, raised.value.retryable) == (kind, retryable)
    assert raised.value.message.startswith("anthropic:claude-test: ")
    assert f"HTTP {status}, {error_type}" in raised.value.message
    assert raised.value.message.endswith(": Something specific went wrong.")
    assert len(fake_server.requests) == 1


def test_overloaded_reads_as_such(fake_server):
    fake_server.anthropic(anthropic_error(529, "overloaded_error", "Overloaded"))

    with pytest.raises(ModelError) as raised:
        client_for(fake_server).complete(ask("hi"))

    assert raised.value.message == (
        "anthropic:claude-test: the provider is overloaded (HTTP 529, overloaded_error): Overloaded"
    )


def test_a_rate_limit_says_when_to_retry(fake_server):
    fake_server.anthropic(
        anthropic_error(
            429,
            "rate_limit_error",
            "Number of request tokens has exceeded your per-minute rate limit.",
            headers={"retry-after": "12"},
        )
    )

    with pytest.raises(ModelError) as raised:
        client_for(fake_server).complete(ask("hi"))

    assert raised.value.kind == "rate_limited"
    assert raised.value.retry_after == 12.0
    assert "(HTTP 429, rate_limit_error); retry after 12 s: Number of" in raised.value.message


def test_an_error_event_inside_the_stream_is_a_model_error(fake_server):
    events = anthropic_events([TextBlock(["Partial"])])[:4]
    events.append(anthropic_error_body("overloaded_error", "Overloaded"))
    fake_server.anthropic(anthropic_sse(events))
    pieces: list[str] = []

    with pytest.raises(ModelError) as raised:
        client_for(fake_server).complete(ask("hi"), pieces.append)

    assert (raised.value.kind, raised.value.retryable) == ("unavailable", True)
    assert raised.value.message == (
        "anthropic:claude-test: the provider is overloaded "
        "(error in the stream, overloaded_error): Overloaded"
    )
    assert pieces == ["Partial"]


def test_a_server_that_does_not_answer_in_time_is_a_timeout(fake_server):
    fake_server.anthropic(SlowResponse(delay=1.0, then=anthropic_message([TextBlock(["late"])])))

    with pytest.raises(ModelError) as raised:
        client_for(fake_server, timeout_seconds=0.2).complete(ask("hi"))

    assert (raised.value.kind, raised.value.retryable) == ("timeout", True)
    assert raised.value.message == "anthropic:claude-test: no answer within 0.2 s."


def test_a_stream_that_stalls_is_a_timeout(fake_server):
    # The SDK lets a read timeout inside the stream through as the transport's own
    # exception; it must still come out as a ModelError.
    stalled = anthropic_message([TextBlock(["Once", " upon", " a", " time"])])
    stalled.stall_after, stalled.stall_seconds = 5, 1.0
    fake_server.anthropic(stalled)
    pieces: list[str] = []

    with pytest.raises(ModelError) as raised:
        client_for(fake_server, timeout_seconds=0.2).complete(ask("a story"), pieces.append)

    assert (raised.value.kind, raised.value.retryable) == ("timeout", True)
    assert pieces == ["Once", " upon"]


def test_a_server_that_cannot_be_reached_is_unavailable():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        closed_port = probe.getsockname()[1]
    client = AnthropicModel("claude-test", profile=profile_for(f"http://127.0.0.1:{closed_port}"))

    with pytest.raises(ModelError) as raised:
        client.complete(ask("hi"))

    assert (raised.value.kind, raised.value.retryable) == ("unavailable", True)
    assert f"cannot reach http://127.0.0.1:{closed_port}" in raised.value.message


def test_get_model_client_builds_the_client_from_the_environment(monkeypatch, fake_server):
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-from-env")
    monkeypatch.setenv("ANTHROPIC_BASE_URL", fake_server.base_url)
    fake_server.anthropic(anthropic_message([TextBlock(["configured"])]))

    client = get_model_client("anthropic:claude-from-env", runtime_config().profiles)
    reply = client.complete(ask("hi"))

    assert client.name == "anthropic:claude-from-env"
    assert reply.text == "configured"
    (request,) = fake_server.requests
    assert request.body["model"] == "claude-from-env"
    assert request.header("authorization") == "Bearer sk-ant-from-env"


@pytest.mark.parametrize("configured", ["", None], ids=["empty", "missing"])
def test_get_model_client_without_a_key_is_an_unavailable_model_error(monkeypatch, configured):
    if configured is None:
        monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    else:
        monkeypatch.setenv("ANTHROPIC_API_KEY", configured)

    with pytest.raises(ModelError) as raised:
        get_model_client("anthropic:claude-from-env", runtime_config().profiles)

    assert (raised.value.kind, raised.value.retryable) == ("unavailable", False)
    assert raised.value.message == (
        "No API key configured for the model profile 'anthropic': set ANTHROPIC_API_KEY"
    )


def test_the_turn_loop_runs_a_calculator_round_trip_through_the_client(
    monkeypatch, fake_server, run_turn_loop
):
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-loop")
    monkeypatch.setenv("ANTHROPIC_BASE_URL", fake_server.base_url)
    fake_server.anthropic(
        anthropic_message(
            [
                TextBlock(["Let me calculate."]),
                StreamedCall("toolu_calc", "calculator", ['{"expression"', ': "6*7"}']),
            ],
            input_tokens=60,
            output_tokens=15,
        ),
        anthropic_message([TextBlock(["6*7 ", "= 42"])], input_tokens=90, output_tokens=6),
    )
    agent = Agent(
        id="calc",
        description="Does arithmetic.",
        model="anthropic:claude-test",
        system_prompt="Use the calculator.",
        toolsets=("calculator",),
    )

    result = run_turn_loop(agent, "What is 6*7?")

    assert result.run is not None
    assert (result.run.status, result.run.output, result.run.error) == (
        "completed",
        "6*7 = 42",
        None,
    )
    assert result.run.usage == Usage(150, 21)
    assert result.deltas == ["Let me calculate.", "6*7 ", "= 42"]
    (call,) = result.store.tool_calls.values()
    assert call["request"] == ToolCallRequest("toolu_calc", "calculator", {"expression": "6*7"})
    assert call["outcome"].result == {"expression": "6*7", "value": 42}

    first, second = fake_server.bodies(ANTHROPIC_PATH)
    assert first["system"] == second["system"]
    assert first["system"] == [
        {"type": "text", "text": "Use the calculator.", "cache_control": CACHED}
    ]
    assert [tool["name"] for tool in first["tools"]] == ["calculator", "read_tool_result"]
    assert second["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "What is 6*7?"}]},
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "Let me calculate."},
                {
                    "type": "tool_use",
                    "id": "toolu_calc",
                    "name": "calculator",
                    "input": {"expression": "6*7"},
                },
            ],
        },
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_calc",
                    "content": json.dumps(
                        {"ok": True, "result": {"expression": "6*7", "value": 42}}
                    ),
                }
            ],
        },
    ]
