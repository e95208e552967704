"""The OpenAI-compatible client against a fake Chat Completions server on 127.0.0.1."""

from __future__ import annotations

import json
import socket

import pytest

from goaai.runtime.agents import Agent
from goaai.runtime.config import ModelProfile
from goaai.runtime.errors import ModelError
from goaai.runtime.models import ModelRequest, ModelSettings, ToolSpec, get_model_client
from goaai.runtime.models.openai_compat import OpenAICompatibleModel
from goaai.runtime.tools import TOOLSETS
from goaai.runtime.types import Message, ToolCallRequest, Usage
from goaai.runtime_settings import runtime_config
from tests.goaai.runtime.models.fake_providers import (
    OPENAI_PATH,
    SlowResponse,
    StreamedCall,
    openai_completion,
    openai_error,
    openai_sse,
    openai_text,
    openai_text_chunks,
    openai_tool_calls,
)

CALCULATOR = TOOLSETS["calculator"]["calculator"]
CALCULATOR_SPEC = ToolSpec(
    name=CALCULATOR.name, description=CALCULATOR.description, parameters=CALCULATOR.json_schema()
)


def profile_for(base_url: str, **options) -> ModelProfile:
    return ModelProfile(
        name="openai", kind="openai", base_url=base_url, api_key="sk-test-key", **options
    )


def client_for(server, **options) -> OpenAICompatibleModel:
    return OpenAICompatibleModel("gpt-test", profile=profile_for(server.openai_base_url, **options))


def ask(text: str, *tools: ToolSpec, **settings) -> ModelRequest:
    return ModelRequest(
        messages=(Message(role="user", content=text),),
        tools=tools,
        settings=ModelSettings(**settings),
    )


def test_a_text_reply_streams_each_piece_and_records_usage_and_model(fake_server):
    fake_server.openai(openai_text(["The answer", " is", " 42."], usage=(31, 7)))
    pieces: list[str] = []

    reply = client_for(fake_server).complete(ask("What is the answer?"), pieces.append)

    assert pieces == ["The answer", " is", " 42."]
    assert reply.text == "".join(pieces)
    assert reply.tool_calls == ()
    assert reply.usage == Usage(input_tokens=31, output_tokens=7)
    assert (reply.finish_reason, reply.reasoning, reply.reasoning_state) == ("stop", "", ())
    # The model the server says answered, not the alias we asked for.
    assert reply.model == "gpt-fake-2025-01-01"


def test_the_request_streams_with_usage_and_authenticates_with_the_key(fake_server):
    fake_server.openai(openai_text(["ok"]))

    client_for(fake_server).complete(ask("hi"))

    (request,) = fake_server.requests
    assert request.path == OPENAI_PATH
    assert request.header("authorization") == "Bearer sk-test-key"
    assert request.body == {
        "model": "gpt-test",
        "messages": [{"role": "user", "content": "hi"}],
        "stream": True,
        "stream_options": {"include_usage": True},
    }


def test_the_agents_model_settings_are_sent(fake_server):
    fake_server.openai(openai_text(["ok"]))

    client_for(fake_server).complete(
        ask("hi", temperature=0.2, max_output_tokens=64, reasoning_effort="low")
    )

    (body,) = fake_server.bodies(OPENAI_PATH)
    # max_tokens, not max_completion_tokens: the one Ollama, vLLM and llama.cpp read.
    assert (body["temperature"], body["max_tokens"], body["reasoning_effort"]) == (0.2, 64, "low")
    assert "max_completion_tokens" not in body


def test_the_profiles_headers_go_with_every_request(fake_server):
    fake_server.openai(openai_text(["ok"]))

    client_for(fake_server, headers=(("X-Tenant", "acme"),)).complete(ask("hi"))

    (request,) = fake_server.requests
    assert request.header("x-tenant") == "acme"


def test_tool_calls_are_assembled_from_fragments_in_order(fake_server):
    fake_server.openai(
        openai_tool_calls(
            [
                StreamedCall("call_a1", "calculator", ['{"expr', 'ession": "2 *', ' (3 + 4)"}']),
                StreamedCall("call_b2", "clock_now", ['{"timezone"', ': "Europe/Rome"}']),
            ],
            usage=(50, 20),
        )
    )
    pieces: list[str] = []

    reply = client_for(fake_server).complete(ask("sums and time"), pieces.append)

    assert reply.tool_calls == (
        ToolCallRequest(id="call_a1", name="calculator", arguments={"expression": "2 * (3 + 4)"}),
        ToolCallRequest(id="call_b2", name="clock_now", arguments={"timezone": "Europe/Rome"}),
    )
    assert reply.text == ""
    assert pieces == []
    assert reply.usage == Usage(50, 20)
    assert reply.finish_reason == "tool_calls"


