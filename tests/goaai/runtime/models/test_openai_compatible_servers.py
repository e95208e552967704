"""The OpenAI-compatible client against what Ollama, vLLM, llama.cpp and other
compatible servers really stream, each server's quirks in its own fixture."""

from __future__ import annotations

import re

import pytest

from goaai.runtime.config import ModelProfile
from goaai.runtime.errors import ModelError
from goaai.runtime.models import ModelRequest, ModelSettings
from goaai.runtime.models.openai_compat import OpenAICompatibleModel
from goaai.runtime.types import Message, ToolCallRequest, Usage
from tests.goaai.runtime.models.fake_providers import (
    OPENAI_PATH,
    StreamedCall,
    WholeCall,
    llamacpp_tool_calls,
    ollama_stream,
    openai_sse,
    openai_stream_error,
    openai_text,
    openai_text_chunks,
    openai_text_with_usage_on_finish,
    openai_tool_calls_resending_id_and_name,
    openai_tool_calls_without_index,
    vllm_stream,
)

GENERATED_ID = re.compile(r"call_[0-9a-f]{24}")


def client_for(server) -> OpenAICompatibleModel:
    profile = ModelProfile(
        name="local", kind="openai", base_url=server.openai_base_url, api_key="local"
    )
    return OpenAICompatibleModel("qwen3:8b", profile=profile)


def ask(text: str = "echo a and b", **settings) -> ModelRequest:
    return ModelRequest(
        messages=(Message(role="user", content=text),), settings=ModelSettings(**settings)
    )


# Tool calls


def test_ollamas_parallel_calls_all_at_index_0_stay_separate_calls(fake_server):
    fake_server.openai(
        ollama_stream(
            calls=[
                WholeCall("call_wteop8bt", "echo", '{"text": "a"}'),
                WholeCall("call_rk2xye1l", "echo", '{"text": "b"}'),
            ]
        )
    )

    reply = client_for(fake_server).complete(ask())

    assert reply.tool_calls == (
        ToolCallRequest("call_wteop8bt", "echo", {"text": "a"}),
        ToolCallRequest("call_rk2xye1l", "echo", {"text": "b"}),
    )
    # Ollama says "stop" after tool calls; the reply still asks for tools.
    assert reply.finish_reason == "tool_calls"
    assert reply.usage == Usage(input_tokens=85, output_tokens=31)


def test_whole_calls_at_one_index_without_ids_are_told_apart_by_name(fake_server):
    fake_server.openai(
        ollama_stream(
            calls=[
                WholeCall(None, "echo", '{"text": "a"}'),
                WholeCall(None, "echo", '{"text": "b"}'),
                WholeCall(None, "clock_now", ""),
                WholeCall(None, "calculator", '{"expression": "1+1"}'),
            ]
        )
    )

    reply = client_for(fake_server).complete(ask())

    assert [(call.name, call.arguments) for call in reply.tool_calls] == [
        ("echo", {"text": "a"}),
        ("echo", {"text": "b"}),
        ("clock_now", {}),
        ("calculator", {"expression": "1+1"}),
    ]
    ids = [call.id for call in reply.tool_calls]
    assert all(GENERATED_ID.fullmatch(call_id) for call_id in ids)
    assert len(set(ids)) == 4


def test_fragments_without_an_index_continue_the_latest_call(fake_server):
    fake_server.openai(
        openai_tool_calls_without_index(
            [
                StreamedCall("call_1", "echo", ['{"te', 'xt": "a"}']),
                StreamedCall("call_2", "calculator", ['{"expression"', ': "2*3"}']),
            ]
        )
    )

    reply = client_for(fake_server).complete(ask())

    assert reply.tool_calls == (
        ToolCallRequest("call_1", "echo", {"text": "a"}),
        ToolCallRequest("call_2", "calculator", {"expression": "2*3"}),
    )


def test_an_id_and_name_resent_with_every_fragment_are_not_repeated(fake_server):
    fake_server.openai(
        openai_tool_calls_resending_id_and_name(
            [
                StreamedCall("call_1", "echo", ['{"te', 'xt": ', '"a"}']),
                StreamedCall("call_2", "echo", ['{"text": "b"}']),
            ]
        )
    )

    reply = client_for(fake_server).complete(ask())

    assert reply.tool_calls == (
        ToolCallRequest("call_1", "echo", {"text": "a"}),
        ToolCallRequest("call_2", "echo", {"text": "b"}),
    )


def test_vllm_calls_without_ids_get_generated_ids(fake_server):
    fake_server.openai(
        vllm_stream(
            calls=[
                StreamedCall("", "echo", ['{"text": ', '"a"}']),
                StreamedCall("", "echo", ['{"text": ', '"b"}']),
            ]
        )
    )

    reply = client_for(fake_server).complete(ask())

    first, second = reply.tool_calls
    assert (first.name, first.arguments, second.arguments) == ("echo", {"text": "a"}, {"text": "b"})
    assert GENERATED_ID.fullmatch(first.id)
    assert GENERATED_ID.fullmatch(second.id)
    assert first.id != second.id
    assert reply.finish_reason == "tool_calls"


