"""``manage.py chat``: talking to an agent from a terminal, watching its tool calls.

The command is driven through ``call_command`` with its output captured; runs are
executed inline. Where the agent waits for a person, the terminal's ``input`` is
replaced by the answers a user would type. (A real terminal, with streaming and
Ctrl-C: ``test_chat_terminal.py``.)
"""

from __future__ import annotations

import dataclasses
import io
import json
import re
import threading

import pytest
from channels.layers import get_channel_layer
from django.core.management import CommandError, call_command

from goaai.runtime import rt
from goaai.runtime.agents import ASSISTANT, AgentRegistry
from goaai.runtime.conversation import ConversationSettings
from goaai.runtime.vocabulary import Multitask, RunStatus, StopKind, ToolCallStatus
from memory_app.models import MemoryEntry
from runs_app.models import Run, ToolCall
from runs_app.terminal import feed as feed_module
from runs_app.terminal.transcript import Transcript
from sessions_app.models import Session
from sessions_app.publisher import publisher, session_group


def chat(*args: str) -> list[str]:
    out = io.StringIO()
    call_command("chat", *args, stdout=out, no_color=True)
    return out.getvalue().splitlines()


@pytest.fixture
def typed(monkeypatch):
    """Answers the user types at the terminal's prompts, in order; the prompts
    shown are kept. An exhausted list is the end of input (Ctrl-D)."""
    answers: list[str] = []
    prompts: list[str] = []

    def fake_input(prompt: str = "") -> str:
        prompts.append(prompt)
        if not answers:
            raise EOFError
        return answers.pop(0)

    monkeypatch.setattr("builtins.input", fake_input)
    return answers, prompts


@pytest.mark.django_db(transaction=True)
def test_a_message_shows_the_tool_call_its_result_and_the_answer(inline_runtime, owner):
    lines = chat("--agent", "assistant", "--user", "alice", "--message", "calculate 2*3")

    session = Session.objects.get()
    assert (session.owner, session.agent, session.title) == (owner, "assistant", "Terminal chat")
    assert len(lines) == 4
    assert lines[0] == f"Session {session.id} with assistant. Ctrl-C stops a run, Ctrl-D leaves."
    assert lines[1] == '  -> calculator({"expression": "2*3"})'
    shown, _, result = lines[2].partition(": ")
    # (PostgreSQL's jsonb keeps its own key order: compare the JSON, not the text.)
    assert (shown, json.loads(result)) == ("  <- calculator", {"expression": "2*3", "value": 6})
    assert lines[3] == "assistant> 2*3 = 6"
    run = Run.objects.get()
    assert (run.session_id, run.input, run.status) == (
        session.id,
        "calculate 2*3",
        RunStatus.COMPLETED,
    )


@pytest.mark.django_db(transaction=True)
def test_several_messages_are_sent_one_after_the_other_in_one_session(inline_runtime, owner):
    lines = chat(
        "--user",
        "alice",
        "--message",
        "remember my favourite colour is green",
        "--message",
        "what is my favourite colour?",
    )

    answers = [line for line in lines if line.startswith("assistant> ")]
    assert answers == [
        "assistant> Got it. I'll remember in this conversation that your favourite colour is "
        "green.",
        "assistant> Your favourite colour is green.",
    ]
    session = Session.objects.get()
    assert session.runs.count() == 2
    assert MemoryEntry.objects.get().session_id == session.id


@pytest.mark.django_db(transaction=True)
def test_a_failed_tool_call_is_shown_with_its_kind_and_message(inline_runtime, owner):
    lines = chat("--user", "alice", "--message", "calculate 1/0")

    assert lines[1:] == [
        '  -> calculator({"expression": "1/0"})',
        "  <- calculator failed (domain_rejection): Division by zero.",
        "assistant> I couldn't do that: Division by zero.",
    ]