def test_tools_are_sent_as_functions_with_their_json_schema(fake_server):
    fake_server.openai(openai_text(["ok"]), openai_text(["ok"]))
    client = client_for(fake_server)

    client.complete(ask("calculate 1+1", CALCULATOR_SPEC))
    client.complete(ask("no tools"))

    with_tools, without_tools = fake_server.bodies(OPENAI_PATH)
    assert with_tools["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "calculator",
                "description": CALCULATOR.description,
                "parameters": CALCULATOR.json_schema(),
            },
        }
    ]
    assert with_tools["tools"][0]["function"]["parameters"]["required"] == ["expression"]
    # OpenAI rejects an empty tool list, so none is sent.
    assert "tools" not in without_tools


def test_a_conversation_with_tool_calls_and_results_is_sent_in_chat_completions_shape(
    fake_server,
):
    fake_server.openai(openai_text(["It is 14 and 16:05."]))
    conversation = (
        Message(role="system", content="Be brief."),
        Message(role="user", content="What is 2*7, and the time?"),
        Message(
            role="assistant",
            tool_calls=(
                ToolCallRequest("call_1", "calculator", {"expression": "2*7"}),
                ToolCallRequest("call_2", "clock_now", {}),
            ),
        ),
        Message(role="tool", content='{"ok": true, "result": 14}', tool_call_id="call_1"),
        Message(role="tool", content='{"ok": true, "result": "16:05"}', tool_call_id="call_2"),
        Message(role="assistant", content="Anything else?"),
        Message(role="user", content="No, thanks."),
    )

    client_for(fake_server).complete(ModelRequest(messages=conversation))

    (body,) = fake_server.bodies(OPENAI_PATH)
    assert body["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "What is 2*7, and the time?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "calculator", "arguments": '{"expression": "2*7"}'},
                },
                {
                    "id": "call_2",
                    "type": "function",
                    "function": {"name": "clock_now", "arguments": "{}"},
                },
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": '{"ok": true, "result": 14}'},
        {"role": "tool", "tool_call_id": "call_2", "content": '{"ok": true, "result": "16:05"}'},
        {"role": "assistant", "content": "Anything else?"},
        {"role": "user", "content": "No, thanks."},
    ]


@pytest.mark.parametrize(
    ("fragments", "expected"),
    [
        (['{"expression": "2+', "2"], {"_raw": '{"expression": "2+2'}),
        (['["2+2"]'], {"_raw": '["2+2"]'}),
        ([], {}),
    ],
    ids=["truncated-json", "not-an-object", "no-arguments"],
)
def test_tool_arguments_that_are_not_a_json_object_are_kept_raw(fake_server, fragments, expected):
    fake_server.openai(openai_tool_calls([StreamedCall("call_x", "calculator", fragments)]))

    reply = client_for(fake_server).complete(ask("calculate", CALCULATOR_SPEC))

    assert reply.tool_calls == (ToolCallRequest("call_x", "calculator", expected),)


@pytest.mark.parametrize(
    ("status", "error_type", "code", "kind", "retryable"),
    [
        (401, "invalid_request_error", "invalid_api_key", "unavailable", False),
        (
            403,
            "invalid_request_error",
            "unsupported_country_region_territory",
            "unavailable",
            False,
        ),
        (429, "requests", "rate_limit_exceeded", "rate_limited", True),
        (500, "server_error", None, "unavailable", True),
        (503, "server_error", None, "unavailable", True),
        (400, "invalid_request_error", "context_length_exceeded", "invalid_call", False),
        (404, "invalid_request_error", "model_not_found", "invalid_call", False),
        (422, "invalid_request_error", None, "invalid_call", False),
        (409, "invalid_request_error", None, "internal", False),
    ],
)
def test_http_errors_become_model_errors_of_the_matching_kind(
    fake_server, status, error_type, code, kind, retryable
):
    fake_server.openai(
        openai_error(status, "Something specific went wrong.", type=error_type, code=code)
    )

    with pytest.raises(ModelError) as raised:
        client_for(fake_server).complete(ask("hi"))

    assert (raised.value.kind, raised.value.retryable) == (kind, retryable)
    assert raised.value.message.startswith("openai:gpt-test: ")
    assert f"HTTP {status}" in raised.value.message
    assert raised.value.message.endswith(": Something specific went wrong.")
    # max_retries=0: the client asked once, and the caller decides about retrying.
    assert len(fake_server.requests) == 1