def test_llamacpp_whole_calls_usage_with_cached_tokens_and_timings(fake_server):
    fake_server.openai(
        llamacpp_tool_calls(
            [
                WholeCall("Xk3m9QpLw2RtY7vB1nZc5dFg8hJs0aEu", "echo", '{"text":"a"}'),
                WholeCall("P4oI6uY2tR8eW0qA3sD5fG7hJ9kL1zXc", "clock_now", "{}"),
            ],
            usage=(1085, 47),
            cached_tokens=1024,
        )
    )

    reply = client_for(fake_server).complete(ask())

    assert reply.tool_calls == (
        ToolCallRequest("Xk3m9QpLw2RtY7vB1nZc5dFg8hJs0aEu", "echo", {"text": "a"}),
        ToolCallRequest("P4oI6uY2tR8eW0qA3sD5fG7hJ9kL1zXc", "clock_now", {}),
    )
    assert reply.finish_reason == "tool_calls"
    assert reply.usage == Usage(input_tokens=61, output_tokens=47, cached_input_tokens=1024)


# Reasoning


@pytest.mark.parametrize("field", ["reasoning_content", "reasoning"])
def test_vllm_reasoning_is_kept_apart_from_the_answer(fake_server, field):
    fake_server.openai(
        vllm_stream(
            reasoning=["The user wants ", "a greeting."],
            pieces=["Hello", "!"],
            reasoning_field=field,
        )
    )
    pieces: list[str] = []

    reply = client_for(fake_server).complete(ask("greet me"), pieces.append)

    assert reply.reasoning == "The user wants a greeting."
    assert (reply.text, pieces) == ("Hello!", ["Hello", "!"])
    # Chat Completions servers take no reasoning back.
    assert reply.reasoning_state == ()
    assert reply.finish_reason == "stop"


def test_ollama_thinking_then_a_tool_call(fake_server):
    fake_server.openai(
        ollama_stream(
            reasoning=["I should ", "echo it."],
            calls=[WholeCall("call_7fq2", "echo", '{"text": "a"}')],
        )
    )
    pieces: list[str] = []

    reply = client_for(fake_server).complete(ask(), pieces.append)

    assert reply.reasoning == "I should echo it."
    assert (reply.text, pieces) == ("", [])
    assert reply.tool_calls == (ToolCallRequest("call_7fq2", "echo", {"text": "a"}),)


def test_reasoning_state_and_failed_tools_are_sent_as_chat_completions_takes_them(fake_server):
    fake_server.openai(openai_text(["Sorry."]))
    conversation = (
        Message(role="user", content="echo a"),
        Message(
            role="assistant",
            tool_calls=(ToolCallRequest("call_1", "echo", {"text": "a"}),),
            reasoning_state=({"type": "reasoning_content", "text": "I should echo."},),
        ),
        Message(
            role="tool",
            content='{"ok": false, "error": {"kind": "unavailable", "message": "down"}}',
            tool_call_id="call_1",
            is_error=True,
        ),
    )

    client_for(fake_server).complete(ModelRequest(messages=conversation))

    (body,) = fake_server.bodies(OPENAI_PATH)
    assert body["messages"][1:] == [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "echo", "arguments": '{"text": "a"}'},
                }
            ],
        },
        {
            "role": "tool",
            "tool_call_id": "call_1",
            "content": '{"ok": false, "error": {"kind": "unavailable", "message": "down"}}',
        },
    ]


# Usage and the end of the reply


def test_cached_prompt_tokens_and_reasoning_tokens_are_counted_apart(fake_server):
    fake_server.openai(
        openai_text(["ok"], usage=(2000, 300), cached_tokens=1536, reasoning_tokens=256)
    )

    reply = client_for(fake_server).complete(ask())

    assert reply.usage == Usage(
        input_tokens=464, output_tokens=300, cached_input_tokens=1536, reasoning_tokens=256
    )
    assert reply.usage.prompt_tokens == 2000


def test_usage_on_the_chunk_with_the_finish_reason(fake_server):
    fake_server.openai(openai_text_with_usage_on_finish(["fine"], usage=(44, 3)))

    reply = client_for(fake_server).complete(ask())

    assert (reply.text, reply.usage) == ("fine", Usage(44, 3))


