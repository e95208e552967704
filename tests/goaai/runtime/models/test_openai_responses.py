"""The Responses API client against a fake ``/v1/responses`` server on 127.0.0.1."""

from __future__ import annotations

import json
import socket

import pytest

from goaai.runtime.agents import Agent
from goaai.runtime.config import ModelProfile, parse_profiles
from goaai.runtime.errors import ModelError
from goaai.runtime.models import ModelRequest, ModelSettings, ToolSpec, get_model_client
from goaai.runtime.models.openai_responses import OpenAIResponsesModel
from goaai.runtime.tools import TOOLSETS
from goaai.runtime.types import Message, ToolCallRequest, Usage
from tests.goaai.runtime.models.fake_providers import (
    RESPONSES_PATH,
    JsonResponse,
    ResponsesReasoning,
    ResponsesText,
    SlowResponse,
    StreamedCall,
    openai_error,
    responses_cut_before_end,
    responses_error_event,
    responses_failed,
    responses_object,
    responses_stream,
    responses_usage,
)

CALCULATOR = TOOLSETS["calculator"]["calculator"]
CALCULATOR_SPEC = ToolSpec(
    name=CALCULATOR.name, description=CALCULATOR.description, parameters=CALCULATOR.json_schema()
)
ENCRYPTED = "gAAAAABo2TA_fake-encrypted-reasoning-of-the-first-turn=="


def profile_for(base_url: str, **options) -> ModelProfile:
    return ModelProfile(
        name="oai", kind="openai-responses", base_url=base_url, api_key="sk-test-key", **options
    )


def client_for(server, **options) -> OpenAIResponsesModel:
    return OpenAIResponsesModel("gpt-5", profile=profile_for(server.openai_base_url, **options))


def ask(text: str, *tools: ToolSpec, **settings) -> ModelRequest:
    return ModelRequest(
        messages=(Message(role="user", content=text),),
        tools=tools,
        settings=ModelSettings(**settings),
    )


def test_a_text_reply_streams_each_piece_and_records_usage_and_model(fake_server):
    fake_server.responses(
        responses_stream(
            [ResponsesText(["The answer", " is", " 42."])], usage=responses_usage(31, 7)
        )
    )
    pieces: list[str] = []

    reply = client_for(fake_server).complete(ask("What is the answer?"), pieces.append)

    assert pieces == ["The answer", " is", " 42."]
    assert reply.text == "The answer is 42."
    assert reply.tool_calls == ()
    assert reply.usage == Usage(input_tokens=31, output_tokens=7)
    assert (reply.finish_reason, reply.reasoning, reply.reasoning_state) == ("stop", "", ())
    # The model the server says answered, not the alias we asked for.
    assert reply.model == "gpt-fake-5-2025-08-07"


def test_the_request_streams_stores_nothing_and_asks_for_the_encrypted_reasoning(fake_server):
    fake_server.responses(responses_stream([ResponsesText(["ok"])]))

    client_for(fake_server).complete(ask("hi"))

    (request,) = fake_server.requests
    assert request.path == RESPONSES_PATH
    assert request.header("authorization") == "Bearer sk-test-key"
    assert request.body == {
        "model": "gpt-5",
        "input": [{"role": "user", "content": "hi"}],
        "stream": True,
        "store": False,
        "include": ["reasoning.encrypted_content"],
    }


def test_the_agents_reasoning_effort_and_limits_are_sent(fake_server):
    fake_server.responses(responses_stream([ResponsesText(["ok"])]))

    client_for(fake_server).complete(
        ask("hi", temperature=0.2, max_output_tokens=640, reasoning_effort="low")
    )

    (body,) = fake_server.bodies(RESPONSES_PATH)
    assert body["reasoning"] == {"effort": "low", "summary": "auto"}
    assert (body["max_output_tokens"], body["temperature"]) == (640, 0.2)


def test_the_profiles_headers_go_with_every_request(fake_server):
    fake_server.responses(responses_stream([ResponsesText(["ok"])]))

    client_for(fake_server, headers=(("X-Tenant", "acme"),)).complete(ask("hi"))

    (request,) = fake_server.requests
    assert request.header("x-tenant") == "acme"


def test_tools_are_sent_as_function_tools_that_are_not_strict(fake_server):
    fake_server.responses(responses_stream([ResponsesText(["ok"])]))

    client_for(fake_server).complete(ask("calculate 1+1", CALCULATOR_SPEC))

    (body,) = fake_server.bodies(RESPONSES_PATH)
    assert body["tools"] == [
        {
            "type": "function",
            "name": "calculator",
            "description": CALCULATOR.description,
            "parameters": CALCULATOR.json_schema(),
            "strict": False,
        }
    ]


