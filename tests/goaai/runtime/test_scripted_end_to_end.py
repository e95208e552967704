"""Every rule of the offline scripted model, end to end through ``rt``, the turn
loop, the real tools and the database.

For each message a user could send, the test checks what they would later find
in the record: how the run ended and what it answered, each turn (what the model
was sent and what it replied), each tool call (arguments, status, result or
error), what the agent now remembers, and the run's events in order.
"""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass, field
from typing import Any

import pytest

from goaai.runtime import rt
from goaai.runtime.agents import ASSISTANT
from goaai.runtime.models.scripted import HELP_TEXT
from goaai.runtime.vocabulary import EventType, RunStatus, ToolCallStatus
from runs_app.models import Run, ToolCall
from sessions_app.models import RunEvent

E = EventType
# 14:05:09 UTC on a Sunday; 23:05 in Tokyo.
FIXED_NOW = dt.datetime(2026, 11, 29, 14, 5, 9, tzinfo=dt.UTC)

DIRECT_ANSWER = [
    E.RUN_CREATED,
    E.RUN_STARTED,
    E.TURN_STARTED,
    E.TURN_COMPLETED,
    E.MESSAGE_COMPLETED,
    E.USAGE,
    E.RUN_COMPLETED,
]


def one_tool_call(outcome: EventType, *, memory: EventType | None = None) -> list[EventType]:
    """The events of a run that calls one tool, then answers."""
    return [
        E.RUN_CREATED,
        E.RUN_STARTED,
        E.TURN_STARTED,
        E.TURN_COMPLETED,
        E.USAGE,
        E.TOOL_CALL_SCHEDULED,
        E.TOOL_CALL_STARTED,
        *([memory] if memory else []),
        outcome,
        E.TURN_STARTED,
        E.TURN_COMPLETED,
        E.MESSAGE_COMPLETED,
        E.USAGE,
        E.RUN_COMPLETED,
    ]


@dataclass(frozen=True)
class Rule:
    """One message, what the scripted model does with it, and what is left after."""

    prompt: str
    tool: str = ""
    arguments: dict[str, Any] = field(default_factory=dict)
    result: dict[str, Any] | None = None
    error: tuple[str, str] | None = None
    answer: str = ""
    events: list[EventType] = field(default_factory=list)
    # Messages sent earlier in the same session.
    before: tuple[str, ...] = ()
    # What ``rt.get_memory`` finds for these keys afterwards: (value, scope), or None.
    memory: dict[str, tuple[Any, str] | None] = field(default_factory=dict)
    # What the model's instructions say it remembers when the run starts.
    remembered: str = ""