@pytest.mark.django_db(transaction=True)
def test_an_unknown_agent_is_refused_with_the_list_of_agents(inline_runtime, owner):
    with pytest.raises(CommandError) as raised:
        chat("--agent", "nobody", "--user", "alice", "--message", "hi")

    assert str(raised.value) == "No agent named 'nobody'. Agents: assistant, concierge."
    assert not Session.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_an_unknown_user_or_session_is_refused(inline_runtime, owner):
    with pytest.raises(CommandError, match="No such user"):
        chat("--user", "mallory", "--message", "hi")
    with pytest.raises(CommandError, match="No session not-a-session"):
        chat("--session", "not-a-session", "--message", "hi")
    assert not Run.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_session_continues_an_earlier_conversation(inline_runtime, owner):
    session = rt.create_session(owner=owner)
    rt.run("assistant", "remember my favourite colour is green", session=session.id)

    lines = chat("--session", str(session.id), "--message", "what is my favourite colour?")

    assert lines[:2] == [
        f"Session {session.id} with assistant. Ctrl-C stops a run, Ctrl-D leaves.",
        "(continuing after 1 earlier runs)",
    ]
    assert lines[-1] == "assistant> Your favourite colour is green."
    assert Session.objects.count() == 1
    assert Run.objects.filter(session_id=session.id).count() == 2


@pytest.mark.django_db(transaction=True)
def test_continuing_a_concierge_session_counts_the_users_messages_not_delegations(
    inline_runtime, owner
):
    """One message to the concierge ran the assistant as a child run; the user
    sent one message, and is told so."""
    session = rt.create_session(owner=owner, agent="concierge")
    rt.run("concierge", "remember my pet is a cat", session=session.id)
    assert Run.objects.filter(session_id=session.id).count() == 2  # the run and its child

    lines = chat("--session", str(session.id), "--message", "what time is it?")

    assert lines[1] == "(continuing after 1 earlier runs)"


@pytest.mark.django_db(transaction=True)
def test_the_agents_question_is_answered_at_the_terminal(inline_runtime, owner, typed):
    answers, prompts = typed
    answers.append("Ada")

    lines = chat("--user", "alice", "--message", "ask me for my name")

    assert prompts == ["Answer: "]
    assert lines[1:] == [
        "  ? What is your name?",
        '  <- ask_user: {"answer": "Ada"}',
        "assistant> Thanks! Your name is Ada.",
    ]
    call = ToolCall.objects.get()
    assert (call.name, call.status, call.result) == (
        "ask_user",
        ToolCallStatus.SUCCEEDED,
        {"answer": "Ada"},
    )
    assert call.decided_by == owner


@pytest.mark.django_db(transaction=True)
def test_a_question_with_choices_shows_them_numbered_and_takes_a_number(
    inline_runtime, owner, typed
):
    answers, prompts = typed
    answers.append("2")

    lines = chat("--user", "alice", "--message", "ask me to choose between tea, coffee or water")

    shown = lines.index("    1. tea")
    assert lines[shown - 1].startswith("  ? ")
    assert lines[shown : shown + 3] == ["    1. tea", "    2. coffee", "    3. water"]
    assert prompts == ["Answer (a number, or in words): "]
    call = ToolCall.objects.get(name="ask_user")
    assert call.result == {"answer": "coffee", "chosen": ["coffee"]}


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    ("typed_answers", "status", "answer", "remembered"),
    [
        (
            ["y", ""],
            ToolCallStatus.SUCCEEDED,
            "assistant> Done. I've forgotten everything in this conversation: favourite colour.",
            False,
        ),
        (
            ["n", "I changed my mind"],
            ToolCallStatus.DENIED,
            "assistant> I couldn't do that: A person denied this call: I changed my mind",
            True,
        ),
    ],
    ids=["approved", "denied"],
)
def test_a_call_that_needs_approval_is_asked_about_at_the_terminal(
    inline_runtime, owner, typed, typed_answers, status, answer, remembered
):
    answers, prompts = typed
    session = rt.create_session(owner=owner)
    rt.run("assistant", "remember my favourite colour is green", session=session.id)
    answers.extend(typed_answers)

    lines = chat("--session", str(session.id), "--message", "forget everything")

    assert "  ? memory_forget_all({}) waits for your approval" in lines
    assert prompts == ["Approve? [y/N] ", "Reason (optional): "]
    assert lines[-1] == answer
    call = ToolCall.objects.get(name="memory_forget_all")
    assert (call.status, call.decided_by) == (status, owner)
    assert MemoryEntry.objects.filter(session_id=session.id).exists() is remembered