@pytest.mark.parametrize(
    ("sent", "finish_reason"),
    [
        ("stop", "stop"),
        ("length", "length"),
        ("content_filter", "content_filter"),
        ("function_call", "tool_calls"),
        ("abort", "other"),
    ],
)
def test_finish_reasons_are_said_in_goaais_words(fake_server, sent, finish_reason):
    fake_server.openai(openai_sse(openai_text_chunks(["cut"], finish_reason=sent)))

    reply = client_for(fake_server).complete(ask())

    assert reply.finish_reason == finish_reason


def test_fields_of_the_wrong_type_are_passed_over(fake_server):
    # Chunks are read as the JSON they are: a server's odd field is left out, the
    # rest of the chunk and of the stream still count.
    chunks = openai_text_chunks(["Hello", " there"])
    chunks[1]["choices"][0]["delta"]["refusal"] = 5
    chunks[1]["choices"][0]["delta"]["tool_calls"] = "none"
    chunks[2]["choices"].append(None)
    odd = [{"choices": None, "model": 7}, {"choices": [{"delta": None, "index": "0"}]}]
    fake_server.openai(openai_sse([*chunks[:2], *odd, *chunks[2:]]))

    reply = client_for(fake_server).complete(ask())

    assert reply.text == "Hello there"
    assert reply.tool_calls == ()
    assert reply.finish_reason == "stop"
    assert reply.usage == Usage(input_tokens=12, output_tokens=5)


def test_a_chunk_that_is_not_a_json_object_is_an_error_that_names_it(fake_server):
    chunks = openai_text_chunks(["Hello"])
    fake_server.openai(openai_sse([chunks[0], "not a chunk", *chunks[1:]]))

    with pytest.raises(ModelError) as raised:
        client_for(fake_server).complete(ask())

    assert (raised.value.kind, raised.value.retryable) == ("internal", False)
    assert "not a JSON object" in raised.value.message
    assert "not a chunk" in raised.value.message


@pytest.mark.parametrize("done", [True, False], ids=["with-done", "without-done"])
def test_a_stream_that_ends_without_a_finish_reason_is_a_retryable_error(fake_server, done):
    chunks = openai_text_chunks(["Half of", " an answ"], usage=None)[:3]
    fake_server.openai(openai_sse(chunks, done=done))
    pieces: list[str] = []

    with pytest.raises(ModelError) as raised:
        client_for(fake_server).complete(ask(), pieces.append)

    assert (raised.value.kind, raised.value.retryable) == ("unavailable", True)
    assert "stream ended before the reply was complete" in raised.value.message
    assert pieces == ["Half of", " an answ"]


def test_a_connection_reset_mid_stream_is_a_retryable_error(fake_server):
    reset = openai_text(["Once", " upon", " a", " time"])
    reset.reset_after = 3
    fake_server.openai(reset)
    pieces: list[str] = []

    with pytest.raises(ModelError) as raised:
        client_for(fake_server).complete(ask(), pieces.append)

    assert (raised.value.kind, raised.value.retryable) == ("unavailable", True)
    assert raised.value.message.startswith(
        "local:qwen3:8b: the stream ended before the reply was complete"
    )
    assert pieces == ["Once", " upon"]


@pytest.mark.parametrize(
    ("error", "kind", "retryable"),
    [
        # OpenAI
        (
            {"message": "The server had an error.", "type": "server_error", "code": None},
            "unavailable",
            True,
        ),
        (
            {"message": "Rate limit reached.", "type": "tokens", "code": "rate_limit_exceeded"},
            "rate_limited",
            True,
        ),
        (
            {"message": "Overloaded.", "type": "server_error", "code": "server_is_overloaded"},
            "unavailable",
            True,
        ),
        # Ollama
        (
            {"message": "model runner stopped", "type": "api_error", "param": None, "code": None},
            "unavailable",
            True,
        ),
        # llama.cpp: the HTTP status in ``code``
        (
            {"code": 503, "message": "Loading model", "type": "unavailable_error"},
            "unavailable",
            True,
        ),
        (
            {"code": 400, "message": "context too long", "type": "exceed_context_size_error"},
            "invalid_call",
            False,
        ),
        # vLLM
        (
            {"message": "engine dead", "type": "InternalServerError", "param": None, "code": 500},
            "unavailable",
            True,
        ),
    ],
    ids=[
        "openai-server-error",
        "openai-rate-limit",
        "openai-overloaded",
        "ollama",
        "llamacpp-loading",
        "llamacpp-context",
        "vllm",
    ],
)
def test_errors_inside_the_stream(fake_server, error, kind, retryable):
    fake_server.openai(openai_stream_error(error))
    pieces: list[str] = []

    with pytest.raises(ModelError) as raised:
        client_for(fake_server).complete(ask(), pieces.append)

    assert (raised.value.kind, raised.value.retryable) == (kind, retryable)
    assert "error in the stream" in raised.value.message
    assert raised.value.message.endswith(f": {error['message']}")
    assert pieces == ["Partial"]