RULES = {
    "remember for this conversation": Rule(
        prompt="remember my favourite colour is green",
        tool="memory_store",
        arguments={"key": "favourite colour", "value": "green", "scope": "session"},
        result={"key": "favourite colour", "value": "green", "scope": "session", "version": 1},
        answer="Got it. I'll remember in this conversation that your favourite colour is green.",
        events=one_tool_call(E.TOOL_CALL_SUCCEEDED, memory=E.MEMORY_STORED),
        memory={"favourite colour": ("green", "session")},
    ),
    "remember again updates the fact": Rule(
        before=("remember my favourite colour is green",),
        prompt="remember my favourite colour is blue",
        tool="memory_store",
        arguments={"key": "favourite colour", "value": "blue", "scope": "session"},
        result={"key": "favourite colour", "value": "blue", "scope": "session", "version": 2},
        answer="Got it. I'll remember in this conversation that your favourite colour is blue.",
        events=one_tool_call(E.TOOL_CALL_SUCCEEDED, memory=E.MEMORY_STORED),
        memory={"favourite colour": ("blue", "session")},
        remembered="- favourite colour: green (session)",
    ),
    "always remember is for every conversation": Rule(
        prompt="always remember my name is Ada",
        tool="memory_store",
        arguments={"key": "name", "value": "Ada", "scope": "user"},
        result={"key": "name", "value": "Ada", "scope": "user", "version": 1},
        answer="Got it. I'll remember in every conversation that your name is Ada.",
        events=one_tool_call(E.TOOL_CALL_SUCCEEDED, memory=E.MEMORY_STORED),
        memory={"name": ("Ada", "user")},
    ),
    "an incomplete remember explains itself": Rule(
        prompt="remember this",
        answer='Tell me what to remember as "remember <something> is <value>", '
        'for example "remember my favourite colour is green".',
        events=DIRECT_ANSWER,
    ),
    "recall a fact found": Rule(
        before=("always remember my name is Ada",),
        prompt="what is my name?",
        tool="memory_recall",
        arguments={"key": "name"},
        result={"key": "name", "found": True, "value": "Ada", "scope": "user"},
        answer="Your name is Ada.",
        events=one_tool_call(E.TOOL_CALL_SUCCEEDED),
        memory={"name": ("Ada", "user")},
        remembered="- name: Ada (user)",
    ),
    # A recall that finds nothing searches next: tests/memory_app/test_search.py.
    "forget a fact": Rule(
        before=("remember my favourite colour is green",),
        prompt="forget my favourite colour",
        tool="memory_forget",
        arguments={"key": "favourite colour"},
        result={"key": "favourite colour", "scope": "session", "forgotten": True},
        answer="Done. I've forgotten your favourite colour.",
        events=one_tool_call(E.TOOL_CALL_SUCCEEDED, memory=E.MEMORY_DELETED),
        memory={"favourite colour": None},
        remembered="- favourite colour: green (session)",
    ),
    "forget a fact never told": Rule(
        prompt="forget my shoe size",
        tool="memory_forget",
        arguments={"key": "shoe size"},
        error=(
            "domain_rejection",
            "Nothing is remembered under 'shoe size' in the session scope.",
        ),
        answer="I couldn't do that: Nothing is remembered under 'shoe size' in the session scope.",
        events=one_tool_call(E.TOOL_CALL_FAILED),
    ),
    "calculate": Rule(
        prompt="calculate 2 * (3 + 4)",
        tool="calculator",
        arguments={"expression": "2 * (3 + 4)"},
        result={"expression": "2 * (3 + 4)", "value": 14},
        answer="2 * (3 + 4) = 14",
        events=one_tool_call(E.TOOL_CALL_SUCCEEDED),
    ),
    "what is arithmetic": Rule(
        prompt="what is 6*7?",
        tool="calculator",
        arguments={"expression": "6*7"},
        result={"expression": "6*7", "value": 42},
        answer="6*7 = 42",
        events=one_tool_call(E.TOOL_CALL_SUCCEEDED),
    ),
    "division by zero": Rule(
        prompt="calculate 1/0",
        tool="calculator",
        arguments={"expression": "1/0"},
        error=("domain_rejection", "Division by zero."),
        answer="I couldn't do that: Division by zero.",
        events=one_tool_call(E.TOOL_CALL_FAILED),
    ),
    "time in UTC": Rule(
        prompt="what time is it?",
        tool="clock_now",
        arguments={"timezone": "UTC"},
        result={"iso": "2026-11-29T14:05:09+00:00", "timezone": "UTC", "weekday": "Sunday"},
        answer="It's 14:05 on Sunday 2026-11-29 (UTC).",
        events=one_tool_call(E.TOOL_CALL_SUCCEEDED),
    ),
    "time in a time zone": Rule(
        prompt="what time is it in Asia/Tokyo?",
        tool="clock_now",
        arguments={"timezone": "Asia/Tokyo"},
        result={
            "iso": "2026-11-29T23:05:09+09:00",
            "timezone": "Asia/Tokyo",
            "weekday": "Sunday",
        },
        answer="It's 23:05 on Sunday 2026-11-29 (Asia/Tokyo).",
        events=one_tool_call(E.TOOL_CALL_SUCCEEDED),
    ),
    "time in an unknown time zone": Rule(
        prompt="what time is it in Mars/Olympus_Mons?",
        tool="clock_now",
        arguments={"timezone": "Mars/Olympus_Mons"},
        error=("domain_rejection", "Unknown time zone 'Mars/Olympus_Mons'."),
        answer="I couldn't do that: Unknown time zone 'Mars/Olympus_Mons'.",
        events=one_tool_call(E.TOOL_CALL_FAILED),
    ),
    "echo": Rule(
        prompt="echo hello   world",
        tool="echo",
        arguments={"text": "hello world"},
        result={"text": "hello world"},
        answer="hello world",
        events=one_tool_call(E.TOOL_CALL_SUCCEEDED),
    ),
    "anything else gets the help text": Rule(
        prompt="tell a joke",
        answer=HELP_TEXT,
        events=DIRECT_ANSWER,
    ),
}


