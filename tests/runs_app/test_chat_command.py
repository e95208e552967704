"""``manage.py chat``: talking to an agent from a terminal, watching its tool calls.

The command is driven through ``call_command`` with its output captured; runs are
executed inline. Where the agent waits for a person, the terminal's ``input`` is
replaced by the answers a user would type.

For each message the command starts a thread that waits for the run. That thread
never gives its database connection back (see
``test_each_message_gives_its_database_connection_back``), which on PostgreSQL
drains the connection pool for every later test; ``waiters`` notes whether it did
and then closes it.
"""

from __future__ import annotations

import dataclasses
import io
import json
import re
import threading
import types

import pytest
from django.core.management import CommandError, call_command
from django.db import OperationalError, connections

from goaai.runtime import rt
from goaai.runtime.agents import ASSISTANT, AgentRegistry
from goaai.runtime.conversation import ConversationSettings
from goaai.runtime.vocabulary import Multitask, RunStatus, ToolCallStatus
from memory_app.models import MemoryEntry
from runs_app.management.commands import chat as chat_command
from runs_app.models import Run, ToolCall
from sessions_app.models import Session


def chat(*args: str) -> list[str]:
    out = io.StringIO()
    call_command("chat", *args, stdout=out, no_color=True)
    return out.getvalue().splitlines()


class ClosingThread(threading.Thread):
    """A thread that notes whether its job left a database connection open, then
    closes it."""

    started: list[ClosingThread]
    left_open = False

    def start(self) -> None:
        self.started.append(self)
        super().start()

    def run(self) -> None:
        try:
            super().run()
        finally:
            self.left_open = any(
                c.connection is not None for c in connections.all(initialized_only=True)
            )
            connections.close_all()


@pytest.fixture(autouse=True)
def waiters(monkeypatch) -> list[ClosingThread]:
    """The command's waiting threads (which ``ClosingThread`` cleans up after)."""
    started: list[ClosingThread] = []
    monkeypatch.setattr(ClosingThread, "started", started, raising=False)

    shim = types.SimpleNamespace(Thread=ClosingThread, Event=threading.Event)
    monkeypatch.setattr(chat_command, "threading", shim)
    return started


@pytest.fixture
def typed(monkeypatch, waiters):
    """Answers the user types at the terminal's prompts, in order; the prompts
    shown are kept. An exhausted list is the end of input (Ctrl-D)."""
    answers: list[str] = []
    prompts: list[str] = []

    def fake_input(prompt: str = "") -> str:
        # A person takes longer to type than the command's waiting thread takes to
        # read the run: let it finish. (SQLite's shared in-memory test database
        # refuses a reader during a write instead of waiting.)
        for waiter in waiters:
            waiter.join(timeout=10)
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
    assert lines[0] == f"Session {session.id} with assistant. Ctrl-D to leave."
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
        f"Session {session.id} with assistant. Ctrl-D to leave.",
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

    assert prompts == ["What is your name? > "]
    assert lines[-1] == "assistant> Thanks! Your name is Ada."
    call = ToolCall.objects.get()
    assert (call.name, call.status, call.result) == (
        "ask_user",
        ToolCallStatus.SUCCEEDED,
        {"answer": "Ada"},
    )


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    ("typed_answers", "status", "answer", "remembered"),
    [
        (
            ["y"],
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

    assert prompts[0] == "Allow memory_forget_all({})? [y/N] "
    assert lines[-1] == answer
    call = ToolCall.objects.get(name="memory_forget_all")
    assert call.status == status
    assert MemoryEntry.objects.filter(session_id=session.id).exists() is remembered


@pytest.mark.django_db(transaction=True)
def test_closing_the_terminal_at_a_question_cancels_the_run(inline_runtime, owner, typed):
    lines = chat("--user", "alice", "--message", "ask me for my name")

    assert lines[-1] == "run canceled: the terminal closed"
    run = Run.objects.get()
    assert (run.status, run.cancel_reason) == (RunStatus.CANCELED, "the terminal closed")


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
    assert re.fullmatch(r"Session \S+ with assistant\. Ctrl-D to leave\.", lines[0])
    assert Run.objects.count() == 2


class _Abandoned(Exception):
    pass


@pytest.mark.django_db(transaction=True)
def test_the_command_does_not_hang_when_waiting_for_the_run_fails(
    inline_runtime, owner, monkeypatch
):
    """The thread that waits for the run can fail (a dropped connection, an
    exhausted pool); the command must not then wait for it for ever."""

    def broken_wait(run_id, timeout=None):
        raise OperationalError("couldn't get a connection after 10.00 sec")

    # Only the command's waiting thread calls rt.wait.
    monkeypatch.setattr(inline_runtime, "wait", broken_wait)
    # The command polls with time.sleep: a switch to stop it if it hangs.
    abandon = threading.Event()

    def sleep(seconds: float) -> None:
        if abandon.is_set():
            raise _Abandoned
        abandon.wait(seconds)

    monkeypatch.setattr(chat_command, "time", types.SimpleNamespace(sleep=sleep))
    outcome: dict[str, object] = {}

    def run_command() -> None:
        try:
            outcome["lines"] = chat("--user", "alice", "--message", "calculate 2*3")
        except _Abandoned:
            outcome["hung"] = True
        finally:
            connections.close_all()

    command = threading.Thread(target=run_command)
    command.start()
    command.join(timeout=2)
    abandon.set()
    command.join(timeout=10)

    assert "hung" not in outcome, "the command kept waiting after its waiting thread failed"
    assert outcome["lines"][-1] == "assistant> 2*3 = 6"


# An in-memory SQLite database ignores close(), so only PostgreSQL can tell.
@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_each_message_gives_its_database_connection_back(inline_runtime, owner, waiters):
    """A terminal chat is a long-lived process: a connection kept per message
    empties PostgreSQL's connection pool (10 by default), after which every
    message waits for a connection that never comes."""
    chat("--user", "alice", "--message", "echo one", "--message", "echo two")

    for waiter in waiters:
        waiter.join(timeout=10)
    assert len(waiters) == 2
    assert [w.left_open for w in waiters] == [False, False]


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