def test_a_rate_limit_says_when_to_retry(fake_server):
    fake_server.openai(
        openai_error(
            429,
            "Rate limit reached for requests.",
            type="requests",
            code="rate_limit_exceeded",
            headers={"retry-after": "7"},
        )
    )

    with pytest.raises(ModelError) as raised:
        client_for(fake_server).complete(ask("hi"))

    assert raised.value.kind == "rate_limited"
    assert raised.value.retry_after == 7.0
    assert raised.value.message == (
        "openai:gpt-test: the provider is rate limiting us (HTTP 429, rate_limit_exceeded); "
        "retry after 7 s: Rate limit reached for requests."
    )


def test_retry_after_ms_is_read_before_retry_after(fake_server):
    fake_server.openai(
        openai_error(
            503,
            "The engine is currently overloaded.",
            type="server_error",
            headers={"retry-after-ms": "1500", "retry-after": "2"},
        )
    )

    with pytest.raises(ModelError) as raised:
        client_for(fake_server).complete(ask("hi"))

    assert (raised.value.kind, raised.value.retryable) == ("unavailable", True)
    assert raised.value.retry_after == 1.5
    assert "; retry after 1.5 s: The engine" in raised.value.message


def test_an_error_sent_inside_the_stream_is_a_model_error(fake_server):
    chunks = openai_text_chunks(["Partial"], usage=None)[:2]
    chunks.append({"error": {"message": "The server had an error.", "type": "server_error"}})
    fake_server.openai(openai_sse(chunks))

    with pytest.raises(ModelError) as raised:
        client_for(fake_server).complete(ask("hi"))

    assert (raised.value.kind, raised.value.retryable) == ("unavailable", True)
    assert "The server had an error." in raised.value.message


def test_a_server_that_does_not_answer_in_time_is_a_timeout(fake_server):
    fake_server.openai(SlowResponse(delay=1.0, then=openai_text(["late"])))

    with pytest.raises(ModelError) as raised:
        client_for(fake_server, timeout_seconds=0.2).complete(ask("hi"))

    assert (raised.value.kind, raised.value.retryable) == ("timeout", True)
    assert raised.value.message == "openai:gpt-test: no answer within 0.2 s."


def test_the_agents_timeout_bounds_the_request(fake_server):
    fake_server.openai(SlowResponse(delay=1.0, then=openai_text(["late"])))

    with pytest.raises(ModelError) as raised:
        client_for(fake_server).complete(ask("hi", timeout_seconds=0.2))

    assert raised.value.message == "openai:gpt-test: no answer within 0.2 s."


def test_a_stream_that_stalls_is_a_timeout(fake_server):
    stalled = openai_text(["Once", " upon", " a", " time"])
    stalled.stall_after, stalled.stall_seconds = 2, 1.0
    fake_server.openai(stalled)
    pieces: list[str] = []

    with pytest.raises(ModelError) as raised:
        client_for(fake_server, timeout_seconds=0.2).complete(ask("a story"), pieces.append)

    assert (raised.value.kind, raised.value.retryable) == ("timeout", True)
    assert pieces == ["Once"]


def test_a_server_that_cannot_be_reached_is_unavailable():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        closed_port = probe.getsockname()[1]
    client = OpenAICompatibleModel(
        "gpt-test", profile=profile_for(f"http://127.0.0.1:{closed_port}/v1")
    )

    with pytest.raises(ModelError) as raised:
        client.complete(ask("hi"))

    assert (raised.value.kind, raised.value.retryable) == ("unavailable", True)
    assert f"cannot reach http://127.0.0.1:{closed_port}/v1/" in raised.value.message


def test_a_server_that_ignores_stream_true_is_reported_not_taken_for_silence(fake_server):
    fake_server.openai(openai_completion("A whole answer at once."))

    with pytest.raises(ModelError) as raised:
        client_for(fake_server).complete(ask("hi"))

    assert raised.value.kind == "internal"
    assert "no streamed chunks" in raised.value.message


