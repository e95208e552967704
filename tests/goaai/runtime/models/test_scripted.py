"""The offline scripted model: which rule a message triggers, the tool call it asks
for first, and the sentence it makes of the tool's answer."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from goaai.runtime.models import ModelRequest, ToolSpec, get_model_client
from goaai.runtime.models.scripted import HELP_TEXT, ScriptedModel, understand
from goaai.runtime.tools import tools_for
from goaai.runtime.types import Message, ToolCallRequest, ToolOutcome

ALL_TOOLS = tuple(
    ToolSpec(name=t.name, description=t.description, parameters=t.json_schema())
    for t in tools_for(("memory", "clock", "calculator", "text")).values()
)


@pytest.mark.parametrize(
    ("text", "tool", "arguments"),
    [
        (
            "remember my favourite colour is green",
            "memory_store",
            {"key": "favourite colour", "value": "green", "scope": "session"},
        ),
        (
            "Please remember that the capital is Rome.",
            "memory_store",
            {"key": "capital", "value": "Rome", "scope": "session"},
        ),
        (
            "remember door code: 1234",
            "memory_store",
            {"key": "door code", "value": "1234", "scope": "session"},
        ),
        (
            "always remember my name is Ada",
            "memory_store",
            {"key": "name", "value": "Ada", "scope": "user"},
        ),
        ("what is my favourite colour?", "memory_recall", {"key": "favourite colour"}),
        ("What's my name", "memory_recall", {"key": "name"}),
        ("recall favourite colour", "memory_recall", {"key": "favourite colour"}),
        ("do you remember my name?", "memory_recall", {"key": "name"}),
        ("forget my favourite colour", "memory_forget", {"key": "favourite colour"}),
        ("calculate 2 * (3 + 4)", "calculator", {"expression": "2 * (3 + 4)"}),
        ("what is 6*7?", "calculator", {"expression": "6*7"}),
        ("compute sqrt(16) + 1", "calculator", {"expression": "sqrt(16) + 1"}),
        ("12 / 4", "calculator", {"expression": "12 / 4"}),
        ("what time is it?", "clock_now", {"timezone": "UTC"}),
        ("what time is it in Europe/Rome?", "clock_now", {"timezone": "Europe/Rome"}),
        ("time in Asia/Tokyo", "clock_now", {"timezone": "Asia/Tokyo"}),
        ("what's the date", "clock_now", {"timezone": "UTC"}),
        ("echo hello world", "echo", {"text": "hello world"}),
        ("say: hi", "echo", {"text": "hi"}),
        ("repeat after me", "echo", {"text": "after me"}),
    ],
)
def test_understand_maps_a_message_to_its_tool_call(text, tool, arguments):
    intent = understand(text)

    assert (intent.tool, intent.arguments, intent.reply) == (tool, arguments, "")


def test_understand_notes_whether_the_user_said_my():
    assert understand("remember my colour is red").possessive is True
    assert understand("remember the colour is red").possessive is False


@pytest.mark.parametrize(
    "text", ["remember green", "remember my colour is ", "remember my colour:"]
)
def test_an_incomplete_remember_is_answered_with_how_to_say_it(text):
    intent = understand(text)

    assert intent.tool == ""
    assert "remember <something> is <value>" in intent.reply


@pytest.mark.parametrize("text", ["hello", "", "thanks!"])
def test_anything_else_is_answered_with_what_the_model_can_do(text):
    assert understand(text).reply == HELP_TEXT


# complete()


def _request(*messages: Message, tools=ALL_TOOLS) -> ModelRequest:
    return ModelRequest(
        messages=(Message(role="system", content="Be brief."), *messages), tools=tools
    )


def test_first_turn_asks_for_the_tool_and_says_nothing():
    deltas: list[str] = []

    reply = ScriptedModel().complete(
        _request(Message(role="user", content="remember my favourite colour is green")),
        deltas.append,
    )

    assert reply.text == ""
    assert reply.tool_calls == (
        ToolCallRequest(
            id="call_1",
            name="memory_store",
            arguments={"key": "favourite colour", "value": "green", "scope": "session"},
        ),
    )
    assert reply.model == "scripted"
    assert reply.usage.input_tokens > 0
    assert deltas == []


def _after_tool(user_text: str, name: str, arguments: dict, outcome: ToolOutcome) -> ModelRequest:
    call = ToolCallRequest(id="call_1", name=name, arguments=arguments)
    return _request(
        Message(role="user", content=user_text),
        Message(role="assistant", tool_calls=(call,)),
        Message(
            role="tool", content=json.dumps(outcome.for_model()), tool_call_id="call_1", name=name
        ),
    )


@pytest.mark.parametrize(
    ("user_text", "name", "result", "sentence"),
    [
        (
            "remember my favourite colour is green",
            "memory_store",
            {"key": "favourite colour", "value": "green", "scope": "session", "version": 1},
            "Got it. I'll remember in this conversation that your favourite colour is green.",
        ),
        (
            "always remember my name is Ada",
            "memory_store",
            {"key": "name", "value": "Ada", "scope": "user", "version": 1},
            "Got it. I'll remember in every conversation that your name is Ada.",
        ),
        (
            "what is my favourite colour?",
            "memory_recall",
            {"key": "favourite colour", "found": True, "value": "green", "scope": "session"},
            "Your favourite colour is green.",
        ),
        (
            "forget my favourite colour",
            "memory_forget",
            {"key": "favourite colour", "scope": "session", "forgotten": True},
            "Done. I've forgotten your favourite colour.",
        ),
        ("what is 6*7", "calculator", {"expression": "6*7", "value": 42}, "6*7 = 42"),
        (
            "what time is it in Europe/Rome",
            "clock_now",
            {"iso": "2026-11-29T14:05:09+01:00", "timezone": "Europe/Rome", "weekday": "Sunday"},
            "It's 14:05 on Sunday 2026-11-29 (Europe/Rome).",
        ),
        ("echo hello  there", "echo", {"text": "hello there"}, "hello there"),
    ],
)
def test_after_a_tool_result_the_model_answers_with_a_sentence(user_text, name, result, sentence):
    deltas: list[str] = []
    arguments = understand(user_text).arguments or {}

    reply = ScriptedModel().complete(
        _after_tool(user_text, name, arguments, ToolOutcome(result=result)), deltas.append
    )

    assert reply.tool_calls == ()
    assert reply.text == sentence
    assert "".join(deltas) == sentence
    assert len(deltas) == len(sentence.split())
    assert reply.usage.output_tokens > 0


def test_a_recall_that_finds_nothing_searches_then_says_what_it_found():
    not_found = ToolOutcome(result={"key": "favourite colour", "found": False})
    request = _after_tool(
        "what is my favourite colour?", "memory_recall", {"key": "favourite colour"}, not_found
    )

    search = ScriptedModel().complete(request)
    assert search.tool_calls == (
        ToolCallRequest(id="call_2", name="memory_search", arguments={"query": "favourite colour"}),
    )
    found = {"query": "favourite colour", "facts": [{"key": "colour", "value": "green"}]}
    answered = ModelRequest(
        messages=(
            *request.messages,
            Message(role="assistant", tool_calls=search.tool_calls),
            Message(
                role="tool",
                content=json.dumps(ToolOutcome(result=found).for_model()),
                tool_call_id="call_2",
                name="memory_search",
            ),
        ),
        tools=request.tools,
    )
    assert ScriptedModel().complete(answered).text == (
        "I have nothing under your favourite colour exactly, but I remember colour: green."
    )
    without_search = replace(
        request, tools=tuple(t for t in request.tools if t.name != "memory_search")
    )
    assert ScriptedModel().complete(without_search).text == (
        "I don't know your favourite colour yet. "
        'Tell me with "remember my favourite colour is ...".'
    )


def test_a_failed_tool_is_reported_to_the_user():
    outcome = ToolOutcome(error_kind="domain_rejection", error_message="Division by zero.")

    reply = ScriptedModel().complete(
        _after_tool("calculate 1/0", "calculator", {"expression": "1/0"}, outcome)
    )

    assert reply.text == "I couldn't do that: Division by zero."


def test_a_plain_reply_is_streamed_and_complete():
    deltas: list[str] = []

    reply = ScriptedModel().complete(_request(Message(role="user", content="hello")), deltas.append)

    assert reply.text == HELP_TEXT
    assert "".join(deltas) == HELP_TEXT
    assert reply.tool_calls == ()


def test_without_the_tool_it_needs_the_model_says_so():
    reply = ScriptedModel().complete(
        _request(Message(role="user", content="what is 6*7"), tools=())
    )

    assert reply.tool_calls == ()
    assert reply.text == "I would use the calculator tool for that, but I don't have it here."


def test_only_the_latest_user_message_counts():
    reply = ScriptedModel().complete(
        _request(
            Message(role="user", content="remember my favourite colour is green"),
            Message(role="assistant", content="Got it."),
            Message(role="user", content="what is my favourite colour?"),
        )
    )

    assert [(c.name, c.arguments) for c in reply.tool_calls] == [
        ("memory_recall", {"key": "favourite colour"})
    ]


def test_the_scripted_model_is_chosen_by_name():
    assert isinstance(get_model_client("scripted", {}), ScriptedModel)
    with pytest.raises(Exception, match="No model client for 'gpt-9'"):
        get_model_client("gpt-9", {})


def test_call_by_name_asks_for_that_tool_with_its_json_arguments():
    reply = ScriptedModel().complete(
        _request(Message(role="user", content='call echo {"text": "two  spaces"}'))
    )

    assert reply.tool_calls == (
        ToolCallRequest(id="call_1", name="echo", arguments={"text": "two  spaces"}),
    )


def test_call_by_name_of_a_tool_the_agent_lacks_says_so():
    reply = ScriptedModel().complete(_request(Message(role="user", content="call launch_rocket")))

    assert reply.tool_calls == ()
    assert reply.text == "I would use the launch_rocket tool for that, but I don't have it here."


@pytest.mark.parametrize(
    ("text", "reply"),
    [
        ("call echo {text", "The arguments for echo are not JSON"),
        ('call echo {"text": 1} [2]', "The arguments for echo are not JSON"),
    ],
)
def test_call_by_name_with_arguments_that_are_not_a_json_object_says_so(text, reply):
    answer = ScriptedModel().complete(_request(Message(role="user", content=text)))

    assert answer.tool_calls == ()
    assert answer.text.startswith(reply)


def test_call_in_a_sentence_is_not_a_tool_call():
    assert understand("call me tomorrow").tool == ""


def test_a_tool_without_a_sentence_of_its_own_is_answered_with_its_json_result():
    outcome = ToolOutcome(result={"timezone": "Europe/Rome", "is_dst": False})

    reply = ScriptedModel().complete(
        _after_tool(
            'call get_current_time {"timezone": "Europe/Rome"}',
            "get_current_time",
            {"timezone": "Europe/Rome"},
            outcome,
        )
    )

    assert reply.text == 'get_current_time answered: {"timezone": "Europe/Rome", "is_dst": false}'