def test_parallel_function_calls_are_assembled_each_under_its_own_item(fake_server):
    fake_server.responses(
        responses_stream(
            [
                StreamedCall("call_a1", "calculator", ['{"expr', 'ession": "2 *', ' (3 + 4)"}']),
                StreamedCall("call_b2", "clock_now", ['{"timezone"', ': "Europe/Rome"}']),
            ],
            usage=responses_usage(50, 20),
        )
    )
    pieces: list[str] = []

    reply = client_for(fake_server).complete(ask("sums and time"), pieces.append)

    assert reply.tool_calls == (
        ToolCallRequest(id="call_a1", name="calculator", arguments={"expression": "2 * (3 + 4)"}),
        ToolCallRequest(id="call_b2", name="clock_now", arguments={"timezone": "Europe/Rome"}),
    )
    assert (reply.text, pieces) == ("", [])
    assert reply.finish_reason == "tool_calls"
    assert reply.usage == Usage(50, 20)
    # The call items, whole, to pair each call with its reasoning on the next turn.
    assert [(item["type"], item["id"], item["call_id"]) for item in reply.reasoning_state] == [
        ("function_call", "fc_fake0000", "call_a1"),
        ("function_call", "fc_fake0001", "call_b2"),
    ]


@pytest.mark.parametrize(
    ("fragments", "expected"),
    [
        (['{"expression": "2+', "2"], {"_raw": '{"expression": "2+2'}),
        ([], {}),
    ],
    ids=["truncated-json", "no-arguments"],
)
def test_tool_arguments_that_are_not_a_json_object_are_kept_raw(fake_server, fragments, expected):
    fake_server.responses(responses_stream([StreamedCall("call_x", "calculator", fragments)]))

    reply = client_for(fake_server).complete(ask("calculate", CALCULATOR_SPEC))

    assert reply.tool_calls == (ToolCallRequest("call_x", "calculator", expected),)


def test_the_reasoning_summary_is_the_replys_reasoning_and_its_item_is_kept_whole(fake_server):
    fake_server.responses(
        responses_stream(
            [
                ResponsesReasoning(
                    "rs_fake0001",
                    summary=[["**Checking", " the sum**"], ["Seven", " times six."]],
                    encrypted_content=ENCRYPTED,
                ),
                ResponsesText(["42"]),
            ]
        )
    )
    pieces: list[str] = []

    reply = client_for(fake_server).complete(ask("6*7?", reasoning_effort="medium"), pieces.append)

    assert (reply.text, pieces) == ("42", ["42"])
    assert reply.reasoning == "**Checking the sum**\n\nSeven times six."
    # As output_item.done gave it: the added item's encrypted content is partial.
    assert reply.reasoning_state == (
        {
            "id": "rs_fake0001",
            "type": "reasoning",
            "encrypted_content": ENCRYPTED,
            "summary": [
                {"type": "summary_text", "text": "**Checking the sum**"},
                {"type": "summary_text", "text": "Seven times six."},
            ],
        },
    )


def test_reasoning_text_a_server_shows_is_reasoning_too_and_goes_back_as_content(fake_server):
    reasoning = ResponsesReasoning("rs_oss1", text=["The user wants", " 6*7."])
    fake_server.responses(
        responses_stream(
            [reasoning, StreamedCall("call_1", "calculator", ['{"expression": "6*7"}'])]
        ),
        responses_stream([ResponsesText(["42"])]),
    )
    client = client_for(fake_server)

    first = client.complete(ask("6*7?", CALCULATOR_SPEC))
    client.complete(
        ModelRequest(
            messages=(
                Message(role="user", content="6*7?"),
                Message(
                    role="assistant",
                    tool_calls=first.tool_calls,
                    reasoning_state=first.reasoning_state,
                ),
                Message(role="tool", content='{"ok": true, "result": 42}', tool_call_id="call_1"),
            )
        )
    )

    assert first.reasoning == "The user wants 6*7."
    second = fake_server.bodies(RESPONSES_PATH)[1]
    assert second["input"][1] == {
        "type": "reasoning",
        "id": "rs_oss1",
        "summary": [],
        "content": [{"type": "reasoning_text", "text": "The user wants 6*7."}],
    }