def test_an_exception_from_on_delta_is_not_disguised_as_a_provider_error(fake_server):
    fake_server.openai(openai_text(["a", "b"]))

    def explode(piece: str) -> None:
        raise RuntimeError("subscriber went away")

    with pytest.raises(RuntimeError, match="subscriber went away"):
        client_for(fake_server).complete(ask("hi"), explode)


def test_get_model_client_builds_the_client_from_the_environment(monkeypatch, fake_server):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-from-env")
    monkeypatch.setenv("OPENAI_BASE_URL", fake_server.openai_base_url)
    fake_server.openai(openai_text(["configured"]))

    client = get_model_client("openai:llama3.2:3b", runtime_config().profiles)
    reply = client.complete(ask("hi"))

    assert client.name == "openai:llama3.2:3b"
    assert reply.text == "configured"
    (request,) = fake_server.requests
    assert request.body["model"] == "llama3.2:3b"
    assert request.header("authorization") == "Bearer sk-from-env"


@pytest.mark.parametrize("configured", ["", None], ids=["empty", "missing"])
def test_get_model_client_without_a_key_is_an_unavailable_model_error(monkeypatch, configured):
    if configured is None:
        monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    else:
        monkeypatch.setenv("OPENAI_API_KEY", configured)

    with pytest.raises(ModelError) as raised:
        get_model_client("openai:gpt-4o-mini", runtime_config().profiles)

    assert (raised.value.kind, raised.value.retryable) == ("unavailable", False)
    assert raised.value.message.startswith(
        "No API key configured for the model profile 'openai': set OPENAI_API_KEY"
    )


def test_the_turn_loop_runs_a_calculator_round_trip_through_the_client(
    monkeypatch, fake_server, run_turn_loop
):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-loop")
    monkeypatch.setenv("OPENAI_BASE_URL", fake_server.openai_base_url)
    fake_server.openai(
        openai_tool_calls(
            [StreamedCall("call_calc", "calculator", ['{"expression"', ': "6*7"}'])],
            usage=(60, 15),
        ),
        openai_text(["6*7 ", "= 42"], usage=(90, 6)),
    )
    agent = Agent(
        id="calc",
        description="Does arithmetic.",
        model="openai:gpt-test",
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
    assert result.deltas == ["6*7 ", "= 42"]
    (call,) = result.store.tool_calls.values()
    assert call["request"] == ToolCallRequest("call_calc", "calculator", {"expression": "6*7"})
    assert call["outcome"].result == {"expression": "6*7", "value": 42}

    first, second = fake_server.bodies(OPENAI_PATH)
    assert [tool["function"]["name"] for tool in first["tools"]] == [
        "calculator",
        "read_tool_result",
    ]
    assert first["messages"] == [
        {"role": "system", "content": "Use the calculator."},
        {"role": "user", "content": "What is 6*7?"},
    ]
    assert second["messages"][2:] == [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_calc",
                    "type": "function",
                    "function": {"name": "calculator", "arguments": '{"expression": "6*7"}'},
                }
            ],
        },
        {
            "role": "tool",
            "tool_call_id": "call_calc",
            "content": json.dumps({"ok": True, "result": {"expression": "6*7", "value": 42}}),
        },
    ]


def test_garbled_tool_arguments_get_an_invalid_call_answer_and_the_run_goes_on(
    monkeypatch, fake_server, run_turn_loop
):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-loop")
    monkeypatch.setenv("OPENAI_BASE_URL", fake_server.openai_base_url)
    fake_server.openai(
        openai_tool_calls([StreamedCall("call_bad", "calculator", ['{"expression": 6*'])]),
        openai_text(["Sorry, I could not calculate that."]),
    )
    agent = Agent(
        id="calc", description="Does arithmetic.", model="openai:gpt-test", toolsets=("calculator",)
    )

    result = run_turn_loop(agent, "What is 6*7?")

    assert result.run is not None
    assert (result.run.status, result.run.output) == (
        "completed",
        "Sorry, I could not calculate that.",
    )
    (call,) = result.store.tool_calls.values()
    assert call["request"].arguments == {"_raw": '{"expression": 6*'}
    assert call["outcome"].error_kind == "invalid_call"
    tool_message = fake_server.bodies(OPENAI_PATH)[1]["messages"][-1]
    assert tool_message["role"] == "tool"
    assert json.loads(tool_message["content"])["error"]["kind"] == "invalid_call"