@pytest.mark.django_db(transaction=True)
def test_a_question_of_an_agent_called_as_a_tool_is_answered_at_the_terminal(
    inline_runtime, owner, typed
):
    """The concierge asks the assistant, which asks the user: the terminal asks,
    and the answer goes to the assistant's run."""
    answers, prompts = typed
    answers.append("Ada")

    lines = chat(
        "--agent",
        "concierge",
        "--user",
        "alice",
        "--message",
        "ask the assistant ask me for my name",
    )

    assert prompts == ["Answer: "]
    assert "  ? What is your name?" in lines
    child = Run.objects.get(parent_run__isnull=False)
    assert child.status == RunStatus.COMPLETED
    assert ToolCall.objects.get(run=child, name="ask_user").result == {"answer": "Ada"}
    assert Run.objects.get(parent_run__isnull=True).status == RunStatus.COMPLETED


@pytest.mark.django_db(transaction=True)
def test_closing_the_terminal_at_a_question_stops_the_run_and_leaves(inline_runtime, owner, typed):
    lines = chat("--user", "alice", "--message", "ask me for my name", "--message", "echo hi")

    assert lines[-1] == "Stopped."
    run = Run.objects.get()
    assert (run.status, run.cancel_reason) == (RunStatus.CANCELED, "the terminal closed")
    assert (run.cancel_kind, run.cancel_requested_by) == (StopKind.USER, owner)


@pytest.mark.django_db(transaction=True)
def test_without_messages_the_command_reads_lines_until_end_of_input(inline_runtime, owner, typed):
    answers, prompts = typed
    answers.extend(["echo one", "   ", "echo two"])

    lines = chat("--user", "alice")

    assert [line for line in lines if line.startswith("assistant> ")] == [
        "assistant> one",
        "assistant> two",
    ]
    assert prompts == ["you> "] * 4
    assert re.fullmatch(
        r"Session \S+ with assistant\. Ctrl-C stops a run, Ctrl-D leaves\.", lines[0]
    )
    assert Run.objects.count() == 2


@pytest.mark.django_db(transaction=True)
def test_the_answer_comes_through_the_live_feed_as_it_is_written(
    inline_runtime, owner, monkeypatch
):
    pieces: list[str] = []
    shown = Transcript.delta

    def delta(self, piece):
        pieces.append(piece.text)
        shown(self, piece)

    monkeypatch.setattr(Transcript, "delta", delta)

    lines = chat("--user", "alice", "--message", "echo one two three")

    # The first word comes at once; words written within one frame after it come
    # joined (sessions_app.publisher.DeltaCoalescer).
    assert pieces[0] == "one "
    assert "".join(pieces) == "one two three"
    assert lines[-1] == "assistant> one two three"


@pytest.mark.django_db(transaction=True)
def test_without_a_channel_layer_the_chat_follows_the_database(inline_runtime, owner, monkeypatch):
    monkeypatch.setattr(feed_module, "get_channel_layer", lambda: None)

    lines = chat("--user", "alice", "--message", "calculate 2*3")

    assert lines[1] == (
        "(no live updates: no channel layer is configured; each step shows once it is recorded)"
    )
    assert lines[-1] == "assistant> 2*3 = 6"


@pytest.mark.django_db(transaction=True)
def test_the_live_feed_leaves_nothing_behind(inline_runtime, owner):
    """A chat that ended is no subscriber any more, and its thread is gone."""
    chat("--user", "alice", "--message", "echo one")

    session = Session.objects.get()
    layer = get_channel_layer()
    assert not layer.groups.get(session_group(session.id))
    assert "goaai-chat-feed" not in {thread.name for thread in threading.enumerate()}
    assert publisher._server_loop is None or not publisher._server_loop.is_closed()


@pytest.mark.django_db(transaction=True)
def test_a_message_refused_while_another_run_is_active_is_not_sent(inline_runtime, owner):
    strict = dataclasses.replace(
        ASSISTANT, id="strict", conversation=ConversationSettings(multitask=Multitask.REJECT)
    )
    rt.configure(agents=AgentRegistry([ASSISTANT, strict]))
    session = rt.create_session(owner=owner, agent="strict")
    # A run started elsewhere (the web chat) waits for the user's answer there.
    waiting = rt.start("strict", "ask me for my name", session=session.id)
    assert rt.get_run(waiting.run_id).status == RunStatus.AWAITING_INPUT
    out, err = io.StringIO(), io.StringIO()

    call_command(
        "chat", "--session", str(session.id), "--message", "echo hi", stdout=out, stderr=err
    )

    assert f"Not sent: Run {waiting.run_id}" in err.getvalue()
    assert "one message at a time" in err.getvalue()
    assert Run.objects.filter(session_id=session.id).count() == 1