def test_a_conversation_goes_as_instructions_and_input_items(fake_server):
    fake_server.responses(responses_stream([ResponsesText(["It is 14 and 16:05."])]))
    reasoning = {
        "id": "rs_1",
        "type": "reasoning",
        "encrypted_content": ENCRYPTED,
        "summary": [{"type": "summary_text", "text": "Two tools."}],
    }
    conversation = (
        Message(role="system", content="Be brief."),
        Message(role="system", content="The user is in Rome."),
        Message(role="user", content="What is 2*7, and the time?"),
        Message(
            role="assistant",
            content="Let me check.",
            tool_calls=(
                ToolCallRequest("call_1", "calculator", {"expression": "2*7"}),
                ToolCallRequest("call_2", "clock_now", {}),
            ),
            reasoning_state=(
                # Another provider's thinking, from before the agent changed models.
                {"type": "thinking", "thinking": "hm", "signature": "sig"},
                reasoning,
                {"id": "fc_1", "type": "function_call", "call_id": "call_1", "name": "calculator"},
                {"id": "fc_2", "type": "function_call", "call_id": "call_2", "name": "clock_now"},
            ),
        ),
        Message(role="tool", content='{"ok": true, "result": 14}', tool_call_id="call_1"),
        Message(
            role="tool",
            content='{"ok": false, "error": {"kind": "timeout"}}',
            tool_call_id="call_2",
            is_error=True,
        ),
        Message(role="assistant", content="Anything else?"),
        Message(role="user", content="No, thanks."),
    )

    client_for(fake_server).complete(ModelRequest(messages=conversation))

    (body,) = fake_server.bodies(RESPONSES_PATH)
    # The stable prompt first, so that the cached prefix stays the same.
    assert body["instructions"] == "Be brief.\n\nThe user is in Rome."
    assert body["input"] == [
        {"role": "user", "content": "What is 2*7, and the time?"},
        {"role": "assistant", "content": "Let me check."},
        {
            "type": "reasoning",
            "id": "rs_1",
            "summary": [{"type": "summary_text", "text": "Two tools."}],
            "encrypted_content": ENCRYPTED,
        },
        {
            "type": "function_call",
            "call_id": "call_1",
            "name": "calculator",
            "arguments": '{"expression": "2*7"}',
            "id": "fc_1",
        },
        {
            "type": "function_call",
            "call_id": "call_2",
            "name": "clock_now",
            "arguments": "{}",
            "id": "fc_2",
        },
        {
            "type": "function_call_output",
            "call_id": "call_1",
            "output": '{"ok": true, "result": 14}',
        },
        {
            "type": "function_call_output",
            "call_id": "call_2",
            "output": '{"ok": false, "error": {"kind": "timeout"}}',
        },
        {"role": "assistant", "content": "Anything else?"},
        {"role": "user", "content": "No, thanks."},
    ]


def test_reasoning_that_was_never_sent_whole_stays_out_and_so_do_the_call_ids(fake_server):
    fake_server.responses(responses_stream([ResponsesText(["14"])]))
    conversation = (
        Message(role="user", content="2*7?"),
        Message(
            role="assistant",
            tool_calls=(ToolCallRequest("call_1", "calculator", {"expression": "2*7"}),),
            reasoning_state=(
                {"id": "rs_1", "type": "reasoning", "summary": []},
                {"id": "fc_1", "type": "function_call", "call_id": "call_1", "name": "calculator"},
            ),
        ),
        Message(role="tool", content='{"ok": true, "result": 14}', tool_call_id="call_1"),
    )

    client_for(fake_server).complete(ModelRequest(messages=conversation))

    (body,) = fake_server.bodies(RESPONSES_PATH)
    # Nothing was stored: an id alone names an item OpenAI cannot find.
    assert body["input"][1] == {
        "type": "function_call",
        "call_id": "call_1",
        "name": "calculator",
        "arguments": '{"expression": "2*7"}',
    }
    assert len(body["input"]) == 3