@pytest.fixture
def fixed_clock(monkeypatch):
    monkeypatch.setattr("goaai.runtime.tools.clock.now", lambda: FIXED_NOW)
    return FIXED_NOW


def _content(messages: list[dict[str, Any]]) -> list[tuple[str, str]]:
    return [(m["role"], m["content"]) for m in messages]


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("rule", RULES.values(), ids=RULES.keys())
def test_scripted_rule_end_to_end(inline_runtime, owner, fixed_clock, rule):
    session = rt.create_session(owner=owner)
    history: list[tuple[str, str]] = []
    for earlier in rule.before:
        done = rt.run("assistant", earlier, session=session.id)
        assert done.status == RunStatus.COMPLETED
        history += [("user", earlier), ("assistant", done.output)]

    info = rt.run("assistant", rule.prompt, session=session.id)

    # How the run ended, as the user reads it.
    assert (info.status, info.output, info.error) == (RunStatus.COMPLETED, rule.answer, None)
    run = Run.objects.get(pk=info.id)
    assert (run.status, run.output, run.error_kind) == (RunStatus.COMPLETED, rule.answer, "")

    # The turns: what the model was sent and what it replied.
    turns = list(run.turns.order_by("index"))
    assert [t.index for t in turns] == list(range(2 if rule.tool else 1))
    first = turns[0]
    system, *conversation = first.request_messages
    assert (system["role"], system["content"]) == ("system", ASSISTANT.system_prompt)
    # What the agent remembers comes apart, after its prompt.
    if rule.remembered:
        remembered, *conversation = conversation
        assert remembered["role"] == "system"
        assert remembered["content"].startswith("What you remember that applies here:")
        assert rule.remembered in remembered["content"].splitlines()
    else:
        assert not any("What you remember" in m["content"] for m in first.request_messages)
    # The earlier runs in full: their tool calls and results between each message
    # and its answer.
    exchanges = [m for m in conversation if m["role"] != "tool" and not m.get("tool_calls")]
    assert _content(exchanges) == [*history, ("user", rule.prompt)]
    if not rule.tool:
        assert (first.response_text, first.response_tool_calls) == (rule.answer, [])
        assert not ToolCall.objects.filter(run=run).exists()
    else:
        assert first.response_text == ""
        assert first.response_tool_calls == [
            {"id": "call_1", "name": rule.tool, "arguments": rule.arguments}
        ]
        second = turns[1]
        assert (second.response_text, second.response_tool_calls) == (rule.answer, [])
        # The model was shown its own call and the tool's answer.
        assert second.request_messages[: len(first.request_messages)] == first.request_messages
        said, answered = second.request_messages[len(first.request_messages) :]
        assert said["role"] == "assistant"
        assert said["tool_calls"] == first.response_tool_calls
        assert (answered["role"], answered["tool_call_id"], answered["name"]) == (
            "tool",
            "call_1",
            rule.tool,
        )
        if rule.error:
            kind, message = rule.error
            shown = {"ok": False, "error": {"kind": kind, "message": message}}
        else:
            shown = {"ok": True, "result": rule.result}
        assert json.loads(answered["content"]) == shown

        # The tool call, as an auditor finds it.
        (call,) = ToolCall.objects.filter(run=run)
        assert (call.turn_id, call.index, call.call_id, call.attempt) == (first.id, 0, "call_1", 1)
        assert (call.name, call.arguments) == (rule.tool, rule.arguments)
        if rule.error:
            assert call.status == ToolCallStatus.FAILED
            assert (call.error_kind, call.error_message, call.result) == (*rule.error, None)
        else:
            assert call.status == ToolCallStatus.SUCCEEDED
            assert (call.result, call.error_kind, call.error_message) == (rule.result, "", "")
        assert call.ended_at is not None

    # What the agent remembers now.
    for key, expected in rule.memory.items():
        found = rt.get_memory(key, session=session.id)
        assert ((found.value, found.scope) if found else None) == expected

    # The run's own events, in order.
    assert (
        list(RunEvent.objects.filter(run=run).order_by("seq").values_list("type", flat=True))
        == rule.events
    )