def test_the_turn_loop_carries_the_reasoning_across_a_tool_call(
    monkeypatch, settings, fake_server, run_turn_loop
):
    monkeypatch.setenv("RESPONSES_TEST_KEY", "sk-loop")
    settings.GOAAI_MODEL_PROFILES = {
        "oai": {
            "kind": "openai-responses",
            "base_url": fake_server.openai_base_url,
            "api_key_env": "RESPONSES_TEST_KEY",
        }
    }
    fake_server.responses(
        responses_stream(
            [
                ResponsesReasoning(
                    "rs_turn1", summary=[["Use the", " calculator."]], encrypted_content=ENCRYPTED
                ),
                StreamedCall("call_calc", "calculator", ['{"expression"', ': "6*7"}']),
            ],
            usage=responses_usage(60, 15, reasoning=9),
        ),
        responses_stream([ResponsesText(["6*7 ", "= 42"])], usage=responses_usage(90, 6)),
    )
    agent = Agent(
        id="calc",
        description="Does arithmetic.",
        model="oai:gpt-5",
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
    assert result.run.usage == Usage(150, 21, reasoning_tokens=9)
    assert result.deltas == ["6*7 ", "= 42"]
    (call,) = result.store.tool_calls.values()
    assert call["request"] == ToolCallRequest("call_calc", "calculator", {"expression": "6*7"})
    assert call["outcome"].result == {"expression": "6*7", "value": 42}

    first, second = fake_server.bodies(RESPONSES_PATH)
    assert first["instructions"] == second["instructions"] == "Use the calculator."
    assert [tool["name"] for tool in first["tools"]] == ["calculator", "read_tool_result"]
    assert first["input"] == [{"role": "user", "content": "What is 6*7?"}]
    assert second["input"] == [
        {"role": "user", "content": "What is 6*7?"},
        {
            "type": "reasoning",
            "id": "rs_turn1",
            "summary": [{"type": "summary_text", "text": "Use the calculator."}],
            "encrypted_content": ENCRYPTED,
        },
        {
            "type": "function_call",
            "call_id": "call_calc",
            "name": "calculator",
            "arguments": '{"expression": "6*7"}',
            "id": "fc_fake0001",
        },
        {
            "type": "function_call_output",
            "call_id": "call_calc",
            "output": json.dumps({"ok": True, "result": {"expression": "6*7", "value": 42}}),
        },
    ]


def test_usage_counts_cached_and_reasoning_tokens_apart(fake_server):
    fake_server.responses(
        responses_stream(
            [ResponsesText(["ok"])], usage=responses_usage(2006, 300, cached=1920, reasoning=256)
        )
    )

    reply = client_for(fake_server).complete(ask("hi"))

    assert reply.usage == Usage(
        input_tokens=86, output_tokens=300, cached_input_tokens=1920, reasoning_tokens=256
    )
    assert reply.usage.prompt_tokens == 2006


def test_usage_with_cache_writes_leaves_them_out_of_the_full_price_tokens(fake_server):
    usage = responses_usage(1200, 40, cached=0)
    usage["input_tokens_details"]["cache_write_tokens"] = 1024
    fake_server.responses(responses_stream([ResponsesText(["ok"])], usage=usage))

    reply = client_for(fake_server).complete(ask("hi"))

    assert reply.usage == Usage(input_tokens=176, output_tokens=40, cache_write_tokens=1024)


@pytest.mark.parametrize(
    ("reason", "finish"),
    [("max_output_tokens", "length"), ("content_filter", "content_filter")],
)
def test_an_incomplete_response_says_why_it_stopped(fake_server, reason, finish):
    fake_server.responses(
        responses_stream(
            [ResponsesText(["Once upon", " a time"])],
            usage=responses_usage(12, 64),
            incomplete_reason=reason,
        )
    )

    reply = client_for(fake_server).complete(ask("a story", max_output_tokens=64))

    assert (reply.finish_reason, reply.text) == (finish, "Once upon a time")
    assert reply.usage == Usage(12, 64)


def test_a_call_cut_off_by_the_output_limit_is_a_length_reply(fake_server):
    fake_server.responses(
        responses_stream(
            [StreamedCall("call_x", "calculator", ['{"expression": "1+'])],
            incomplete_reason="max_output_tokens",
        )
    )

    reply = client_for(fake_server).complete(ask("calculate", CALCULATOR_SPEC))

    assert reply.finish_reason == "length"
    assert reply.tool_calls == (
        ToolCallRequest("call_x", "calculator", {"_raw": '{"expression": "1+'}),
    )


@pytest.mark.parametrize(
    ("status", "error_type", "code", "kind", "retryable"),
    [
        (401, "invalid_request_error", "invalid_api_key", "unavailable", False),
        (400, "invalid_request_error", "context_length_exceeded", "invalid_call", False),
        (404, "invalid_request_error", "model_not_found", "invalid_call", False),
        (500, "server_error", None, "unavailable", True),
    ],
)
def test_http_errors_become_model_errors_of_the_matching_kind(
    fake_server, status, error_type, code, kind, retryable
):
    fake_server.responses(
        openai_error(status, "Something specific went wrong.", type=error_type, code=code)
    )

    with pytest.raises(ModelError) as raised:
        client_for(fake_server).complete(ask("hi"))

    assert (raised.value.kind, raised.value.retryable) == (kind, retryable)
    assert raised.value.message.startswith("oai:gpt-5: ")
    assert f"HTTP {status}" in raised.value.message
    assert raised.value.message.endswith(": Something specific went wrong.")
    # max_retries=0: the client asked once, and the caller decides about retrying.
    assert len(fake_server.requests) == 1


def test_a_rate_limit_is_retryable_and_says_when(fake_server):
    fake_server.responses(
        openai_error(
            429,
            "Rate limit reached for gpt-5 on tokens per min (TPM).",
            type="tokens",
            code="rate_limit_exceeded",
            headers={"retry-after": "7"},
        )
    )

    with pytest.raises(ModelError) as raised:
        client_for(fake_server).complete(ask("hi"))

    assert (raised.value.kind, raised.value.retryable) == ("rate_limited", True)
    assert raised.value.retry_after == 7.0
    assert raised.value.message == (
        "oai:gpt-5: the provider is rate limiting us (HTTP 429, rate_limit_exceeded); "
        "retry after 7 s: Rate limit reached for gpt-5 on tokens per min (TPM)."
    )


@pytest.mark.parametrize(
    ("param", "left_out"),
    [
        # A model that does not reason.
        ("include", "include"),
        # An organization OpenAI has not verified.
        ("reasoning.summary", "summary"),
    ],
)
def test_an_optional_setting_the_server_refuses_is_left_out_from_then_on(
    fake_server, param, left_out
):
    fake_server.responses(
        openai_error(400, "Not supported with this model or organization.", param=param),
        responses_stream([ResponsesText(["first"])]),
        responses_stream([ResponsesText(["second"])]),
    )
    client = client_for(fake_server)

    first = client.complete(ask("hi", reasoning_effort="low"))
    second = client.complete(ask("again", reasoning_effort="low"))

    assert (first.text, second.text) == ("first", "second")
    refused, retried, later = fake_server.bodies(RESPONSES_PATH)
    assert refused["include"] == ["reasoning.encrypted_content"]
    assert refused["reasoning"] == {"effort": "low", "summary": "auto"}
    for body in (retried, later):
        sent = body if left_out == "include" else body["reasoning"]
        assert left_out not in sent
    assert retried["reasoning"]["effort"] == "low"


def test_a_refused_setting_that_is_not_optional_is_an_error_asked_once(fake_server):
    fake_server.responses(
        openai_error(400, "Unsupported value: 'minimal'.", param="reasoning.effort"),
    )

    with pytest.raises(ModelError) as effort:
        client_for(fake_server).complete(ask("hi", reasoning_effort="minimal"))

    assert effort.value.kind == "invalid_call"
    assert len(fake_server.requests) == 1


def test_a_setting_refused_again_without_it_is_not_asked_a_third_time(fake_server):
    fake_server.responses(
        openai_error(400, "Encrypted content is not supported.", param="include"),
        openai_error(400, "Encrypted content is still not supported.", param="include"),
    )

    with pytest.raises(ModelError) as raised:
        client_for(fake_server).complete(ask("hi"))

    assert raised.value.message.endswith(": Encrypted content is still not supported.")
    assert len(fake_server.requests) == 2


@pytest.mark.parametrize(
    ("code", "nested", "kind"),
    [
        ("server_error", False, "unavailable"),
        ("rate_limit_exceeded", True, "rate_limited"),
    ],
    ids=["documented-shape", "nested-under-error"],
)
def test_an_error_event_mid_stream_is_a_retryable_model_error(fake_server, code, nested, kind):
    fake_server.responses(
        responses_error_event(
            code, "The server had an error processing your request.", nested=nested
        )
    )
    pieces: list[str] = []

    with pytest.raises(ModelError) as raised:
        client_for(fake_server).complete(ask("hi"), pieces.append)

    assert pieces == ["Partial"]
    assert (raised.value.kind, raised.value.retryable) == (kind, True)
    assert f"error in the stream, {code}" in raised.value.message
    assert raised.value.message.endswith(": The server had an error processing your request.")


@pytest.mark.parametrize(
    ("code", "kind", "retryable"),
    [
        ("server_error", "unavailable", True),
        ("rate_limit_exceeded", "rate_limited", True),
        ("invalid_prompt", "internal", False),
    ],
)
def test_a_failed_response_is_a_model_error_of_its_codes_kind(fake_server, code, kind, retryable):
    fake_server.responses(
        responses_failed(code, "The response failed.", items=[ResponsesText(["Half"])])
    )

    with pytest.raises(ModelError) as raised:
        client_for(fake_server).complete(ask("hi"))

    assert (raised.value.kind, raised.value.retryable) == (kind, retryable)
    assert raised.value.message.endswith(": The response failed.")


def test_a_stream_that_ends_before_the_response_is_complete_is_retryable(fake_server):
    fake_server.responses(
        responses_cut_before_end([StreamedCall("call_1", "calculator", ['{"expression": "1+1"}'])])
    )

    with pytest.raises(ModelError) as raised:
        client_for(fake_server).complete(ask("calculate", CALCULATOR_SPEC))

    assert (raised.value.kind, raised.value.retryable) == ("unavailable", True)
    assert raised.value.message == (
        "oai:gpt-5: the stream ended before the reply was complete: "
        "no response.completed or response.incomplete event."
    )


def test_a_connection_reset_mid_stream_is_retryable(fake_server):
    broken = responses_stream([ResponsesText(["Once", " upon", " a", " time"])])
    broken.reset_after = 6
    fake_server.responses(broken)
    pieces: list[str] = []

    with pytest.raises(ModelError) as raised:
        client_for(fake_server).complete(ask("a story"), pieces.append)

    assert (raised.value.kind, raised.value.retryable) == ("unavailable", True)
    assert "the stream ended before the reply was complete" in raised.value.message
    assert pieces == ["Once", " upon"]


def test_a_server_that_does_not_answer_in_time_is_a_timeout(fake_server):
    fake_server.responses(SlowResponse(delay=1.0, then=responses_stream([ResponsesText(["late"])])))

    with pytest.raises(ModelError) as raised:
        client_for(fake_server).complete(ask("hi", timeout_seconds=0.2))

    assert (raised.value.kind, raised.value.retryable) == ("timeout", True)
    assert raised.value.message == "oai:gpt-5: no answer within 0.2 s."


def test_a_server_that_cannot_be_reached_is_unavailable():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        closed_port = probe.getsockname()[1]
    client = OpenAIResponsesModel(
        "gpt-5", profile=profile_for(f"http://127.0.0.1:{closed_port}/v1")
    )

    with pytest.raises(ModelError) as raised:
        client.complete(ask("hi"))

    assert (raised.value.kind, raised.value.retryable) == ("unavailable", True)
    assert f"cannot reach http://127.0.0.1:{closed_port}/v1/" in raised.value.message


def test_a_server_that_ignores_stream_true_is_reported_not_taken_for_silence(fake_server):
    fake_server.responses(JsonResponse(200, responses_object(status="completed")))

    with pytest.raises(ModelError) as raised:
        client_for(fake_server).complete(ask("hi"))

    assert raised.value.kind == "internal"
    assert "no streamed events" in raised.value.message


def test_an_exception_from_on_delta_is_not_disguised_as_a_provider_error(fake_server):
    fake_server.responses(responses_stream([ResponsesText(["a", "b"])]))

    def explode(piece: str) -> None:
        raise RuntimeError("subscriber went away")

    with pytest.raises(RuntimeError, match="subscriber went away"):
        client_for(fake_server).complete(ask("hi"), explode)


def test_get_model_client_builds_a_responses_client_for_such_a_profile(fake_server):
    profiles = parse_profiles(
        {
            "oai": {
                "kind": "openai-responses",
                "base_url": fake_server.openai_base_url,
                "api_key_env": "OAI_KEY",
            }
        },
        {"OAI_KEY": "sk-from-env"},
    )
    fake_server.responses(responses_stream([ResponsesText(["configured"])]))

    client = get_model_client("oai:gpt-5-mini", profiles)
    reply = client.complete(ask("hi"))

    assert isinstance(client, OpenAIResponsesModel)
    assert client.name == "oai:gpt-5-mini"
    assert reply.text == "configured"
    (request,) = fake_server.requests
    assert (request.path, request.body["model"]) == (RESPONSES_PATH, "gpt-5-mini")
    assert request.header("authorization") == "Bearer sk-from-env"
